"""The main loops of the server processes (forked by ``kvfault.faults.atom.zygote``).

A scheduler process connects to the host, listens for its workers (one per TP rank),
waits until every worker has registered its KV caches (so rank 0's lookup server is
bound before the scheduler's lookup client exists, as ATOM orders them), builds ATOM's
scheduler side and answers the host's commands. A worker process connects to its
scheduler and answers ATOM's model-runner calls. Every reply carries the events recorded since the last one.
"""

from __future__ import annotations

import os
import time
import traceback
from multiprocessing.connection import Client, Listener
from typing import Any

from kvfault.faults.atom.spec import ServerSpec
from kvfault.faults.errors import KvfaultError


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0]


def _refusal(e: BaseException) -> tuple[str, str]:
    """A refusal to start as it travels: the exception's name, and its one line."""
    return type(e).__name__, _one_line(e)


class _WorkerRefused(KvfaultError):
    """The worker did not start; its one line is the refusal's, ``error`` its name."""

    def __init__(self, line: str, error: str = "_WorkerRefused"):
        super().__init__(line)
        self.error = error


def _connect(address: str, authkey: bytes, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return Client(address, family="AF_UNIX", authkey=authkey)
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def stack_path(address: str, rank: int = 0) -> str:
    """Where the worker of TP rank ``rank`` of ``address``'s scheduler writes its stack."""
    return address + ".stack" + (str(rank) if rank else "")


def _recorder(spec: ServerSpec) -> Any:
    """A started ``LineRecorder`` over ATOM's checkout when ``spec.record_path``."""
    if not spec.record_path:
        return None
    from kvfault.faults.atom.line_record import LineRecorder, atom_root

    recorder = LineRecorder(atom_root())
    recorder.start()
    return recorder


def _who(spec: ServerSpec, worker: int) -> str:
    """How a hang names worker ``worker`` of ``spec``'s server."""
    if spec.pp_size > 1:
        stage, rank = divmod(worker, spec.tp_size)
        return f"stage {stage} rank {rank}'s worker"
    return f"rank {worker}'s worker" if spec.tp_size > 1 else "the worker"


def _close_workers(ranks: Any, recorded: bool) -> list[Any]:
    """Close every worker of ``ranks`` (each call bounded by its link) and return the
    ATOM lines they recorded, however each close ends. With ``recorded``, a worker's
    lines are asked for before its close too: a close that never replies (the worker
    died or hung in it) leaves what it recorded up to the close. A hung worker answers
    nothing: the host kills it."""
    executed: list[Any] = []
    if ranks.hung is not None:
        return executed
    for link in ranks.links:
        before: list[Any] = []
        try:
            if recorded:
                before = link.call("recorded") or []
            executed += link.call("close") or before
        except Exception:  # noqa: BLE001  died or hung in its close: its lines so far
            executed += before
    return executed


def child_main(role: str, args: dict[str, Any]) -> int:
    if role == "scheduler":
        return scheduler_main(**args)
    if role == "worker":
        return worker_main(**args)
    return 2


def worker_main(
    spec: ServerSpec, address: str, authkey: bytes, socket_dir: str, instance_id: str, rank: int = 0
) -> int:
    import faulthandler
    import signal

    from kvfault.faults.atom.event_log import EventLog
    from kvfault.faults.atom.worker import WorkerProcess

    conn = _connect(address, authkey)
    log = EventLog()
    # A call that hangs in the code under test: the scheduler asks (SIGUSR1) for this
    # thread's stack, written from the signal handler however the thread is blocked.
    stack_file = open(stack_path(address, rank), "w")  # noqa: SIM115  lives as the process does
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=False)
    recorder = _recorder(spec)
    try:
        worker = WorkerProcess(spec, log, socket_dir, instance_id, rank)
    except Exception as e:  # noqa: BLE001  reported to the scheduler in one line
        conn.send((False, _refusal(e), log.take()))
        return 1
    conn.send((True, (os.getpid(), rank), log.take()))
    while True:
        try:
            name, call_args = conn.recv()
        except EOFError:
            return 1
        if name == "recorded":  # before the close: what a close that never replies leaves
            conn.send((True, recorder.take() if recorder else None, log.take()))
            continue
        if name == "close":
            worker.close()
            conn.send((True, recorder.take() if recorder else None, log.take()))
            return 0
        try:
            value = getattr(worker, name)(*call_args)
        except Exception as e:  # noqa: BLE001
            conn.send((False, _one_line(e) + "\n" + traceback.format_exc(), log.take()))
            continue
        conn.send((True, value, log.take()))


