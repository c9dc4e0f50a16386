"""Pipeline parallelism in the atom tier: ATOM's PP engine cores, run as ATOM's own code
in the scheduler process, and the stand-ins for what connects their processes.

ATOM runs one engine core process per pipeline stage (``PPEngineCoreProc``): the head
(stage 0) owns the scheduler and steps it (``_pp_head_step``), aggregating every stage's
KV offload completions (``_poll_kv_transfer_progress``, ``PPKVAggregator``); each
downstream stage runs ``_downstream_busy_loop``: the head's batch metadata in, its own
workers' connector and forward, its KV status and (the last stage) the sampled tokens
out. Here both are ATOM's methods, bound to stand-ins that are instances of ATOM's
class; what is replaced is process plumbing only:

- the stage transport (ATOM's ``PPStageTransport``, three ZMQ channels): ``StageHub``,
  queues in one process that pickle what crosses, as ATOM's does. A downstream stage
  runs one turn of its loop (one batch, or one idle poll) when the head reads the
  transport, so it lags the head as a pipeline does;
- the hidden states a stage sends the next over NCCL: the tokens the stage's fake
  forward computed from its own layers' KV, which the next stage's must agree with
  (``tp_tokens``), so a stage that computed over wrong KV changes the answer.

Runs only inside server processes.
"""

from __future__ import annotations

import pickle
from collections import deque
from typing import Any

from kvfault.faults.atom.event_log import EventLog
from kvfault.faults.atom.scheduler import SchedulerProcess, WorkerRanks, _RunnerManager, tp_tokens
from kvfault.faults.atom.spec import ServerSpec


class StageHub:
    """The stage transport of one pipeline, both ends (``head()`` and ``end(stage)``
    give each side ATOM's ``PPStageTransport`` methods). Reading the head's end lets
    every downstream stage run its pending turns first."""

    def __init__(self, pp_size: int):
        self.pp_size = pp_size
        self.meta: dict[int, deque[bytes]] = {s: deque() for s in range(1, pp_size)}
        self.tokens: deque[bytes] = deque()
        self.kv_status: deque[bytes] = deque()
        # What each stage's forward passes the next (oldest first): per stage, the
        # batches' items and the tokens computed so far.
        self.hidden: dict[int, deque[tuple[list, list[int]]]] = {
            s: deque() for s in range(1, pp_size)
        }
        self.stages: list[Any] = []  # the downstream stages, in order

    def pump(self) -> None:
        """Each downstream stage, in order, runs its loop until it has taken every batch
        sent to it (at least one turn: an idle one polls its KV status)."""
        for stage in self.stages:
            stage.turn()
            while self.meta[stage.pp_rank]:
                stage.turn()

    def head(self) -> _HeadEnd:
        return _HeadEnd(self)

    def end(self, stage: int) -> _StageEnd:
        return _StageEnd(self, stage)


class _HeadEnd:
    """The head's side of ATOM's ``PPStageTransport``."""

    def __init__(self, hub: StageHub):
        self.hub = hub

    def send_metadata(self, batch: Any) -> None:
        payload = pickle.dumps(batch)
        for queue in self.hub.meta.values():
            queue.append(payload)

    def recv_tokens(self, timeout_ms: int | None = None) -> Any:
        self.hub.pump()
        return pickle.loads(self.hub.tokens.popleft()) if self.hub.tokens else None

    def recv_kv_status(self, timeout_ms: int = 0) -> list[tuple[int, Any]]:
        self.hub.pump()
        out = [pickle.loads(m) for m in self.hub.kv_status]
        self.hub.kv_status.clear()
        return out


class _StageEnd:
    """A downstream stage's side of ATOM's ``PPStageTransport``."""

    def __init__(self, hub: StageHub, stage: int):
        self.hub, self.pp_rank = hub, stage

    def recv_metadata(self, timeout_ms: int | None = None) -> Any:
        queue = self.hub.meta[self.pp_rank]
        return pickle.loads(queue.popleft()) if queue else None

    def send_tokens(self, out: Any) -> None:
        self.hub.tokens.append(pickle.dumps(out))

    def send_kv_status(self, output: Any) -> None:
        self.hub.kv_status.append(pickle.dumps((self.pp_rank, output)))


class _NoKvEvents:
    """A downstream stage's scheduler as its loop uses it: it publishes no KV events
    (the tier configures none; the head's scheduler is the one that schedules)."""

    def publish_kv_events(self) -> None:
        pass

    def shutdown_kv_events(self) -> None:
        pass


class _NoUtility:
    def process_queue(self, queue: Any, engine: Any) -> None:
        pass  # no utility commands reach a stage here


