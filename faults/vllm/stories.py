"""The ``vllm`` tier's stories and faults, told inside a run's forked process.

A story sends kvfault ``Request``s to a ``kvfault.faults.vllm.engine.Server`` in rounds and
steps the engine until each round is answered and its stores are done. A fault acts on
what the runner hands the scheduler (``Faults.deliver``), on the scheduler's inbox (an
abort) or on the forward's duration, and records a ``fault`` event each time it acts.
"""

from __future__ import annotations

import linecache
import os
import random
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from kvfault.faults.vllm.engine import EngineDied, Server, block_hasher, vllm_request, write_model
from kvfault.faults.vllm.events import EventLog
from kvfault.faults.vllm.spec import (
    PROMPT_LENS,
    RunSpec,
    picture_prompt,
    picture_request,
    prompt,
    requests_of,
)
from kvfault.reference.types import Request

IDLE_PAUSE_S = 0.002  # between steps that scheduled nothing (a lookup or store pending)


class Faults:
    """The fault a run's row carries, acting where vLLM's runner output meets its
    scheduler. ``culprit``: the operation a delivery that killed the engine named."""

    def __init__(self, name: str | None, log: EventLog):
        self.name = name
        self.log = log
        self.fired = 0
        self._held: list[str] = []  # completions to deliver again (duplicate / stale)
        self._dropped = False
        self._invalid = False
        self.finished: set[str] = set()  # requests answered (for a stale completion)

    def fire(self, req_id: str | None = None, op: tuple[str, int, str] | None = None,
             **evidence: Any) -> None:  # fmt: skip
        self.fired += 1
        self.log.record("fault", op=op, req_id=req_id, injector=self.name, **evidence)

    def wrap_worker(self, server: Server) -> None:
        """Faults in lmcache's worker: its first retrieve fails (lmcache's own
        ``get_finished`` then reports the load's blocks as load errors), or reports
        two polls late (a slow transfer)."""
        if self.name == "pictures_unkeyed":
            self._unkey_pictures()
            return
        if self.name not in ("invalid_blocks_recompute", "invalid_blocks_fail",
                             "abort_while_loading", "abort_load_same_step"):  # fmt: skip
            return
        ctx = server.worker.worker_adapter.transfer_ctx
        submit = ctx.submit_retrieve
        faults = self

        def submit_retrieve(request_id: str, *args: Any, **kwargs: Any) -> Any:
            future = submit(request_id, *args, **kwargs)
            if faults._invalid:
                return future
            faults._invalid = True
            if faults.name in ("abort_while_loading", "abort_load_same_step"):
                polls = 2 if faults.name == "abort_while_loading" else 1
                faults.fire(op=server.runner.load_op(request_id),
                            what=f"retrieve reports {polls} polls late")  # fmt: skip
                return _Late(future, polls=polls)
            faults.fire(op=server.runner.load_op(request_id), what="lmcache's retrieve failed")
            return _Failed(future)

        ctx.submit_retrieve = submit_retrieve

    def _unkey_pictures(self) -> None:
        """Not a row: the break by hand that shows the judge sees two pictures share KV.
        LMCache's MP request tracker is made to see no pictures, so its lookup, store
        and retrieve keys are the bare token ids (as if it did not fold each picture's
        hash into them); vLLM still hands the pictures to the runner."""
        import lmcache.integration.vllm.lmcache_mp_metadata as tracker

        def no_pictures(request: Any, modify: bool = False) -> tuple[list[Any], list[Any]]:
            return [], []

        tracker.extract_mm_features = no_pictures  # this run's process only
        self.fire(what="LMCache's request tracker sees no pictures")

    def forward_delay(self, index: int) -> float:
        if self.name == "slow_first_forward" and index == 0:
            self.fire(delay_s=2.0, what="first forward takes 2 s")
            return 2.0
        return 0.0

    def deliver(self, server: Server, out: Any) -> Any:
        """The runner's ``KVConnectorOutput`` as the scheduler receives it."""
        import dataclasses

        recv = set(out.finished_recving or ())
        if self._held:
            again = self._held.pop(0)
            recv.add(again)
            what = "stale" if again in self.finished else "duplicate"
            self.fire(op=server.runner.load_op(again), what=f"{what} finished_recving for {again}")
        name = self.name
        if name == "lost_completion" and recv and not self._dropped:
            rid = sorted(recv)[0]
            recv.discard(rid)
            self._dropped = True
            self.fire(op=server.runner.load_op(rid), what=f"finished_recving for {rid} dropped")
        elif name == "duplicated_completion" and recv and not self._dropped:
            self._dropped = True
            self._held.append(sorted(recv)[0])
        elif name == "corrupt_load" and recv and not self._dropped:
            # Not a row: the break by hand that shows the judge sees a wrong restore.
            rid = sorted(recv)[0]
            blocks = server.runner.load_blocks.get(rid, [])
            if blocks:
                self._dropped = True
                server.pages.write(blocks[0], 0)
                self.fire(op=server.runner.load_op(rid),
                          what=f"first block of {rid}'s load overwritten")  # fmt: skip
        return dataclasses.replace(out, finished_recving=recv or None)

    def before_update(self, server: Server, out: Any) -> None:
        """Between the runner's output and ``update_from_output``: the client aborts a
        request in WAITING_FOR_REMOTE_KVS whose load this very output reports finished
        (an abort that arrived during the forward, as vLLM's ``EngineCore.step``
        applies it). No lateness is injected: lmcache's own retrieve answers."""
        if self.name != "abort_in_load_step" or self._dropped or out is None:
            return
        from vllm.v1.request import RequestStatus

        for rid in sorted(out.finished_recving or ()):
            req = server.scheduler.requests.get(rid)
            if req is not None and req.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                self._dropped = True
                self.fire(req_id=rid, aborted=True,
                          what=f"{rid} aborted in the step its load finished")  # fmt: skip
                server.abort(rid)
                return

    def answered(self, req_id: str, loaded: bool) -> None:
        """A request was answered: a stale completion names one that loaded."""
        self.finished.add(req_id)
        if self.name == "stale_completion" and loaded and not self._dropped:
            self._dropped = True
            self._held.append(req_id)

    def after_step(self, server: Server) -> None:
        """Between engine steps: the client aborts a request whose load is in flight,
        or resets the prefix cache with its running requests once a load landed."""
        if self.name == "preempt_after_load" and not self._dropped:
            self._preempt_after_load(server)
        if self.name not in ("abort_while_loading", "abort_load_same_step") or self._dropped:
            return
        from vllm.v1.request import RequestStatus

        sched = server.scheduler
        for rid, req in sched.requests.items():
            in_flight = rid not in sched.finished_recving_kv_req_ids
            if req.status == RequestStatus.WAITING_FOR_REMOTE_KVS and in_flight:
                self._dropped = True
                self.fire(req_id=rid, aborted=True, what=f"{rid} aborted while its load runs")
                server.abort(rid)
                return

    def _preempt_after_load(self, server: Server) -> None:
        """vLLM's ``reset_prefix_cache(reset_running_requests=True)`` (what
        ``LLM.reset_prefix_cache`` reaches through ``EngineCore``) once a request whose
        load was applied runs: it preempts every running request, as KV pressure
        preempts one (``_preempt_request``), and each looks the tier up again."""
        sched = server.scheduler
        applied = {op[0] for op in server.loads_applied}
        loaded = [r.request_id for r in sched.running if r.request_id in applied]
        # vLLM's reset preempts the running requests and then raises unless every block
        # is free: a request waiting for its load, or a finished one whose save is
        # pending (its free delayed), still holds blocks. Reset only once every request
        # the scheduler holds is running, so the row preempts instead of hitting that.
        running_ids = {r.request_id for r in sched.running}
        if not loaded or set(sched.requests) - running_ids:
            return
        self._dropped = True
        running = sorted(r.request_id for r in sched.running)
        try:
            ok = sched.reset_prefix_cache(reset_running_requests=True)
        except RuntimeError as exc:  # an API call's error: the engine goes on
            ok = False
            self.fire(req_id=loaded[0], what=f"reset_prefix_cache raised: {exc}")
            return
        self.fire(req_id=loaded[0], preempted=running, reset=ok,
                  what=f"{', '.join(running)} preempted by reset_prefix_cache")  # fmt: skip


