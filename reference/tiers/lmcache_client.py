"""lmcache's ZMQ request client, opened and closed so that one client's end cannot
wedge every other client in the process (issue 20).

lmcache 0.5.6's ``MessageQueueClient`` is a DEALER socket with a monitor (a PAIR
reader for ``EVENT_DISCONNECTED``), polled by one process-wide thread
(``ClientPollingLoop``, "mq-client-shared-loop"). Its ``close()`` closes the monitor's
reader *before* the DEALER. libzmq sends every monitor event from the context's I/O
thread with a blocking send; once the reader is gone that send never returns. So a
peer that hangs up on a closed client whose socket still lives -- a proxy that stops
just after the client closed, or a server killed while a closed client still lingers
with requests it could not deliver (the default linger is infinite) -- blocks the I/O
thread of the client's zmq context for good, and with it every socket of that
context: with lmcache's default context (``zmq.Context.instance()``) every later
client of the process, whatever server it talks to, times out.

``close_client`` closes in the safe order: off the shared loop (bounded), monitor
stopped on the socket, then the reader, then the socket with a bounded linger, then
the loop reference (bounded join). ``ClientContext`` is a zmq context of one's own for
lmcache clients, with bounded send and linger defaults, and ``io_alive`` answers
whether its I/O thread still moves messages (a loopback round trip), so a context
wedged by anything else can be told apart from a wedged server and replaced.

Imports neither lmcache nor zmq until used. Written against lmcache 0.5.6's private
client internals (``_message_queue_client``, ``ClientPollingLoop``); ``check_internals``
names what is missing if an upgrade moves them.
"""

from __future__ import annotations

import threading
import time
from typing import Any

# A send that cannot go out in this long fails its request instead of blocking the
# process-wide polling loop (it blocks only with 1000 messages queued to a dead peer).
SEND_TIMEOUT_MS = 1000
# Unsent requests of a closed client (fire-and-forget unregisters) get this long to go
# out; zmq's default is to keep trying forever, reconnecting to a dead server.
LINGER_MS = 500


class ClientContext:
    """A zmq context for lmcache request clients (``RequestClientFactory.create(url,
    context=ctx.zmq)``): sockets made in it never block a send longer than
    ``SEND_TIMEOUT_MS`` and linger at most ``LINGER_MS`` after close.

    ``io_alive(timeout_s)`` is a loopback DEALER/ROUTER round trip through this
    context's I/O thread. ``close(timeout_s)`` terminates it in the background and
    waits at most that long: a context whose I/O thread is blocked cannot terminate,
    and is then left to the process (``abandoned`` says so) rather than hang."""

    def __init__(self) -> None:
        import zmq

        self._zmq_mod = zmq
        self.zmq = zmq.Context(io_threads=1)
        self.zmq.setsockopt(zmq.SNDTIMEO, SEND_TIMEOUT_MS)
        self.zmq.setsockopt(zmq.LINGER, LINGER_MS)
        self.abandoned = False

    def io_alive(self, timeout_s: float) -> bool:
        """Whether a message makes a loopback round trip through this context within
        ``timeout_s`` (sockets closed with no linger either way)."""
        zmq = self._zmq_mod
        router = self.zmq.socket(zmq.ROUTER)
        dealer = self.zmq.socket(zmq.DEALER)
        try:
            port = router.bind_to_random_port("tcp://127.0.0.1")
            dealer.connect(f"tcp://127.0.0.1:{port}")
            deadline = time.monotonic() + timeout_s
            dealer.send(b"ping", zmq.NOBLOCK)
            if not router.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                return False
            peer, _ = router.recv_multipart()
            router.send_multipart([peer, b"pong"], zmq.NOBLOCK)
            left = max(1, int((deadline - time.monotonic()) * 1000))
            return bool(dealer.poll(left)) and dealer.recv() == b"pong"
        except zmq.ZMQError:
            return False
        finally:
            dealer.close(linger=0)
            router.close(linger=0)

    def close(self, timeout_s: float = 2.0) -> bool:
        """Terminate the context; True when it did within ``timeout_s``. One that did
        not is ``abandoned``: its termination goes on in a daemon thread, which holds
        the context until then. (Dropped instead, pyzmq's finalizer would terminate it
        in whatever thread collects it, and a wedged one would hang that thread.)"""
        done = threading.Event()

        def term() -> None:
            self.zmq.term()
            done.set()

        threading.Thread(target=term, name="kvfault-zmq-term", daemon=True).start()
        if not done.wait(timeout_s):
            self.abandoned = True
        return done.is_set()

    def abandon(self) -> None:
        """Give the context up without waiting (``close`` with no wait)."""
        self.close(timeout_s=0.0)
        self.abandoned = True


