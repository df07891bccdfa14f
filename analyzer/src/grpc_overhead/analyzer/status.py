"""Calls by gRPC status code: how many calls ended OK, and how the others failed.

A call's status is the code its client saw (``rpc.grpc.status_code`` on the
client span; for gRFC A72 spans, which carry no code attribute, the code their
status message names), or the server's where the client half is missing (or did
not record one); ``-1`` where neither side recorded a code (shown as
``unknown``). A call whose client failed without naming a code (grpc-go's A72
spans name it only for deadlines and cancellations) takes the server's failure
code, else ``-2`` (``failed (no code)``, counted as an error), never the
server's OK: a client whose deadline passed saw a failure, whatever the server
did. Names are gRPC's own (``grpc.StatusCode``): a reader of a
report greps for ``DEADLINE_EXCEEDED``, not for 4.

``status_codes`` counts, per (gRPC service, method) and code, the calls the
filters keep; ``report`` adds it to the JSON (``status_codes`` per method and
overall), the CSV and the table; the Overview shows it too (the overview
aggregate groups by ``CALL_STATUS`` in the same pass).
"""

from __future__ import annotations

import pandas as pd

from grpc_overhead.analyzer.call_columns import CALL_STATUS as _CALL_STATUS
from grpc_overhead.analyzer.call_columns import FAILED_NO_CODE
from grpc_overhead.analyzer.clock_offsets import merged_cte, query_parameters
from grpc_overhead.analyzer.options import CALL_FILTER, CallFilters, CallsOptions
from grpc_overhead.analyzer.result_columns import CALL_WEIGHT
from grpc_overhead.analyzer.store.base import Store

#: gRPC's status codes (grpc/doc/statuscodes.md), by number.
STATUS_NAMES: dict[int, str] = {
    0: "OK",
    1: "CANCELLED",
    2: "UNKNOWN",
    3: "INVALID_ARGUMENT",
    4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND",
    6: "ALREADY_EXISTS",
    7: "PERMISSION_DENIED",
    8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION",
    10: "ABORTED",
    11: "OUT_OF_RANGE",
    12: "UNIMPLEMENTED",
    13: "INTERNAL",
    14: "UNAVAILABLE",
    15: "DATA_LOSS",
    16: "UNAUTHENTICATED",
}
#: No side recorded a code (e.g. spans from an instrumentation that does not set it).
NOT_RECORDED = -1
#: A merged call's status code (see the module doc and ``call_columns.CALL_STATUS``).
CALL_STATUS = _CALL_STATUS

STATUS_COLUMNS = ("service", "method", "status_code", "status", "calls", "share")


def status_name(code: int) -> str:
    """``4`` -> ``DEADLINE_EXCEEDED``; ``-1`` -> ``unknown``; a code gRPC does not define
    keeps its number (``code 42``)."""
    if code == NOT_RECORDED:
        return "unknown"
    if code == FAILED_NO_CODE:
        return "failed (no code)"
    return STATUS_NAMES.get(code, f"code {code}")


def status_codes(
    store: Store, filters: CallFilters | None = None, *, options: CallsOptions | None = None
) -> pd.DataFrame:
    """Per (service, method, status code): calls (weighted: the calls made, estimated
    under sampling) and their ``share`` of the method's calls (``STATUS_COLUMNS``),
    methods in name order, the commonest code first."""
    options = options or CallsOptions()
    sql = (
        f"WITH\n{merged_cte(options)}\n"
        f"SELECT service, method, {CALL_STATUS} AS status_code,"
        f" toUInt64(round(sum({CALL_WEIGHT}))) AS calls\n"
        f"FROM merged WHERE {CALL_FILTER}\n"
        "GROUP BY service, method, status_code\n"
        "ORDER BY service, method, calls DESC, status_code"
    )
    frame = store.query(sql, query_parameters(filters, None), readonly=True)
    return with_names(frame)


def with_names(frame: pd.DataFrame) -> pd.DataFrame:
    """``status`` (the code's name) and ``share`` (of the calls of the same service and
    method) added to rows of (service, method, status_code, calls)."""
    frame = frame.copy()
    frame["status_code"] = frame["status_code"].astype("int64")
    frame["calls"] = frame["calls"].astype("int64")
    frame["status"] = [status_name(code) for code in frame["status_code"]]
    per_method = frame.groupby(["service", "method"])["calls"].transform("sum")
    frame["share"] = (frame["calls"] / per_method).astype("float64")
    return frame[list(STATUS_COLUMNS)].reset_index(drop=True)


def overall(frame: pd.DataFrame) -> pd.DataFrame:
    """``status_codes`` summed over methods: status_code, status, calls, share (of all)."""
    totals = frame.groupby(["status_code", "status"], as_index=False)["calls"].sum()
    totals["share"] = (totals["calls"] / totals["calls"].sum()).astype("float64")
    return totals.sort_values(["calls", "status_code"], ascending=[False, True]).reset_index(
        drop=True
    )