class _Failed:
    """lmcache's retrieve future, answering False (a failed retrieve) once done."""

    def __init__(self, future: Any):
        self._future = future

    def query(self) -> bool:
        return bool(self._future.query())

    def result(self, timeout: float | None = None) -> Any:
        self._future.result(timeout=timeout)
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._future, name)


class _Late(_Failed):
    """lmcache's retrieve future, done only from the ``polls``-th query on."""

    def __init__(self, future: Any, polls: int):
        super().__init__(future)
        self._polls = polls

    def query(self) -> bool:
        self._polls -= 1
        return self._polls < 0 and bool(self._future.query())

    def result(self, timeout: float | None = None) -> Any:
        return self._future.result(timeout=timeout)


class Story:
    """What a story runs on: the server, the log, the faults, and the rounds."""

    def __init__(self, spec: RunSpec, server: Server, log: EventLog, faults: Faults):
        self.spec = spec
        self.server = server
        self.log = log
        self.faults = faults
        self.requests: list[Request] = []
        self.failed: list[str] = []
        self.deadline = time.monotonic() + spec.limit_s
        self.hung = False
        self._hasher = block_hasher()
        self.rng = random.Random(
            spec.seed if not spec.prompt_set else f"{spec.seed}/{spec.prompt_set}"
        )

    def round(self, reqs: list[Request]) -> None:
        """Send ``reqs`` at once and step until each is answered and the engine has
        nothing left (its stores reported), or the run's limit passes (hung)."""
        server = self.server
        for r in reqs:
            self.requests.append(r)
            server.runner.kf[r.req_id] = r
            server.add(vllm_request(r, self._hasher, server.model_id))
        while not server.idle():
            if time.monotonic() > self.deadline:
                self.hung = True
                return
            done = server.step()
            for o in done:
                self._answer(o)
            self.faults.after_step(server)
            if not server.scheduler.running:
                time.sleep(IDLE_PAUSE_S)

    def _answer(self, o: Any) -> None:
        rid = o.request_id
        tokens = self.server.runner.tokens.get(rid, [])
        reason = str(o.finish_reason)
        loaded = rid in self.server.runner.load_range
        if "ERROR" in reason.upper():
            self.failed.append(rid)
            self.log.record("fault", req_id=rid, injector="vllm", aborted=True,
                            what=f"{rid} ended {reason} (kv_load_failure_policy=fail)")  # fmt: skip
        elif "ABORT" not in reason.upper():
            self.log.record("output", req_id=rid, tokens=tokens)
        self.faults.answered(rid, loaded)


