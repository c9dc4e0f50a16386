"""The ``vllm`` tier's executor and opener: each run is one story told in a process
forked from a warm interpreter (``kvfault.faults.vllm.zygote``) against the campaign's lmcache
server, and comes back as a ``kvfault.faults.runs.RunResult`` the campaign judges like any
other. Imports no vLLM in the campaign process."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kvfault.faults.errors import KvfaultError
from kvfault.faults.runs import RunContext, RunResult
from kvfault.faults.tiers import Executor, TierUnavailable
from kvfault.faults.vllm.catalog import SCENARIOS, Phase, VllmFault
from kvfault.faults.vllm.spec import BLOCK_SIZE, CHUNK_SIZE, RunSpec
from kvfault.faults.vllm.zygote import Zygote, ZygoteError, ZygotePool
from kvfault.reference.stack.engine import EngineConfig, EngineOutcome
from kvfault.reference.trace import Ev, Trace, TraceEvent
from kvfault.reference.types import Geometry, OperationId, OpKind, Request

INSTALL_HINT = "install it with scripts/install_vllm.sh (docs/vllm/tier.md)"
SETUP_S = 60.0  # a forked run builds its scheduler and registers with lmcache first


class VllmRunError(KvfaultError, RuntimeError):
    """A run's process did not come back with a result."""


class FiredCount:
    """Stands in for an injector in ``RunResult.injectors``: a name and a count."""

    def __init__(self, name: str, fired: int):
        self.name = name
        self.fired = fired
        self.spec = None


class VllmExecutor(Executor):
    """Runs the tier's stories on ``pool``'s warm processes against the lmcache server
    at ``port``. Not deterministic: real processes in real time. A run's seed picks its
    prompts and is its process's ``PYTHONHASHSEED``."""

    tier = "vllm"
    deterministic = False

    def __init__(
        self,
        pool: ZygotePool,
        port: int,
        workdir: str,
        fix: bool = False,
        second_server: Callable[[], int] | None = None,
    ):
        self.pool = pool
        self.port = port
        self.workdir = workdir
        self.fix = fix
        self._second_server = second_server  # starts another lmcache server: its port
        self._second_port: int | None = None

    def _port(self, server: int) -> int:
        if server == 0:
            return self.port
        if self._second_server is None:
            raise VllmRunError("this executor has no second lmcache server")
        if self._second_port is None:
            self._second_port = self._second_server()
        return self._second_port

    def execute(self, scenario: str, ctx: RunContext) -> tuple[RunResult, dict[str, object]]:
        faults = [i for i in ctx.injectors if isinstance(i, VllmFault)]
        row = faults[0].row if faults else None
        story = SCENARIOS[scenario]
        phases = story.processes()
        with contextlib.ExitStack() as stack:
            model_dir = meet = ""
            if len(phases) > 1:  # one lmcache key namespace for every process of the run
                from kvfault.faults.vllm.engine import write_model

                shared = stack.enter_context(
                    tempfile.TemporaryDirectory(prefix="model-", dir=self.workdir)
                )
                model_dir = write_model(Path(shared) / "model")
                if story.concurrent:  # they meet once built, so they are live at once
                    meet = os.path.join(shared, "meet")
                    os.mkdir(meet)
            specs = []
            for i, phase in enumerate(phases):
                out = os.path.join(self.workdir, f"run-{scenario}-{ctx.seed}-{i}.json")
                specs.append(
                    RunSpec(
                        phase.story, ctx.seed, self._port(phase.server), out,
                        fault=row.fault if row and i == 0 else None,
                        policy=row.policy if row else "fail", fix=self.fix,
                        engine=f"engine_{i}", tag=f"e{i}-" if i else "", model_dir=model_dir,
                        prompt_set=phase.prompt_set, meet=meet, parties=len(phases),
                        pictures=story.pictures,
                    )
                )  # fmt: skip
            payloads = self._run(story.concurrent, phases, specs, ctx.seed)
        payload = merged(payloads)
        result = result_of(scenario, ctx.seed, payload, [f.name for f in faults])
        for f in faults:
            f.fired = int(payload.get("fired", 0))
        return result, {"tier": "vllm"}

    def _run(
        self, concurrent: bool, phases: tuple[Phase, ...], specs: list[RunSpec], seed: int
    ) -> list[dict[str, Any]]:
        """Each spec's run in a process forked under its phase's hash seed, one after
        another or all at once; their payloads."""
        limit = specs[0].limit_s + SETUP_S
        for spec in specs:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(spec.out)
        zygotes = [
            self.pool.get(seed + phase.hash_seed, slot=i if concurrent else 0)
            for i, phase in enumerate(phases)
        ]
        if concurrent:
            started: list[tuple[Zygote, int]] = []
            try:
                for z, spec in zip(zygotes, specs, strict=True):
                    started.append((z, z.start(spec.to_json())))
            except BaseException:
                for z, pid in started:  # no run outlives a failed start
                    z.wait(pid, 0.0)
                raise
            rcs = [z.wait(pid, limit) for z, pid in started]
        else:
            rcs = [z.run(spec.to_json(), limit) for z, spec in zip(zygotes, specs, strict=True)]
        payloads = []
        try:
            for spec, rc in zip(specs, rcs, strict=True):
                if rc is None:
                    raise VllmRunError(f"the run's process passed {limit:g}s; killed")
                try:
                    payload = json.loads(Path(spec.out).read_text())
                except (OSError, ValueError) as exc:
                    raise VllmRunError(
                        f"the run's process (exit {rc}) left no result: {exc}"
                    ) from exc
                if "error" in payload:
                    raise VllmRunError(f"the run broke: {payload['error']}")
                payloads.append(payload)
        finally:
            for spec in specs:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(spec.out)
        return payloads

    def case_done(self) -> None:
        pass


