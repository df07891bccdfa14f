"""The TCP balancer (``cli/balancer.py``) reproduces DoorDash's imbalance and its fix.

Real processes: three prediction services behind one ``Balancer``, and the load
generator given only the balancer's address. Without a max connection age each
of the load generator's channels keeps the connection it opened first, so at
most as many instances as channels ever see a call; with ``--max-connection-age-s``
the services close connections, the channels reconnect, and the balancer spreads
the new connections over every instance.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from grpc_overhead.cli.balancer import Balancer
from grpc_overhead.processes import ServiceProcess, free_port, offline_env, run_load

pytestmark = pytest.mark.e2e

INSTANCES = ("first", "second", "third")
CHANNELS = 2
#: A short load: small requests, a couple of callers per channel.
LOAD = ("--channels", str(CHANNELS), "--concurrency", "4", "--entities", "10", "--json")


@contextlib.contextmanager
def services(*args: str) -> Iterator[list[ServiceProcess]]:
    """Three prediction services, each answering with its own instance id."""
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(
                ServiceProcess(["--instance-id", name, "--workers", "4", *args], env=offline_env())
            )
            for name in INSTANCES
        ]


def used(connections: dict[str, int]) -> list[str]:
    return [backend for backend, count in connections.items() if count > 0]


def test_without_a_connection_age_each_channel_sticks_to_one_instance() -> None:
    with services() as instances, Balancer([service.target for service in instances]) as balancer:
        summary = run_load("--target", balancer.target, "--duration", "2", *LOAD).summary
    assert summary["calls"] > 0 and summary["errors"] == 0, summary["error_messages"]
    assert sum(balancer.connections.values()) == CHANNELS, balancer.connections
    assert len(used(balancer.connections)) <= CHANNELS
    # What the services saw agrees with what the balancer chose: calls reached only the
    # instances that got a connection.
    targets = {service.target: name for service, name in zip(instances, INSTANCES, strict=True)}
    assert set(summary["server_instances"]) == {targets[b] for b in used(balancer.connections)}
    assert balancer.failed == {}


def test_a_max_connection_age_spreads_reconnects_over_every_instance() -> None:
    with (
        services("--max-connection-age-s", "1") as instances,
        Balancer([service.target for service in instances]) as balancer,
    ):
        summary = run_load("--target", balancer.target, "--duration", "6", *LOAD).summary
    assert summary["calls"] > 0 and summary["errors"] == 0, summary["error_messages"]
    assert sum(balancer.connections.values()) > CHANNELS, balancer.connections  # reconnects
    assert len(used(balancer.connections)) == len(INSTANCES), balancer.connections
    assert set(summary["server_instances"]) == set(INSTANCES), summary["server_instances"]


def test_round_robin_takes_the_backends_in_turn_and_pipes_both_ways() -> None:
    """Raw TCP (no gRPC): a half-close reaches the backend, whose reply still comes back."""
    with contextlib.ExitStack() as stack:
        listeners = [stack.enter_context(socket.create_server(("127.0.0.1", 0))) for _ in range(3)]
        backends = [f"127.0.0.1:{listener.getsockname()[1]}" for listener in listeners]
        balancer = stack.enter_context(Balancer(backends, policy="round_robin"))
        for turn in range(4):
            with socket.create_connection(("127.0.0.1", balancer.port), timeout=10) as client:
                client.sendall(b"x" * 200_000)
                client.shutdown(socket.SHUT_WR)
                accepted, _ = listeners[turn % 3].accept()
                with accepted:
                    received = _read_all(accepted)
                    accepted.sendall(received[::-1][:10])
                assert len(received) == 200_000
                assert _read_all(client) == b"x" * 10
    assert balancer.connections == {backends[0]: 2, backends[1]: 1, backends[2]: 1}


def test_a_backend_nobody_listens_on_closes_the_client_and_counts_a_failure() -> None:
    nobody = f"127.0.0.1:{free_port()}"
    with (
        Balancer([nobody]) as balancer,
        socket.create_connection(("127.0.0.1", balancer.port), timeout=10) as client,
    ):
        assert _read_all(client) == b""
    assert balancer.connections == {nobody: 1} and balancer.failed == {nobody: 1}


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_bad_argument_is_one_line_and_exit_2_from_the_command_line() -> None:
    """The module as run (``python -m``): no usage block, no traceback (the rest of the
    cases run in-process, ``test_balancer_arguments.py``)."""
    done = subprocess.run(
        [sys.executable, "-m", "grpc_overhead.cli.balancer", "--backend", "no-port"],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "balancer: error: not HOST:PORT: 'no-port'\n"
