"""The READY watch on a loaded client: a channel closed by its caller before a late watch
reads the state again still yields the call's connection wait, sync and aio.

The interleaving is made, not waited for: the real core channel is wrapped so that, as
soon as a watch wakes to the channel's turning READY, the channel is closed (what a
client that opens a channel per call does after its response, while the watch's
thread waits for the GIL). Before, such a call carried no client_connect at all, and its
connection wait read as request network (issue 28: none of 25 cold TLS calls at load 4).
The channels connect through a relay that holds the server's first bytes (``HeldRelay``),
so the watch's first look comes while the channel is still CONNECTING, even on a busy
machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from grpc_overhead.instrumentation.clock import now
from grpc_overhead.instrumentation.connect import (
    ReadyWatch,
    _seen,
    _watch_aio,
    _watch_sync,
    _woke,
    core_channel,
)

IDLE, CONNECTING, READY, TRANSIENT_FAILURE, SHUTDOWN = 0, 1, 2, 3, 4
ATTEMPTS = 20  # each a new channel; the first look finds it READY only if connecting won
#: A channel of its own subchannels: from the process-wide pool a new channel can get an
#: earlier channel's connected subchannel, READY at the first look (run9d, at load 5).
OWN_SUBCHANNELS = [("grpc.use_local_subchannel_pool", 1)]


#: How long the relay holds the server's first bytes: connecting lasts at least this long.
HOLD_S = 0.5


class HeldRelay:
    """A real TCP relay to ``target`` that holds the server's first bytes for ``HOLD_S``.

    A gRPC channel turns READY only once the server's HTTP/2 SETTINGS arrive, so through
    this relay connecting lasts ``HOLD_S``, and the watch's first look, taken right after
    the call's start, finds CONNECTING however busy the machine. Straight to the server,
    connecting won all 20 races at load 5-9 (run14d)."""

    def __init__(self, target: str) -> None:
        self.upstream = target.rsplit(":", 1)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
                server = socket.create_connection((self.upstream[0], int(self.upstream[1])))
            except OSError:
                return  # closed
            self.sockets += [client, server]
            threading.Thread(target=_pump, args=(client, server, 0.0), daemon=True).start()
            threading.Thread(target=_pump, args=(server, client, HOLD_S), daemon=True).start()

    def close(self) -> None:
        for each in self.sockets:
            with contextlib.suppress(OSError):
                each.close()


def _pump(source: socket.socket, destination: socket.socket, hold_s: float) -> None:
    """Copy ``source`` to ``destination``, the first bytes ``hold_s`` late."""
    with contextlib.suppress(OSError):
        data = source.recv(65536)
        time.sleep(hold_s)
        while data:
            destination.sendall(data)
            data = source.recv(65536)
    for each in (source, destination):
        with contextlib.suppress(OSError):
            each.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def held_sync_server(sync_server: str) -> Iterator[str]:
    relay = HeldRelay(sync_server)
    yield relay.address
    relay.close()


@pytest.fixture
def held_aio_server(aio_server: str) -> Iterator[str]:
    relay = HeldRelay(aio_server)
    yield relay.address
    relay.close()


def _watch(until_s: float = 10.0) -> ReadyWatch:
    watch = ReadyWatch()
    watch.until = now() + int(until_s * 1e9)
    return watch


class _ClosedOnReady:
    """The real gRPC core channel under ``channel``; a watch that wakes from CONNECTING to
    READY returns only after ``close`` shut the channel."""

    def __init__(self, channel: Any, close: Any) -> None:
        self.core = core_channel(channel)
        self.close = close
        self.closed_on_ready = False

    def check_connectivity_state(self, try_to_connect: bool) -> int:
        return self.core.check_connectivity_state(try_to_connect)

    def _turned_ready(self, state: int) -> bool:
        return state == CONNECTING and self.core.check_connectivity_state(False) == READY


class _SyncClosedOnReady(_ClosedOnReady):
    def watch_connectivity_state(self, state: int, deadline: float) -> Any:
        event = self.core.watch_connectivity_state(state, deadline)
        if event.success and self._turned_ready(state):
            self.close()
            self.closed_on_ready = True
        return event


class _AioClosedOnReady(_ClosedOnReady):
    async def watch_connectivity_state(self, state: int, deadline: float) -> bool:
        changed = await self.core.watch_connectivity_state(state, deadline)
        if self._turned_ready(state):
            await self.close()
            self.closed_on_ready = True
        return changed


def _check_the_wait(watch: ReadyWatch, sent: int) -> None:
    assert watch.done and watch.ready_at == 0  # READY was never read: the channel closed
    assert sent < watch.left_connecting_at <= now()
    responded = now()
    # A response came back, so the transport was READY when the watch woke from CONNECTING.
    assert watch.wait_ns(sent, responded, responded) == watch.left_connecting_at - sent
    # No response (the call failed as the channel closed): the whole call is unknown wait.
    assert watch.wait_ns(sent, responded, 0) == responded - sent


@pytest.mark.e2e
def test_a_channel_closed_before_the_watch_looked_again_keeps_the_wait(held_sync_server):
    for _ in range(ATTEMPTS):
        channel = grpc.insecure_channel(held_sync_server, OWN_SUBCHANNELS)
        core = _SyncClosedOnReady(channel, channel.close)
        watch, sent = _watch(), now()
        core.check_connectivity_state(True)  # what the call's start does
        _watch_sync(core, watch)
        channel.close()
        if core.closed_on_ready:
            break
    assert core.closed_on_ready, f"the channel was READY at the first look {ATTEMPTS} times"
    _check_the_wait(watch, sent)


async def _aio_attempts(target: str) -> tuple[_AioClosedOnReady, ReadyWatch, int]:
    for _ in range(ATTEMPTS):
        channel = grpc.aio.insecure_channel(target, OWN_SUBCHANNELS)
        core = _AioClosedOnReady(channel, channel.close)
        watch, sent = _watch(), now()
        core.check_connectivity_state(True)
        await _watch_aio(core, watch)
        await channel.close()
        if core.closed_on_ready:
            break
    return core, watch, sent


@pytest.mark.e2e
@pytest.mark.parametrize("aio_server", ["async_handlers"], indirect=True)
def test_an_aio_channel_closed_before_the_watch_looked_again_keeps_the_wait(held_aio_server):
    core, watch, sent = asyncio.run(_aio_attempts(held_aio_server))
    assert core.closed_on_ready, f"the channel was READY at the first look {ATTEMPTS} times"
    _check_the_wait(watch, sent)


@pytest.mark.unit
def test_what_stands_for_ready_and_when():
    watch = _watch()
    watch.left_connecting_at = 5_000
    # Leaving CONNECTING for a transient failure is not READY: forgotten.
    assert not _seen(watch, TRANSIENT_FAILURE, woke_at=5_000)
    assert watch.left_connecting_at == 0
    # A wake from IDLE (connecting began) is not READY's time: READY came at some point
    # before the read that found it, which is then the time taken.
    assert _woke(watch, IDLE, changed=True) == 0 and watch.left_connecting_at == 0
    before = now()
    assert _seen(_watch(), READY, woke_at=0) and before <= now()
    ready = _watch()
    assert _seen(ready, READY) and before <= ready.ready_at <= now()
    # READY read after a wake from CONNECTING: the wake's time, not the later read's.
    assert _woke(watch, CONNECTING, changed=False) == 0  # a timeout, no change
    woke_at = _woke(watch, CONNECTING, changed=True)
    assert woke_at == watch.left_connecting_at >= before
    assert _seen(watch, READY, woke_at=7_000) and watch.ready_at == 7_000
    watch.left_connecting_at = 6_000
    assert watch.wait_ns(sent=1_000, end=20_000, responded=9_000) == 6_000  # READY first
    # The response bounds the wait: the transport was ready before it came back.
    late = ReadyWatch()
    late.left_connecting_at = 30_000
    assert late.wait_ns(sent=1_000, end=40_000, responded=9_000) == 8_000
    assert late.wait_ns(sent=1_000, end=40_000, responded=0) == 39_000
    assert ReadyWatch().wait_ns(sent=1_000, end=40_000, responded=9_000) is None
    # Past the calls' deadline, a wake to a transient failure still forgets the stand-in.
    expired = _watch(until_s=-1.0)
    expired.left_connecting_at = 5_000
    assert _seen(expired, TRANSIENT_FAILURE, woke_at=5_000)
    assert expired.left_connecting_at == 0
    # A shutdown keeps it: READY may have come before the channel closed.
    closed = _watch()
    closed.left_connecting_at = 5_000
    assert _seen(closed, SHUTDOWN, woke_at=5_000) and closed.left_connecting_at == 5_000
