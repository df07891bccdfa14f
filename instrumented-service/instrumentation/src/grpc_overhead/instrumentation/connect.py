"""client_connect: how long a call waited for its channel to become READY.

A call made on a channel that is not READY (new, idle, reconnecting, or waiting
with ``wait_for_ready`` for a server that is not up yet) is held by gRPC core
until a transport exists: name resolution, TCP and TLS handshakes, HTTP/2
settings. Nothing of that is the server's or the network's per-call time, yet
without this module it landed in request_network and, through the deadline
budget, in server_dispatch.

The signal is gRPC core's connectivity state. On the hot path a call reads it
once (``check_connectivity_state``, about 0.4 us, a C call): READY, the usual
case, means no wait. Otherwise a ``ReadyWatch`` (one per channel and cold
spell, shared by the calls that find it cold) watches the state on its own
thread (sync) or task (aio) and writes the monotonic time it saw READY; the
span builder, off the hot path, turns that into the call's wait. The watch
sees READY when its thread gets the GIL back after core's notification, so
it reads late by that wake-up (tens of microseconds on an idle client); the
analyzer bounds client_connect by the request gap.

On a loaded client two more things made the watch late or blind, and both are
kept out of it: the time is taken as soon as the watch wakes, before the state
is read again (that read releases the GIL, and getting it back from a thread
that took it meanwhile can take a switch interval, 5 ms); and a channel closed
right after its call (a client that opens one per call) may be shut down by
the time a late watch reads the state, so the time it woke from CONNECTING is
kept too, and stands for READY when the call got a response (no response
comes back without a READY transport).
"""

from __future__ import annotations

import _thread
import asyncio
import queue
import threading
import time
from typing import Any

from grpc_overhead.instrumentation.clock import now

# gRPC core's grpc_connectivity_state values (cygrpc.ConnectivityState).
_CONNECTING = 1
_READY = 2
_SHUTDOWN = 4
#: How often a watch wakes to check whether anyone still waits (seconds).
_POLL_S = 0.2
#: A watch with no call deadline to bound it gives up after this long (ns).
_LONGEST_WATCH_NS = 600 * 1_000_000_000


class ReadyWatch:
    """When one channel was seen READY after a call found it cold.

    ``ready_at`` is monotonic ns (0 = not seen yet, or never: the watch gave
    up or the channel shut down). ``left_connecting_at``: when the watch woke to
    the channel leaving CONNECTING for READY or for a shutdown it could not see
    past (0 = not that); a stand-in for ``ready_at`` for a call that got a
    response. ``until`` is the latest deadline of the calls waiting on it: past
    that, nobody needs the answer.
    """

    __slots__ = ("done", "left_connecting_at", "ready_at", "until")

    def __init__(self, ready_at: int = 0) -> None:
        self.ready_at = ready_at
        self.left_connecting_at = 0
        self.done = ready_at != 0
        self.until = 0

    def wait_ns(self, sent: int, end: int, responded: int) -> int | None:
        """The call's wait from ``sent`` (request handed to gRPC): to READY (for a call
        that got a response, ``left_connecting_at`` when READY itself went unseen), or,
        for a call that ended with no READY seen and no response, to its end. None when
        unknown (a response arrived but the watch has not reported READY)."""
        ready_at = self.ready_at or (self.left_connecting_at if responded else 0)
        if ready_at:
            wait = ready_at - sent
            if responded:  # the transport was ready before the response came back
                wait = min(wait, responded - sent)
            return max(0, wait)
        if responded:
            return None
        return max(0, end - sent)


#: Shared by every call that found its channel READY: no wait.
ALREADY_READY = ReadyWatch(ready_at=1)


def core_channel(channel: Any) -> Any | None:
    """gRPC core's channel object under a ``grpc.Channel`` / ``grpc.aio.Channel`` (and any
    interceptor wrappers, which keep the wrapped channel as ``_channel``), or None."""
    for _ in range(8):
        if channel is None:
            return None
        if hasattr(channel, "check_connectivity_state"):
            return channel
        channel = getattr(channel, "_channel", None)
    return None