def _prompts(story: Story) -> list[tuple[int, ...]]:
    return [prompt(story.rng, n) for n in PROMPT_LENS]


def prefix_reuse(story: Story) -> None:
    """Two prompts stored, then resent: each resend loads its prefix from lmcache."""
    prompts = _prompts(story)
    story.round(requests_of(story.spec.seed, "a", prompts, story.spec.tag))
    story.round(requests_of(story.spec.seed, "b", prompts, story.spec.tag))


def store(story: Story) -> None:
    """Two prompts sent once: their chunks stored in lmcache."""
    story.round(requests_of(story.spec.seed, "a", _prompts(story), story.spec.tag))


def reuse(story: Story) -> None:
    """The same two prompts (the run's seed picks them), sent by a process that did not
    store them: each loads what another process stored."""
    story.round(requests_of(story.spec.seed, "b", _prompts(story), story.spec.tag))


def two_pictures(story: Story) -> None:
    """One prompt (text around a picture's placeholder ids) with picture X, then the
    same ids with picture Y: Y must not load what X stored. Then both again: each loads
    its own picture's prefix."""
    ids = picture_prompt(story.rng, PROMPT_LENS[0])
    x, y = story.rng.randbytes(256), story.rng.randbytes(256)
    seed, tag = story.spec.seed, story.spec.tag
    story.round([picture_request(f"{tag}x0-s{seed}", ids, x)])
    story.round([picture_request(f"{tag}y0-s{seed}", ids, y)])
    story.round([picture_request(f"{tag}x1-s{seed}", ids, x),
                 picture_request(f"{tag}y1-s{seed}", ids, y)])  # fmt: skip


STORIES: dict[str, Callable[[Story], None]] = {
    "prefix_reuse": prefix_reuse,
    "two_pictures": two_pictures,
    "store": store,
    "reuse": reuse,
}