def scheduler_main(
    spec: ServerSpec, host: str, listen: str, authkey: bytes, socket_dir: str, instance_id: str
) -> int:
    from kvfault.faults.atom.event_log import EventLog
    from kvfault.faults.atom.scheduler import (
        RunnerFailed,
        SchedulerProcess,
        WorkerHung,
        WorkerLink,
        WorkerRanks,
    )

    conn = _connect(host, authkey)
    log = EventLog()
    recorder = _recorder(spec)
    listener = Listener(listen, family="AF_UNIX", authkey=authkey)
    conn.send(("listening", spec.name, os.getpid()))
    # bounded wait for the worker: Listener.accept takes no timeout, its socket does
    listener._listener._socket.settimeout(180.0)  # type: ignore[attr-defined]  # private
    try:
        links: dict[int, WorkerLink] = {}
        for _ in range(spec.tp_size * spec.pp_size):  # the workers connect in any order
            wconn = listener.accept()
            if not wconn.poll(180.0):
                raise TimeoutError("a worker did not register its KV caches within 180s")
            ok, detail, events = wconn.recv()
            log.events.extend(events)
            if not ok:
                error, line = detail
                raise _WorkerRefused(line, error)
            pid, rank = detail
            who = _who(spec, rank)
            path = stack_path(listen, rank)
            links[rank] = WorkerLink(wconn, log, pid=pid, stack_path=path, who=who)
        ranks = WorkerRanks([links[r] for r in sorted(links)])
        if spec.pp_size > 1:
            from kvfault.faults.atom.pipeline import pipeline_head

            side = pipeline_head(spec, log, ranks, socket_dir, instance_id)
        else:
            side = SchedulerProcess(spec, log, ranks, socket_dir, instance_id)
    except Exception as e:  # noqa: BLE001  the host turns this into a refusal
        error, line = (e.error, f"{e} (worker)") if isinstance(e, _WorkerRefused) else _refusal(e)
        if os.environ.get("KVFAULT_ATOM_DEBUG"):
            line += "\n" + traceback.format_exc()
        conn.send(("refused", (error, line), log.take()))
        listener.close()
        return 1
    conn.send(("ready", None, log.take()))
    while True:
        try:
            cmd, cmd_args = conn.recv()
        except EOFError:
            break
        try:
            if cmd == "submit":
                side.submit(*cmd_args)
                value: Any = None
            elif cmd == "run":
                value = side.run(*cmd_args)
            elif cmd == "quiescent":
                side.quiescent()
                value = None
            elif cmd == "wait_stored":
                value = side.wait_stored(*cmd_args)
            elif cmd == "settle":
                value = side.settle(*cmd_args)
            elif cmd == "shut_down":
                side.shut_down()
                value = None
            elif cmd == "close":
                executed = _close_workers(side.link, recorder is not None)
                executed += recorder.take() if recorder else []
                conn.send((True, executed, log.take()))
                break
            else:
                raise ValueError(f"unknown command {cmd!r}")
        except (WorkerHung, RunnerFailed) as e:  # the code under test hung or died
            conn.send((True, e.evidence(), log.take()))
            continue
        except Exception as e:  # noqa: BLE001
            conn.send((False, _one_line(e) + "\n" + traceback.format_exc(), log.take()))
            continue
        conn.send((True, value, log.take()))
    listener.close()
    return 0
