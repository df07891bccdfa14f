"""A TCP (L4) load balancer: one address in front of several service instances.

Why it exists: behind one address (a Kubernetes service, a cloud L4 balancer) a
gRPC client's HTTP/2 connection is balanced once, when it is opened, and every
call on it then goes to the same instance for the connection's whole life. With
long-lived connections the load stays as imbalanced as the first connections
happened to land, until the server's max connection age
(``grpc.max_connection_age_ms``) makes clients reconnect and the balancer gets to
choose again (DoorDash's finding). Giving the load generator every instance's
address instead balances per call and hides the effect, so experiments put this
balancer in between.

It balances connections, never calls: each new client connection goes to one
backend, chosen by ``random`` (seeded, what kube-proxy's iptables rules do) or
``round_robin``, and bytes are copied both ways until both sides have closed.
A side that half-closes (sends FIN) has its EOF passed on while the other
direction keeps flowing; a reset on either side ends both.

Run as its own process, so the balancing costs no time in the caller's event
loop or GIL::

    python -m grpc_overhead.cli.balancer --listen 127.0.0.1:0 \\
        --backend 127.0.0.1:50051 --backend 127.0.0.1:50052 [--policy round_robin] [--seed 1]

It prints ``listening on HOST:PORT`` once bound (the line ``grpc-overhead
service`` prints, so ``ServiceProcess`` awaits both the same way) and, on SIGTERM
or SIGINT, one JSON line with the connections each backend got, then exits 0.
From Python, ``Balancer`` starts and stops that process::

    with Balancer([one.target, two.target]) as balancer:
        run_load("--target", balancer.target, ...)
    balancer.connections  # {"127.0.0.1:50051": 3, "127.0.0.1:50052": 1}
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import json
import queue
import random
import signal
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from typing import NoReturn

from grpc_overhead.processes import ComponentFailed, ServiceProcess

PROG = "balancer"
POLICIES = ("random", "round_robin")
#: One read's worth: an HTTP/2 DATA frame is 16 KiB by default, so a few frames per copy.
READ_BYTES = 64 * 1024
EXIT_USAGE = 2


class UsageError(Exception):
    """An argument the user can fix: one line on stderr, exit status 2."""


# -- the balancing process ------------------------------------------------------------------------


def address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as (host, port); UsageError if it is not one."""
    host, _, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"not HOST:PORT: {text!r}")
    return host, int(port)


