"""W3C trace context in gRPC metadata, parsed and formatted without the OpenTelemetry API.

The propagator API builds a Context and a carrier getter per call; on the hot
path a fixed-layout string slice is an order of magnitude cheaper, and the
wire format is the same ``traceparent`` header any W3C propagator reads.
"""

from __future__ import annotations

from collections.abc import Iterable

from grpc_overhead.instrumentation.vocabulary import RUN_ID_HEADER, TRACEPARENT_HEADER

_TRACEPARENT_LENGTH = 55


def format_traceparent(trace_id: int, span_id: int, sampled: bool) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def parse_traceparent(value: str) -> tuple[int, int, bool] | None:
    """(trace id, parent span id, sampled), or None for anything malformed or all-zero."""
    if len(value) < _TRACEPARENT_LENGTH or value[2] != "-" or value[:2] == "ff":
        return None
    try:
        trace_id = int(value[3:35], 16)
        span_id = int(value[36:52], 16)
        flags = int(value[53:55], 16)
    except ValueError:
        return None
    if value[35] != "-" or value[52] != "-" or not trace_id or not span_id:
        return None
    return trace_id, span_id, bool(flags & 1)


def read_incoming(
    metadata: Iterable[tuple[str, str | bytes]] | None,
) -> tuple[str | None, str | None]:
    """The traceparent and run id headers of a call's invocation metadata, if present."""
    traceparent = run_id = None
    if metadata:
        for key, value in metadata:
            if key == TRACEPARENT_HEADER:
                traceparent = value if isinstance(value, str) else None
            elif key == RUN_ID_HEADER:
                run_id = value if isinstance(value, str) else None
    return traceparent, run_id
