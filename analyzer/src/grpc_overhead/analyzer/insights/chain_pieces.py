"""Where the explorer's waterfall draws the phases the server's interceptor chain splits.

A phase is one bar between two ``grpc_calls`` columns, except where the chain around
the servicer's method was measured (``interceptor_chain``): then server_interceptors is
drawn where the chain ran (its intercept_service calls, its work before and after the
method), server_queue from serviceIntercepted, and processing around the chain's part
before the method.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pandas as pd

#: The outer bounds of the phases the chain touches (one bar each where it was not
#: measured); server_queue's is the design's.
CHAIN_BOUNDS = {
    "server_queue": ("server_call_started_ns", "server_inbound_message_ns"),
    "server_interceptors": ("server_call_started_ns", "interceptors_returned_ns"),
    "processing": ("server_inbound_message_read_ns", "predictions_made_ns"),
    "post_processing": ("predictions_made_ns", "handler_returned_ns"),
}
CHAIN_COLUMNS = (
    "service_intercepted_ns",
    "interceptors_entered_ns",
    "handler_started_ns",
    "interceptors_returned_ns",
    "predictions_made_ns",
)


def pieces(name: str, earlier: str, later: str, row: pd.Series) -> list[tuple[str, str]]:
    """The (earlier, later) column pairs a phase is drawn between for this call: one pair,
    except where the server's interceptor chain was measured (interceptor_chain): then the chain
    is drawn where it ran (intercept_service, before and after the servicer's method),
    server_queue from serviceIntercepted, processing around the chain's part before the
    method (a streaming request's method starts before its first message: no such part)."""
    if name not in ("server_queue", "server_interceptors", "processing"):
        return [(earlier, later)]
    if not all(int(row[column]) for column in CHAIN_COLUMNS):
        return [] if name == "server_interceptors" else [(earlier, later)]
    before = int(row["interceptors_entered_ns"]) >= int(row["server_inbound_message_read_ns"])
    if name == "server_queue":
        return [("service_intercepted_ns", later)]
    if name == "processing":
        if not before:
            return [(earlier, later)]
        return [(earlier, "interceptors_entered_ns"), ("handler_started_ns", later)]
    returned = "handler_returned_ns" if int(row["handler_returned_ns"]) else "predictions_made_ns"
    parts = [("server_call_started_ns", "service_intercepted_ns")]
    if before:
        parts.append(("interceptors_entered_ns", "handler_started_ns"))
    return [*parts, (returned, "interceptors_returned_ns")]


def drawn(
    segments: Iterable[tuple[str, str, str, str]], row: pd.Series
) -> Iterator[tuple[str, str, str, str]]:
    """Each (phase, earlier, later, lane) segment as the bars this call draws."""
    for name, earlier, later, lane in segments:
        for first, last in pieces(name, earlier, later, row):
            yield name, first, last, lane