def open_client(url: str, context: ClientContext | None = None) -> Any:
    """lmcache's request client for ``url`` (its ``RequestClientFactory``), in
    ``context`` (default: lmcache's own, the process-wide ``zmq.Context.instance()``)."""
    from lmcache.v1.multiprocess.transport.factory import RequestClientFactory

    return RequestClientFactory.create(url, context=context.zmq if context else None)


def check_internals() -> list[str]:
    """What of lmcache's client internals ``close_client`` needs is missing (empty when
    the installed lmcache has them all)."""
    missing = []
    try:
        from lmcache.v1.multiprocess.transport.zmq_impl import mq
    except ImportError as exc:
        return [f"lmcache.v1.multiprocess.transport.zmq_impl.mq ({exc})"]
    for name in ("ClientPollingLoop", "MessageQueueClient", "_PollOp", "_OpKind"):
        if not hasattr(mq, name):
            missing.append(f"mq.{name}")
    loop = getattr(mq, "ClientPollingLoop", None)
    for name in ("_instance", "_instance_lock", "get_instance"):
        if loop is not None and not hasattr(loop, name):
            missing.append(f"ClientPollingLoop.{name}")
    return missing


def close_client(client: Any, timeout_s: float = 2.0) -> str:
    """Close an lmcache request client without wedging its zmq context (module
    docstring). Waits at most about ``timeout_s`` in all. Returns "" when it closed
    cleanly, else one line saying what did not (the shared polling loop did not
    answer, or did not stop): the socket is then left open rather than used from two
    threads. Never raises for a client already closed or half made."""
    mqc = getattr(client, "_message_queue_client", None)
    if mqc is None:  # not lmcache's ZMQ transport: its own close is all there is
        try:
            client.close()
        except Exception as exc:
            return f"close failed: {exc!r}"
        return ""
    if getattr(mqc, "_kvf_closed", False):
        return ""
    mqc._kvf_closed = True
    from lmcache.v1.multiprocess.transport.zmq_impl import mq

    deadline = time.monotonic() + timeout_s
    loop = mqc._polling_loop
    # 1. Off the shared loop: it flushes what this client queued and stops polling its
    #    sockets. lmcache's unregister waits without a bound; this one is bounded.
    done = threading.Event()
    loop._ops_queue.put(mq._PollOp(kind=mq._OpKind.UNREGISTER, client=mqc, done=done))
    try:
        loop._notifier.notify()
    except OSError:
        pass  # the loop's notifier is closed: it is gone, nothing polls this client
    off_loop = done.wait(max(0.0, deadline - time.monotonic())) or not loop._thread.is_alive()
    problem = ""
    if off_loop:
        # 2. Stop the monitor on the socket before closing its reader: after this no
        #    event is sent, so none can block the I/O thread on a reader that is gone.
        try:
            mqc.socket.disable_monitor()
        except Exception:
            pass
        mqc.monitor.close(linger=0)
        mqc.socket.close(linger=LINGER_MS)
    else:
        problem = "lmcache's shared polling loop did not let go of the client in time"
    # 3. The loop reference, as ClientPollingLoop.release_instance, with a bounded join;
    #    a loop that is no longer the process's (reset) is not the current one's to count.
    with mq.ClientPollingLoop._instance_lock:
        last = False
        if mq.ClientPollingLoop._instance is loop:
            loop._ref_count -= 1
            if loop._ref_count <= 0:
                last = True
                loop._is_finished.set()
                mq.ClientPollingLoop._instance = None
    if last:
        try:
            loop._notifier.notify()
        except OSError:
            pass
        loop._thread.join(max(0.0, deadline - time.monotonic()))
        if loop._thread.is_alive():
            problem = problem or "lmcache's shared polling loop did not stop in time"
        else:
            loop._notifier.close()
    return problem


def loop_healthy() -> bool:
    """Whether lmcache's process-wide polling loop, if there is one, has a live thread.
    A dead one is dropped (the next client starts a fresh loop); returns False then."""
    from lmcache.v1.multiprocess.transport.zmq_impl import mq

    with mq.ClientPollingLoop._instance_lock:
        loop = mq.ClientPollingLoop._instance
        if loop is None or loop._thread.is_alive():
            return True
        mq.ClientPollingLoop._instance = None
        return False


def server_answers(url: str, timeout_s: float, context: ClientContext | None = None) -> bool:
    """Whether the lmcache server at ``url`` answers a chunk-size request within
    ``timeout_s``, through a fresh client in ``context`` (closed safely either way)."""
    client = open_client(url, context)
    try:
        client.get_chunk_size().result(timeout=timeout_s)
        return True
    except Exception:
        return False
    finally:
        close_client(client, timeout_s=2.0)
