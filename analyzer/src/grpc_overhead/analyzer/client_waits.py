"""The client's own waits as phases: client_connect and client_dispatch.

The client instrumentation records both as span attributes (ns; the columns hold -1
where a span does not carry them: other instrumentations, older data): the wait for a
READY channel after the request was handed to gRPC, and the process's wake-up lag
when the response arrived. Each is measured where the attribute is, 0 otherwise (so
unattributed still adds up), and never more than its gap: the connection watch sees
READY a thread wake-up late, and the lag is a sample of the typical wait, not the
call's own, so neither may make request_network or response_network negative on a
shared clock.
"""

from __future__ import annotations

CONNECT_MEASURED = "client_connect_ns >= 0"
CLIENT_DISPATCH_MEASURED = "client_dispatch_ns >= 0"


def _bounded(column: str, gap: str, gap_defined: str) -> str:
    return (
        f"if({column} <= 0, 0., if({gap_defined},"
        f" greatest(0., least(toFloat64({column}), {gap})), toFloat64({column})))"
    )


def connect_value(request_gap: str, gap_defined: str) -> str:
    """client_connect (ns, Float64) within ``request_gap`` (clock-corrected)."""
    return _bounded("client_connect_ns", request_gap, gap_defined)


def client_dispatch_value(response_gap: str, gap_defined: str) -> str:
    """client_dispatch (ns, Float64) within ``response_gap`` (clock-corrected)."""
    return _bounded("client_dispatch_ns", response_gap, gap_defined)