def picker(backends: Sequence[str], policy: str, seed: int) -> Callable[[], str]:
    """The backend for the next new connection, by ``policy``; ``seed`` fixes the random
    sequence, so a run's connection spread can be repeated."""
    if policy == "round_robin":
        return itertools.cycle(backends).__next__
    return functools.partial(random.Random(seed).choice, list(backends))


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Bytes from ``source`` to ``sink`` until ``source``'s EOF, which is passed on as a
    half-close: the other direction may still have a response to deliver."""
    while chunk := await source.read(READ_BYTES):
        sink.write(chunk)
        await sink.drain()  # the slower side's backpressure, instead of an unbounded buffer
    if sink.can_write_eof():
        sink.write_eof()


class Relay:
    """Accepts connections and pipes each to one backend, counting what each backend got."""

    def __init__(self, backends: Sequence[str], policy: str, seed: int) -> None:
        self.backends = list(backends)
        self.next_backend = picker(self.backends, policy, seed)
        self.connections: Counter[str] = Counter({backend: 0 for backend in self.backends})
        #: Connections whose backend refused or could not be reached (the client is closed).
        self.failed: Counter[str] = Counter()
        self.active: set[asyncio.Task[None]] = set()

    async def handle(
        self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.active.add(task)
        backend = self.next_backend()
        self.connections[backend] += 1
        try:
            try:
                backend_reader, upstream = await asyncio.open_connection(*address(backend))
            except OSError as error:
                self.failed[backend] += 1
                print(f"{PROG}: cannot connect to {backend}: {error}", file=sys.stderr, flush=True)
                client.transport.abort()
                return
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(_copy(client_reader, upstream))
                    group.create_task(_copy(backend_reader, client))
            except* OSError:
                pass  # a reset on one side: the TaskGroup has cancelled the other direction
            finally:
                await _close(upstream, client)
        finally:
            client.close()  # already closed, unless cancelled before the backend answered
            self.active.discard(task)

    async def stop(self) -> None:
        """End every connection still open (their tasks close both sides)."""
        for task in list(self.active):
            task.cancel()
        await asyncio.gather(*self.active, return_exceptions=True)

    def report(self) -> dict[str, dict[str, int]]:
        return {"connections": dict(self.connections), "failed": dict(self.failed)}


async def _close(*writers: asyncio.StreamWriter) -> None:
    """Close both sides at once, then wait: a cancel while waiting leaves neither open."""
    for writer in writers:
        writer.close()
    for writer in writers:
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def serve(listen: tuple[str, int], relay: Relay) -> None:
    """Balance until SIGTERM/SIGINT, then close every connection and print the report."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signal_number, stop.set)
    try:
        server = await asyncio.start_server(relay.handle, *listen)
    except OSError as error:
        raise UsageError(f"cannot listen on {listen[0]}:{listen[1]}: {error.strerror}") from None
    host, port = server.sockets[0].getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"listening on {shown}:{port}", flush=True)
    try:
        await stop.wait()
    finally:
        server.close()
        await relay.stop()
        await server.wait_closed()
    print(json.dumps(relay.report(), sort_keys=True), flush=True)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """argparse's usage block and its traceback-free exit, as one line instead."""
        raise UsageError(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=f"python -m grpc_overhead.cli.{PROG}",
        description="TCP load balancer: each new connection goes to one backend.",
    )
    p.add_argument(
        "--listen",
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="address to listen on; port 0 = a free one (default: 127.0.0.1:0)",
    )
    p.add_argument(
        "--backend",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="a backend; repeat for each",
    )
    p.add_argument(
        "--policy",
        choices=POLICIES,
        default="random",
        help="how a new connection's backend is chosen (default: random)",
    )
    p.add_argument("--seed", type=int, default=0, help="random policy's seed (default: 0)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(sys.argv[1:] if argv is None else list(argv))
        listen = address(args.listen)
        if not args.backend:
            raise UsageError("at least one --backend HOST:PORT is needed")
        for backend in args.backend:
            if address(backend)[1] == 0:
                raise UsageError(f"a backend needs a port: {backend!r}")
        if len(set(args.backend)) != len(args.backend):
            raise UsageError("a --backend is given twice")
        asyncio.run(serve(listen, Relay(args.backend, args.policy, args.seed)))
    except UsageError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    return 0


# -- the process, from Python ---------------------------------------------------------------------


class Balancer(ServiceProcess):
    """``with Balancer(backends) as balancer:`` a balancer process on a free loopback port.

    ``target`` is where clients connect; after the block, ``connections`` holds how
    many connections each backend got (``failed``: how many of those it refused).
    Started and awaited like the service (``ServiceProcess``): stderr in a file,
    ``startup_timeout_s`` to print its address, SIGTERM on exit then SIGKILL.
    """

    name = PROG

    def __init__(
        self,
        backends: Sequence[str],
        policy: str = "random",
        seed: int = 0,
        startup_timeout_s: float = 15.0,
        python: str = sys.executable,
    ) -> None:
        if not backends:
            raise ValueError("a balancer needs at least one backend")
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        super().__init__(startup_timeout_s=startup_timeout_s, python=python)
        # Set after the service's constructor, which would add its own --port.
        self.args = ["--listen", "127.0.0.1:0", "--policy", policy, "--seed", str(seed)]
        self.args += [word for backend in backends for word in ("--backend", backend)]
        self.backends = list(backends)
        self.connections: dict[str, int] = {}
        self.failed: dict[str, int] = {}

    @property
    def command(self) -> list[str]:
        return [self.python, "-m", f"grpc_overhead.cli.{PROG}", *self.args]

    def __enter__(self) -> Balancer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self.stop()
            self._read_report(raise_if_missing=exc_info[0] is None)
        finally:
            super().__exit__(*exc_info)

    def _read_report(self, raise_if_missing: bool) -> None:
        """The JSON line printed at exit (the stdout reader thread may still be on its way)."""
        report = None
        while True:
            try:
                line = self._lines.get(timeout=5.0)
            except queue.Empty:
                break
            if line is None:
                break
            if line.startswith("{"):
                report = json.loads(line)
        if report is None:
            if raise_if_missing:
                code = self.process.returncode if self.process else None
                raise ComponentFailed(
                    f"balancer exited with {code} without its report; stderr:\n{self.stderr_text()}"
                )
            return
        self.connections = report["connections"]
        self.failed = report["failed"]


if __name__ == "__main__":
    sys.exit(main())
