"""What the store holds: the choices behind the app's filters, and whether anything matches.

Both read the unmerged call halves (no ``FINAL``): they run on every page
load, so they must stay cheap at millions of calls, and a half carries the
service, method and run of its call just as the merged row does.
"""

from __future__ import annotations

import pandas as pd

from grpc_overhead.analyzer.calls import (
    CALL_FILTER,
    ROW_FILTER,
    TIME_FILTER,
    CallFilters,
    CallsOptions,
)
from grpc_overhead.analyzer.clock_offsets import query_parameters
from grpc_overhead.analyzer.store.base import Store

#: At most this many (service, method, run) choices: a filter list, not a report.
MAX_CHOICES = 500


def filter_choices(
    store: Store, filters: CallFilters | None = None, *, options: CallsOptions | None = None
) -> pd.DataFrame:
    """(service, method, run_id, calls) combinations in the time range, busiest first.

    Only the time part of ``filters`` applies: the sidebar offers every
    method of the chosen period, whatever method is selected now.
    """
    options = options or CallsOptions()
    filters = filters or CallFilters()
    time_only = CallFilters(since=filters.since, until=filters.until)
    sql = (
        # One row per call carries its client half (merged or not): counting those is
        # exact for every call whose client reported, without hashing a million keys.
        "SELECT service, method, run_id,"
        " greatest(countIf(client_start_ns != 0), uniqIf(TraceId, client_start_ns = 0)) AS calls\n"
        f"FROM {options.calls}\nWHERE {ROW_FILTER}\n"
        "GROUP BY service, method, run_id\nORDER BY calls DESC, service, method, run_id\n"
        "LIMIT {max_choices:UInt32}"
    )
    parameters = {**query_parameters(time_only, None), "max_choices": MAX_CHOICES}
    return store.query(sql, parameters, readonly=True)


def presence(
    store: Store, filters: CallFilters | None = None, *, options: CallsOptions | None = None
) -> pd.DataFrame:
    """One row: ``stored`` (any call at all) and ``matching`` (any call the filters keep), 0/1.

    Lets the app tell an empty store (say how to send data) from filters
    that exclude everything (say which to widen).
    """
    options = options or CallsOptions()
    # One half's start stands for the call's: the other half's is 0 in its row.
    halves = (
        "SELECT service, method, run_id,"
        " greatest(client_start_ns, server_start_ns) AS call_start_ns"
        f" FROM {options.calls} WHERE {ROW_FILTER}"
    )
    sql = (
        f"SELECT (SELECT count() FROM (SELECT 1 FROM {options.calls} LIMIT 1)) AS stored,\n"
        f"    (SELECT count() FROM (SELECT 1 FROM ({halves})\n"
        f"     WHERE {TIME_FILTER} AND {CALL_FILTER} LIMIT 1)) AS matching"
    )
    return store.query(sql, query_parameters(filters, None), readonly=True)