class DownstreamStage:
    """A downstream stage's engine core as ATOM's ``_downstream_busy_loop`` uses it.
    ``turn`` runs that loop for one pass (its input queue then says shut down, so the
    loop's exit path runs too: one more KV status poll)."""

    label = "kvfault atom EngineCore_PP"
    # ATOM's own, from PPEngineCoreProc (the class this is mixed into)
    _downstream_busy_loop: Any

    def __init__(self, stage: int, pp_size: int, runner_mgr: Any, transport: _StageEnd):
        self.pp_rank, self.pp_size = stage, pp_size
        self.is_head, self.is_last = False, stage == pp_size - 1
        self.kv_transfer_enabled = True
        self.runner_mgr, self.pp_transport = runner_mgr, transport
        self.scheduler = _NoKvEvents()
        self.utility_handler, self.utility_queue = _NoUtility(), None
        self._is_rl_weights_offloaded = False
        self._passes = 0

    def pull_and_process_input_queue(self) -> bool:
        self._passes += 1
        return self._passes > 1  # one pass, then "shut down"

    def turn(self) -> None:
        self._passes = 0
        self._downstream_busy_loop()


class PipelineHead(SchedulerProcess):
    """ATOM's PP head engine core (stage 0 of ``spec.pp_size``): the tier's scheduler
    process, stepped by ``PPEngineCoreProc``'s own head methods (this class is mixed
    into it), with the downstream stages run as ``DownstreamStage``s over a
    ``StageHub``. What reaches ATOM's scheduler is the stages' aggregate, recorded as
    delivered where the head hands it over."""

    _pp_head_step: Any  # ATOM's own, from PPEngineCoreProc

    def __init__(
        self, spec: ServerSpec, log: EventLog, link: WorkerRanks, socket_dir: str, instance_id: str
    ):
        if spec.deferred_output:
            raise ValueError("ATOM's runner defers no output with pipeline stages")
        super().__init__(spec, log, link, socket_dir, instance_id)
        self.pp_rank, self.pp_size = 0, spec.pp_size
        self.is_head, self.is_last = True, False
        self.hub = StageHub(spec.pp_size)
        self.pp_transport = self.hub.head()
        self._in_flight: deque = deque()
        self._pending_prefix_hash: deque = deque()
        self._defer_prefix_hash = bool(self.scheduler.block_manager.enable_prefix_caching)
        self._pp_kv_aggregator = None
        self._held_sending: dict = {}
        stage_cls = _atom_class(DownstreamStage)
        for s in range(1, spec.pp_size):
            mgr = _RunnerManager(
                self.stages[s],
                self,
                forward=_StageForward(self, s),
                observe_meta=False,
                observe_delivered=False,
            )
            self.hub.stages.append(stage_cls(s, spec.pp_size, mgr, self.hub.end(s)))
        self._observe_handover()

    def _observe_handover(self) -> None:
        update = self.scheduler._update_from_kv_xfer_finished

        def observed(out: Any) -> Any:
            self.observe_delivered(out)
            return update(out)

        self.scheduler._update_from_kv_xfer_finished = observed

    def busy(self) -> bool:
        return bool(self._in_flight) or not self.scheduler.is_finished()

    def step(self) -> None:
        self._pp_head_step()

    def forward(self, batch: Any) -> Any:
        """Stage 0's forward: its workers compute their layers; the tokens go to stage
        1 as its hidden states. Samples nothing (ATOM's runner on a stage that is not
        the last returns no tokens)."""
        from atom.model_engine.scheduler import ScheduledBatchOutput

        items = self._forward_items(batch)
        tokens = tp_tokens(self.stages[0].each("forward", items, self.names))
        self.hub.hidden[1].append((items, tokens))
        return ScheduledBatchOutput(list(batch.req_ids), [], None, None, None)

    def quiescent(self) -> None:
        self.hub.pump()  # the stages' last reports, as their loops' exit paths send
        super().quiescent()


class _StageForward:
    """A downstream stage's forward: its workers compute the head's items over their
    layers; the tokens must agree with the stages' before. The last stage samples
    (none for a batch of middle chunks, as ATOM's runner)."""

    def __init__(self, head: PipelineHead, stage: int):
        self.head, self.stage = head, stage

    def __call__(self, batch: Any) -> Any:
        from atom.model_engine.scheduler import ScheduledBatchOutput

        head, hub = self.head, self.head.hub
        items, before = hub.hidden[self.stage].popleft()
        mine = tp_tokens(head.stages[self.stage].each("forward", items, head.names))
        tokens = tp_tokens([before, mine])
        if self.stage < hub.pp_size - 1:
            hub.hidden[self.stage + 1].append((items, tokens))
            return ScheduledBatchOutput(list(batch.req_ids), [], None, None, None)
        if head.pure_middle_chunk is not None and head.pure_middle_chunk(batch):
            return ScheduledBatchOutput(list(batch.req_ids), [], None, None, None)
        return ScheduledBatchOutput(
            list(batch.req_ids), [(int(t),) for t in tokens], None, None, None
        )


def _atom_class(stand_in: type) -> type:
    """``stand_in`` mixed into ATOM's ``PPEngineCoreProc`` (its methods called with the
    stand-in as ``self``, which they check with ``super()``); never its ``__init__``."""
    from atom.model_engine.pp_engine_core import PPEngineCoreProc

    return type(stand_in.__name__, (stand_in, PPEngineCoreProc), {})


def pipeline_head(
    spec: ServerSpec, log: EventLog, link: WorkerRanks, socket_dir: str, instance_id: str
) -> Any:
    """The scheduler process's side for a server of ``spec.pp_size`` stages."""
    return _atom_class(PipelineHead)(spec, log, link, socket_dir, instance_id)
