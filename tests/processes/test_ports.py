"""``free_port`` hands out ports no outgoing connection can take before the child binds them,
never one in use, and never the same one twice to one process."""

from __future__ import annotations

import socket
import time

import pytest

from grpc_overhead.processes import ports


@pytest.mark.unit
def test_ports_are_below_the_ephemeral_range_bindable_and_distinct():
    low, _ = ports.ephemeral_range()
    picked = [ports.free_port() for _ in range(300)]
    assert len(set(picked)) == len(picked)
    assert all(ports.LOWEST_PICKED_PORT <= port < low for port in picked), picked
    for port in picked[:20]:  # each one really takes a listener
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", port))
            listener.listen()


@pytest.mark.unit
def test_a_port_with_a_listener_or_in_time_wait_is_not_handed_out(monkeypatch):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))  # not from free_port: it would remember them
    listener.listen()
    busy = listener.getsockname()[1]
    # TIME_WAIT: the side that closes first keeps the local port for a minute.
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Go's and gRPC's do
    server.bind(("127.0.0.1", 0))
    server.listen()
    lingering = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", lingering))
    accepted, _ = server.accept()
    accepted.close()  # the listening side closes first: its port lingers in TIME_WAIT
    client.close()
    server.close()
    deadline = time.monotonic() + 5
    # Until the closing handshake is over: then only a listener with SO_REUSEADDR binds it.
    while not ports.port_is_free(lingering):
        assert time.monotonic() < deadline, "the lingering port never reached TIME_WAIT"
        time.sleep(0.01)
    try:
        # Only the two used ports to choose from, then only the lingering one.
        monkeypatch.setattr(ports, "_PICK_ATTEMPTS", 50)
        choices = iter([busy, lingering] * 25)
        monkeypatch.setattr(ports._random, "randint", lambda low, high: next(choices))
        kernel_picked = ports.free_port()
        assert kernel_picked not in (busy, lingering)
    finally:
        listener.close()


@pytest.mark.unit
def test_a_machine_whose_ephemeral_range_starts_low_gets_a_kernel_picked_port(monkeypatch):
    real_low, _ = ports.ephemeral_range()
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (10500, 60999))
    assert ports.free_port() >= real_low  # from the kernel's own (real) range


@pytest.mark.unit
def test_an_ipv6_host_gets_a_kernel_picked_port_of_its_own_family(monkeypatch):
    if not socket.has_ipv6 or ports._bind_error("::1", 0, reuse_address=False) is not None:
        pytest.fail("this machine has no IPv6 loopback; the test needs ::1")
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (10500, 60999))
    port = ports.free_port("::1")  # an IPv4 socket cannot bind ::1 (it raised before)
    assert ports.port_is_free(port, "::1")