class ChannelReadiness:
    """One instrumented channel's view of its connectivity, for the calls made on it."""

    __slots__ = ("_core", "_lock", "_watch")

    def __init__(self, channel: Any) -> None:
        self._core = core_channel(channel)
        self._lock = threading.Lock()
        self._watch: ReadyWatch | None = None

    def at_call(self, deadline: int, aio: bool = False) -> ReadyWatch | None:
        """The watch that will say when this call's channel was ready (ALREADY_READY when
        it is now), or None when the state cannot be read (not a grpcio channel)."""
        core = self._core
        if core is None:
            return None
        try:
            state = core.check_connectivity_state(False)
        except Exception:  # a closed channel: the call will fail on its own
            return None
        if state == _READY:
            return ALREADY_READY
        # (Not check_connectivity_state(True) to start connecting sooner: that runs gRPC
        # core's connection setup, e.g. a TLS context, here, before the request.)
        until = deadline or now() + _LONGEST_WATCH_NS
        with self._lock:
            watch = self._watch
            if watch is None or watch.done:
                watch = self._watch = ReadyWatch()
                watch.until = until
                self._start(watch, aio)
            elif until > watch.until:
                watch.until = until
        return watch

    def _start(self, watch: ReadyWatch, aio: bool) -> None:
        if aio:
            try:
                asyncio.get_running_loop().create_task(_watch_aio(self._core, watch))
                return
            except RuntimeError:  # no running loop: watch from a thread instead
                pass
        _WATCHERS.submit(self._core, watch)


class _Watchers:
    """Threads that watch cold channels, kept for a while and reused.

    ``threading.Thread.start`` waits until the new thread runs, which on a loaded
    machine took tens of milliseconds, on the calling thread, before its request was
    even serialized. A job is instead queued (no wait) for an idle watcher, and a
    thread is started, without waiting for it, only when none is idle.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Any, ReadyWatch]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0

    def submit(self, core: Any, watch: ReadyWatch) -> None:
        self._jobs.put((core, watch))
        if self._idle <= 0:  # racy read on purpose: at worst one thread too many
            with self._lock:
                self._idle += 1
            _thread.start_new_thread(self._run, ())

    def _run(self) -> None:
        while True:
            try:
                core, watch = self._jobs.get(timeout=_WATCHER_IDLE_S)
            except queue.Empty:
                with self._lock:
                    self._idle -= 1
                return
            with self._lock:
                self._idle -= 1
            _watch_sync(core, watch)
            with self._lock:
                self._idle += 1


#: Watcher threads exit after this long without a cold channel to watch (s).
_WATCHER_IDLE_S = 10.0
_WATCHERS = _Watchers()


def _seen(watch: ReadyWatch, state: int, woke_at: int = 0) -> bool:
    """Record READY (or give up); True when the watch is over. ``woke_at``: when the
    watch woke to the channel's leaving CONNECTING, the change that led to ``state``
    (0: the first look, a timeout, or a wake from another state, e.g. IDLE, after
    which READY may have come at any time before this read)."""
    if state == _READY:
        watch.ready_at = woke_at or now()
        watch.done = True
    elif state == _SHUTDOWN:  # maybe READY first: left_connecting_at stands for it
        watch.done = True
    else:
        if woke_at:  # it left CONNECTING for neither READY nor a shutdown
            watch.left_connecting_at = 0
        if now() > watch.until:
            watch.done = True
    return watch.done


def _woke(watch: ReadyWatch, was: int, changed: bool) -> int:
    """The time the watch woke to the channel's leaving CONNECTING (0 when it woke to
    no change or from another state), noted at once: the next read may find it closed."""
    if not changed or was != _CONNECTING:
        return 0
    watch.left_connecting_at = now()
    return watch.left_connecting_at


def _watch_sync(core: Any, watch: ReadyWatch) -> None:
    try:
        state, woke_at = core.check_connectivity_state(False), 0
        while not _seen(watch, state, woke_at):
            event = core.watch_connectivity_state(state, time.time() + _POLL_S)
            woke_at = _woke(watch, state, bool(event.success))  # False: timed out
            state = core.check_connectivity_state(False)
    except Exception:  # the channel was closed under us: nothing more to see
        watch.done = True


async def _watch_aio(core: Any, watch: ReadyWatch) -> None:
    try:
        state, woke_at = core.check_connectivity_state(False), 0
        while not _seen(watch, state, woke_at):
            deadline = time.time() + _POLL_S
            await core.watch_connectivity_state(state, deadline)
            # (The aio watch says True on a timeout too: a change is a wake before it.)
            woke_at = _woke(watch, state, time.time() < deadline)
            state = core.check_connectivity_state(False)
    except Exception:
        watch.done = True
