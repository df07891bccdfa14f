"""Per method: its call shape and message counts, so a report can say what describes it.

A unary method is described by the consecutive phases; a stream by the stream
phases (``stream_phases``), the unary-only ones being NULL for it. ``report``
states which applies per method (``shape``) and lists the phases undefined for
that shape, rather than leaving a reader to guess from a column of dashes.
"""

from __future__ import annotations

import pandas as pd

from grpc_overhead.analyzer.clock_offsets import merged_cte, query_parameters
from grpc_overhead.analyzer.options import CALL_FILTER, ROW_FILTER, CallFilters, CallsOptions
from grpc_overhead.analyzer.result_columns import ALL_PHASES, CALL_WEIGHT, STREAM_PHASES
from grpc_overhead.analyzer.store.base import Store, any_row
from grpc_overhead.analyzer.stream_phases import CALL_SHAPE, STREAM_SHAPES, UNARY_ONLY

#: What a stream leaves undefined: the unary-only phases and those derived from them.
NULL_FOR_STREAMS: tuple[str, ...] = (
    *UNARY_ONLY,
    "network_overhead",
    "unattributed",
    "request_network_corrected",
    "response_network_corrected",
)


def undefined_for(shape: str) -> list[str]:
    """The phases NULL for every call of this shape (in ``ALL_PHASES`` order)."""
    if shape in STREAM_SHAPES:
        return [name for name in ALL_PHASES if name in NULL_FOR_STREAMS]
    if shape == "unary":
        return list(STREAM_PHASES)
    return []


SHAPE_COLUMNS = ("service", "method", "shape", "request_messages", "response_messages")


def method_shapes(
    store: Store, filters: CallFilters | None = None, *, options: CallsOptions | None = None
) -> pd.DataFrame:
    """Per (service, method): its commonest call shape ('' when nothing says) and the mean
    request and response messages per call (``SHAPE_COLUMNS``)."""
    options = options or CallsOptions()
    sql = (
        f"WITH\n{merged_cte(options)}\n"
        "SELECT service, method,"
        " if(countIf(call_shape != '') = 0, '', topKIf(1)(call_shape, call_shape != '')[1])"
        f" AS shape, avgWeighted(request_messages, {CALL_WEIGHT}) AS request_messages,"
        f" avgWeighted(response_messages, {CALL_WEIGHT}) AS response_messages\n"
        f"FROM (SELECT *, {CALL_SHAPE} AS call_shape FROM merged WHERE {CALL_FILTER})\n"
        "GROUP BY service, method ORDER BY service, method"
    )
    return store.query(sql, query_parameters(filters, None), readonly=True)


def any_streams(
    store: Store, filters: CallFilters | None = None, *, options: CallsOptions | None = None
) -> bool:
    """Whether any stored half in the filters' time range says its call is a stream.

    A merged call is a stream only if one of its halves says so on its own (the type is
    the same on both halves, the message counts are merged by ``max``), so False is
    exact: no call in the range is a stream, without merging a single call (``method_shapes``
    merges every call: 0.45 s at 1 M). Only the time range is applied, so a True may
    come from a call the other filters leave out; the caller then asks the full question."""
    options = options or CallsOptions()
    shapes = ", ".join(f"'{shape}'" for shape in STREAM_SHAPES)
    return any_row(
        store,
        options.calls,
        f"{ROW_FILTER} AND {CALL_SHAPE} IN ({shapes})",
        query_parameters(filters, None),
    )