def run(spec: RunSpec) -> dict[str, Any]:
    """Tell ``spec``'s story on a fresh server; everything the judge needs, as data."""
    log = EventLog()
    faults = Faults(spec.fault, log)
    # Under the campaign's own directory, so a run killed at its limit leaves nothing
    # the opener does not remove.
    where = os.path.dirname(spec.out) or None
    with tempfile.TemporaryDirectory(prefix="kvfault-vllm-", dir=where) as tmp:
        model_dir = spec.model_dir or write_model(Path(tmp) / "model")
        server = Server(spec.engine, spec, model_dir, log, faults)
        if spec.meet:
            _meet(spec)
        story = Story(spec, server, log, faults)
        died = None
        try:
            STORIES[spec.scenario](story)
        except EngineDied as exc:
            cause = exc.__cause__ or exc
            died = f"{type(cause).__name__}: {cause}"
            op = _culprit(cause)
            log.record("stop", op=op, error=type(cause).__name__, message=str(cause),
                       where=_where(cause))  # fmt: skip
        finally:
            if died is None and not story.hung:
                server.quiescent()
            server.close()
    return {
        "events": log.events,
        "requests": [_plain(r) for r in story.requests],
        "hung": story.hung,
        "aborted": story.failed
        + [e["req_id"] for e in log.events if e["kind"] == "fault" and e["data"].get("aborted")],
        "fired": faults.fired,
        "died": died,
    }


MEET_S = 30.0  # how long processes that run at once wait for each other to be built


def _meet(spec: RunSpec) -> None:
    """Wait until every process of the run has built its server (each leaves its name
    in ``spec.meet``), so that they are live at once; at most ``MEET_S``."""
    Path(spec.meet, spec.engine).touch()
    deadline = time.monotonic() + MEET_S
    while len(os.listdir(spec.meet)) < spec.parties and time.monotonic() < deadline:
        time.sleep(0.01)


def _culprit(exc: BaseException) -> tuple[str, int, str] | None:
    """The completion vLLM choked on: the ``req_id`` of the innermost frame that had
    one, a save when the line it raised at is inside the loop over the output's
    ``finished_sending``, a load inside the loop over its ``finished_recving``. An id
    can be in both sets of one output; the loop, not the sets, says which report vLLM
    was handling. Where neither loop encloses the line: a save only if the id is in
    ``finished_sending`` alone."""
    tb = exc.__traceback__
    found = None
    while tb is not None:
        frame = tb.tb_frame
        if "req_id" in frame.f_locals and isinstance(frame.f_locals["req_id"], str):
            rid = frame.f_locals["req_id"]
            loop = _report_loop(frame.f_code, tb.tb_lineno)
            if loop is None:
                out = frame.f_locals.get("kv_connector_output")
                sends = set(getattr(out, "finished_sending", None) or ())
                recvs = set(getattr(out, "finished_recving", None) or ())
                loop = "finished_sending" if rid in sends - recvs else "finished_recving"
            found = (rid, 0, "save") if loop == "finished_sending" else (rid, 0, "load")
        tb = tb.tb_next
    return found


REPORT_SETS = ("finished_sending", "finished_recving")


def _report_loop(code: Any, line: int) -> str | None:
    """Which of ``REPORT_SETS`` the innermost ``for`` around ``line`` of ``code``
    iterates, read from the source that ran (outward from ``line``, each enclosing
    statement less indented than the last); None when the nearest ``for`` iterates
    neither, or none encloses it."""
    text = linecache.getline(code.co_filename, line)
    indent = len(text) - len(text.lstrip())
    for n in range(line - 1, code.co_firstlineno - 1, -1):
        text = linecache.getline(code.co_filename, n)
        body = text.lstrip()
        if not body or body[0] in "#)]}" or len(text) - len(body) >= indent:
            continue  # blank, a comment, a bracket closing a header, or a nested line
        indent = len(text) - len(body)
        if body.startswith("for "):
            return next((name for name in REPORT_SETS if name in body), None)
    return None


def _where(exc: BaseException) -> str:
    """Where in vLLM it raised: the innermost frame's file and line."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    f = frames[-1]
    path = f.filename
    cut = path.rfind("vllm/")
    return f"{path[cut:] if cut >= 0 else path}:{f.lineno} ({f.name}: {f.line})"


def _plain(r: Request) -> dict[str, Any]:
    return {
        "req_id": r.req_id,
        "prompt": list(r.prompt_token_ids),
        "cache_seed": r.cache_seed,
        "media": [m.hex() for m in r.media],
        "max_tokens": r.max_output_tokens,
    }
