"""Warm interpreters for the ``vllm`` tier: one per ``PYTHONHASHSEED``, each importing
vLLM, torch and lmcache once (about 6 s on two cores) and forking a fresh process per
run, which builds its scheduler (under a second) and tells one story.

Nothing is initialised before the fork (no scheduler, no ZMQ context, no lmcache
client), so a run starts as clean as a spawned process. Protocol, one JSON line each
way: the campaign sends a ``RunSpec``; the zygote answers ``{"pid": N}`` when it forked
and ``{"rc": N}`` when that child ended; the child writes its result to ``spec.out``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import IO, Any

from kvfault.faults.errors import KvfaultError
from kvfault.faults.processes import stop_group

READY = "kvfault-vllm-zygote-ready"
START_TIMEOUT_S = 180.0


class ZygoteError(KvfaultError, RuntimeError):
    """A warm interpreter did not start or stopped answering."""


def _child(line: str) -> None:  # in the forked process
    from kvfault.faults.vllm.engine import dump
    from kvfault.faults.vllm.spec import RunSpec
    from kvfault.faults.vllm.stories import run

    spec = RunSpec.from_json(json.loads(line))
    try:
        payload = run(spec)
    except BaseException as exc:  # noqa: BLE001 - the campaign reports it as an error
        payload = {"error": f"{type(exc).__name__}: {exc}"}
    dump(spec.out, payload)


def main() -> None:
    """The zygote's loop (``python -m kvfault.faults.vllm.zygote``)."""
    # The protocol gets its own descriptor; what vLLM and lmcache log to stdout goes
    # where stderr goes, so no log line can be read as an answer.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    import vllm.v1.core.sched.scheduler  # noqa: F401

    import kvfault.faults.vllm.stories  # noqa: F401  imports vLLM, torch and lmcache once

    out.write(READY + "\n")
    out.flush()
    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            out.close()
            code = 0
            try:
                _child(line)
            except BaseException:  # noqa: BLE001
                code = 1
            finally:
                os._exit(code)
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()
        _, status = os.waitpid(pid, 0)
        out.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
        out.flush()


class Zygote:
    """One warm interpreter with ``PYTHONHASHSEED=hash_seed``."""

    def __init__(self, hash_seed: int):
        env = dict(os.environ, PYTHONHASHSEED=str(hash_seed), LMCACHE_DISABLE_BANNER="1")
        env.pop("LMCACHE_USE_UPSTREAM_MP", None)  # lmcache's own connector, as vLLM prefers
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kvfault.faults.vllm.zygote"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env, text=True, start_new_session=True,
        )  # fmt: skip
        line = self._line(START_TIMEOUT_S)
        if line.strip() != READY:
            self.close()
            raise ZygoteError(f"the vllm tier's warm interpreter did not start ({line.strip()!r})")

    def _line(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return ""
        return self.proc.stdout.readline()

    def run(self, spec: dict[str, Any], limit_s: float) -> int | None:
        """Fork a run of ``spec``; its exit code, or None when it passed ``limit_s``
        (then it is killed)."""
        return self.wait(self.start(spec), limit_s)

    def start(self, spec: dict[str, Any]) -> int:
        """Fork a run of ``spec``; its pid (``wait`` for its end)."""
        stdin: IO[str] | None = self.proc.stdin
        assert stdin is not None
        stdin.write(json.dumps(spec) + "\n")
        stdin.flush()
        forked = self._line(30.0)
        if not forked:
            raise ZygoteError("the vllm tier's warm interpreter did not fork a run")
        return int(json.loads(forked)["pid"])

    def wait(self, pid: int, limit_s: float) -> int | None:
        """The exit code of the run ``start`` forked as ``pid``, or None when it passed
        ``limit_s`` from now (then it is killed)."""
        deadline = time.monotonic() + limit_s
        line = self._line(limit_s)
        if line:
            return int(json.loads(line)["rc"])
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._line(max(1.0, deadline - time.monotonic() + 10.0))
        return None

    def close(self) -> None:
        if self.proc.poll() is None:
            stop_group(self.proc)


class ZygotePool:
    """The warm interpreters of one campaign, by hash seed and slot (a zygote runs one
    child at a time: two processes at once need two slots); all stopped by ``close``."""

    def __init__(self) -> None:
        self._by_seed: dict[tuple[int, int], Zygote] = {}

    def get(self, hash_seed: int, slot: int = 0) -> Zygote:
        key = (hash_seed, slot)
        if key not in self._by_seed:
            self._by_seed[key] = Zygote(hash_seed)
        return self._by_seed[key]

    def close(self) -> None:
        for z in self._by_seed.values():
            z.close()
        self._by_seed.clear()


if __name__ == "__main__":
    main()
