"""Plain data that crosses into a run's forked process: what to run (``RunSpec``) and
the requests a story sends (``requests_of``). Imports neither vLLM nor torch."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from kvfault.reference.rules.keys import media_cache_seed
from kvfault.reference.types import Request

BLOCK_SIZE = 16
CHUNK_SIZE = 64  # the lmcache server's chunk size
NUM_BLOCKS = 96
PROMPT_LENS = (150, 200)
# A picture's placeholder: the id every one of its tokens carries (the same for every
# picture, as a multimodal processor writes it; outside the ids ``prompt`` draws), where
# a prompt's one picture starts and how many tokens it takes. It starts inside the first
# block and the first chunk, so every block and chunk key of the prompt depends on it in
# vLLM and in LMCache, as the fake model's pages do (its chain starts from the media).
PICTURE_TOKEN = 31999
PICTURE_AT = 4
PICTURE_TOKENS = 40


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
    pictures: bool = False  # the scheduler has an encoder budget (a multimodal model's)

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


def picture_prompt(rng: random.Random, n: int) -> tuple[int, ...]:
    """``n`` ids: text with one picture's placeholder at ``PICTURE_AT``."""
    text = prompt(rng, n - PICTURE_TOKENS)
    return text[:PICTURE_AT] + (PICTURE_TOKEN,) * PICTURE_TOKENS + text[PICTURE_AT:]


def picture_request(req_id: str, ids: tuple[int, ...], picture: bytes) -> Request:
    """A request with one picture: its bytes and their digest (the model's seed)."""
    return Request(req_id, ids, media_cache_seed((picture,)), (picture,), max_output_tokens=4)


def placeholders(ids: tuple[int, ...] | list[int]) -> list[tuple[int, int]]:
    """Each run of ``PICTURE_TOKEN`` in ``ids``: its offset and length, in order (where
    a multimodal processor finds a prompt's pictures)."""
    runs: list[tuple[int, int]] = []
    for i, t in enumerate(ids):
        if t != PICTURE_TOKEN:
            continue
        if runs and runs[-1][0] + runs[-1][1] == i:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((i, 1))
    return runs
