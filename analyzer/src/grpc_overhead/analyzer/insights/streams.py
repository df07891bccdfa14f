"""What the app shows of streams: per stream method its per-message figures, per call its
messages on a timeline.

A stream has no unary decomposition (``stream_phases``): its consecutive
phases are NULL, so it is left out of the stacked phase bars (which would
otherwise start left of 0), and these figures describe it instead.
"""

from __future__ import annotations

import pandas as pd

from grpc_overhead.analyzer.clock_offsets import ClockOptions
from grpc_overhead.analyzer.messages import call_messages
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.phases import phase_breakdown
from grpc_overhead.analyzer.result_columns import STREAM_PHASES
from grpc_overhead.analyzer.shapes import any_streams, method_shapes
from grpc_overhead.analyzer.store.base import Store
from grpc_overhead.analyzer.stream_phases import STREAM_SHAPES

#: The per-message phases a stream method's bar stacks (per-call medians), in message order.
MESSAGE_PHASES: tuple[str, ...] = STREAM_PHASES[:7]
STREAM_METHOD_COLUMNS = (
    "service",
    "method",
    "shape",
    "calls",
    "request_messages",
    "response_messages",
    "phase",
    "phase_calls",
    "p50_us",
    "mean_us",
)


def stream_methods(
    store: Store,
    filters: CallFilters | None = None,
    clock: ClockOptions | None = None,
    *,
    options: CallsOptions | None = None,
) -> pd.DataFrame:
    """Per stream method and stream phase (``STREAM_METHOD_COLUMNS``): p50 and mean over its
    calls of each per-call figure; empty when the selection has no stream."""
    if not any_streams(store, filters, options=options):
        return pd.DataFrame({column: [] for column in STREAM_METHOD_COLUMNS})
    shapes = method_shapes(store, filters, options=options)
    shapes = shapes[shapes["shape"].isin(STREAM_SHAPES)]
    if shapes.empty:
        return pd.DataFrame({column: [] for column in STREAM_METHOD_COLUMNS})
    breakdown = phase_breakdown(store, filters, clock, options=options)
    rows = breakdown[breakdown["phase"].isin(STREAM_PHASES)].merge(shapes, on=["service", "method"])
    return rows[list(STREAM_METHOD_COLUMNS)].reset_index(drop=True)


TIMELINE_COLUMNS = ("message", "part", "start_us", "end_us", "duration_us")
_PARTS = (
    ("serialize", "serialize_at_us", "sent_at_us"),
    ("transfer", "sent_at_us", "received_at_us"),
    ("deserialize", "received_at_us", "read_at_us"),
)


def message_timeline(
    store: Store,
    trace_id: str,
    client_span_id: str,
    clock: ClockOptions | None = None,
    *,
    options: CallsOptions | None = None,
) -> pd.DataFrame:
    """One call's messages as bars on the client's clock (µs after the call's start): per
    message ("request 1", "response 3", ...) its serialize, transfer and deserialize
    (``TIMELINE_COLUMNS``), requests first. Parts a source did not record are left out."""
    messages = call_messages(store, trace_id, client_span_id, clock, options=options)
    records = []
    for row in messages.to_dict("records"):
        label = f"{row['direction']} {int(row['message'])}"
        for part, start, end in _PARTS:
            if end == "received_at_us" and pd.isna(row[end]):
                end = "read_at_us"  # a source whose arrival event follows deserialization
            if pd.isna(row[start]) or pd.isna(row[end]):
                continue
            duration = float(row[end]) - float(row[start])
            records.append((label, part, float(row[start]), float(row[end]), duration))
    return pd.DataFrame.from_records(records, columns=list(TIMELINE_COLUMNS))