def merged(payloads: list[dict[str, Any]]) -> dict[str, Any]:
    """The payloads of one run's processes as one: their events in host-clock order
    (every process stamps the same monotonic clock)."""
    if len(payloads) == 1:
        return payloads[0]
    return {
        "events": sorted((e for p in payloads for e in p["events"]), key=lambda e: e["t"]),
        "requests": [r for p in payloads for r in p["requests"]],
        "hung": any(p["hung"] for p in payloads),
        "aborted": [a for p in payloads for a in p.get("aborted", ())],
        "fired": sum(int(p.get("fired", 0)) for p in payloads),
    }


def result_of(scenario: str, seed: int, payload: dict[str, Any], faults: list[str]) -> RunResult:
    """The run's events as one trace, and what the judge reads beside it."""
    raw = payload["events"]
    t0 = raw[0]["t"] if raw else 0.0
    events = []
    for e in raw:
        op = None
        if e["op"] is not None:
            req, gen, kind = e["op"]
            op = OperationId(req, int(gen), OpKind(kind))
        events.append(TraceEvent(e["t"] - t0, e["step"], Ev(e["kind"]), op, e["req_id"], e["data"]))
    trace = Trace(lambda: 0.0, events=events)
    requests = {
        r["req_id"]: Request(
            r["req_id"],
            tuple(r["prompt"]),
            r["cache_seed"],
            tuple(bytes.fromhex(m) for m in r["media"]),
            max_output_tokens=r["max_tokens"],
        )  # fmt: skip
        for r in payload["requests"]
    }
    outputs = {e.req_id: tuple(e.data["tokens"]) for e in trace.of(Ev.OUTPUT) if e.req_id}
    last = events[-1].t if events else 0.0
    geometry = Geometry(block_size=BLOCK_SIZE, chunk_size=CHUNK_SIZE, prefill_budget=512)
    return RunResult(
        scenario=scenario,
        seed=seed,
        trace=trace,
        config=EngineConfig(geometry=geometry, model_kind="dense"),
        requests=requests,
        outcomes=[EngineOutcome(None, last, 0, outputs, hung=bool(payload["hung"]))],
        injectors=[FiredCount(n, int(payload.get("fired", 0))) for n in faults],  # type: ignore[misc]
        notes={"tier": "vllm", "aborted": sorted(set(payload.get("aborted", ())))},
    )


def vllm_available() -> bool:
    """Whether vllm is installed (a directory named vllm on sys.path, a namespace
    package with no origin, is not vllm)."""
    spec = importlib.util.find_spec("vllm")
    return spec is not None and spec.origin is not None


@contextlib.contextmanager
def vllm_executor(vllm_fix: str | None = None) -> Iterator[VllmExecutor]:
    """The tier's opener: the host-wide real-tier lock, one lmcache server (64-token
    chunks) and the warm interpreters; all stopped on exit, however it ends."""
    if not vllm_available():
        raise TierUnavailable(f"vllm is not installed for this Python; {INSTALL_HINT}")
    from kvfault.faults.lmcache.server import LMCacheServer, RealTierLock

    with contextlib.ExitStack() as stack:
        stack.enter_context(RealTierLock())
        server = stack.enter_context(LMCacheServer(chunk_size=CHUNK_SIZE).start())
        workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="kvfault-vllm-"))
        pool = ZygotePool()
        stack.callback(pool.close)
        try:
            pool.get(0)
        except ZygoteError as exc:
            raise TierUnavailable(f"{exc}; {INSTALL_HINT}") from exc

        def second_server() -> int:
            more = stack.enter_context(LMCacheServer(chunk_size=CHUNK_SIZE).start())
            return more.port

        yield VllmExecutor(
            pool, server.port, workdir, fix=vllm_fix == "on", second_server=second_server
        )
