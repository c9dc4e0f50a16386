"""Plain data that crosses into a run's forked process: what to run (``RunSpec``) and
the requests a story sends (``requests_of``). Imports neither vLLM nor torch."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from kvfault.reference.types import Request

BLOCK_SIZE = 16
CHUNK_SIZE = 64  # the lmcache server's chunk size
NUM_BLOCKS = 96
PROMPT_LENS = (150, 200)


@dataclass(frozen=True)
class RunSpec:
    """One run of a story on one vLLM server, with the fault its row carries."""

    scenario: str
    seed: int
    lmcache_port: int
    out: str
    fault: str | None = None
    policy: str = "fail"  # vLLM's kv_load_failure_policy ("fail" is its default)
    fix: bool = False  # kvfault's guard around the scheduler's completion handling
    prefix_caching: bool = False  # off: a resent prompt loads from lmcache, not HBM
    num_blocks: int = NUM_BLOCKS
    batch_tokens: int = 512
    limit_s: float = 8.0  # a story that has not ended by then hung
    engine: str = "engine_0"  # the server set's name in the events (one per process)
    tag: str = ""  # prefixes the story's request ids (two processes, one trace)
    model_dir: str = ""  # set: the lmcache key namespace processes share; else the run's own
    prompt_set: int = 0  # 0: the seed picks the prompts; else another set for the same seed
    meet: str = ""  # set: a directory where ``parties`` processes meet once each is built
    parties: int = 1

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> RunSpec:
        return cls(**data)  # type: ignore[arg-type]


def prompt(rng: random.Random, n: int) -> tuple[int, ...]:
    return tuple(rng.randrange(10, 30000) for _ in range(n))


def requests_of(
    seed: int, tag: str, prompts: list[tuple[int, ...]], prefix: str = ""
) -> list[Request]:
    return [
        Request(f"{prefix}{tag}{i}-s{seed}", p, max_output_tokens=4) for i, p in enumerate(prompts)
    ]
