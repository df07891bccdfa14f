"""Where the explorer's waterfall draws each phase: between which two event columns
(``SEGMENTS``), and the waits that sit between two events (``bar``).

client_connect starts at the client's outboundMessageSent, server_dispatch ends at
serverCallStarted, client_dispatch ends at clientReceivedResponse; request_network
and response_network are drawn between them. Each wait is clamped to its gap, as
the phases are (``client_waits``), so no bar runs backwards.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpc_overhead.analyzer.call_columns import COLUMNS
from grpc_overhead.analyzer.insights.chain_pieces import CHAIN_BOUNDS
from grpc_overhead.analyzer.phases import PHASES
from grpc_overhead.analyzer.result_columns import CONSECUTIVE_PHASES

LANES = ("client", "network", "server")
SIDES = {column.name: ("client" if column.client else "server") for column in COLUMNS}


#: Phases that are not a plain difference of two columns: the one-way network
#: phases are corrected for the clock and, for the request, for the server's
#: dispatch wait, which is drawn ending at serverCallStarted; the interceptor chain
#: splits the server's phases (``chain_pieces``).
_SPECIAL_BOUNDS = {
    "client_connect": ("client_outbound_message_sent_ns", "client_outbound_message_sent_ns"),
    "request_network": ("client_outbound_message_sent_ns", "server_call_started_ns"),
    "server_dispatch": ("server_call_started_ns", "server_call_started_ns"),
    **CHAIN_BOUNDS,
    "response_network": ("server_outbound_message_sent_ns", "client_received_response_ns"),
    "client_dispatch": ("client_received_response_ns", "client_received_response_ns"),
}


def phase_bounds(name: str) -> tuple[str, str]:
    """(earlier, later) ``grpc_calls`` columns between which the phase is drawn."""
    if name in _SPECIAL_BOUNDS:
        return _SPECIAL_BOUNDS[name]
    phase = next(phase for phase in PHASES if phase.name == name)
    later, _, earlier = phase.value.partition(" - ")
    if later not in SIDES or earlier not in SIDES:
        raise ValueError(f"phase {name} is not a difference of two event columns")
    return earlier, later


def _segment_lane(earlier: str, later: str) -> str:
    sides = {SIDES[earlier], SIDES[later]}
    return sides.pop() if len(sides) == 1 else "network"


SEGMENTS = tuple(
    (name, *phase_bounds(name), _segment_lane(*phase_bounds(name))) for name in CONSECUTIVE_PHASES
)


@dataclass(frozen=True)
class Waits:
    """One call's waits in µs (0 where not measured or none)."""

    client_connect: float = 0.0
    server_dispatch: float = 0.0
    client_dispatch: float = 0.0

    def within(self, request_gap: float, response_gap: float) -> Waits:
        """The client's waits clamped to their gaps (µs; inf where a gap is unknown)."""
        return Waits(
            min(self.client_connect, max(request_gap, 0.0)),
            self.server_dispatch,
            min(self.client_dispatch, max(response_gap, 0.0)),
        )


def bar(name: str, start: float, end: float, waits: Waits) -> tuple[float, float] | None:
    """(start, end) of phase ``name`` drawn between events at ``start`` and ``end`` (the
    waits already ``within`` their gaps), or None where it has no bar (no wait)."""
    if name == "client_connect":
        return (start, start + waits.client_connect) if waits.client_connect > 0 else None
    if name == "request_network":
        begin = start + waits.client_connect
        return begin, max(begin, end - waits.server_dispatch)
    if name == "server_dispatch":
        return (start - waits.server_dispatch, end) if waits.server_dispatch else None
    if name == "response_network":
        return start, end - waits.client_dispatch
    if name == "client_dispatch":
        return (start - waits.client_dispatch, end) if waits.client_dispatch > 0 else None
    return start, end
