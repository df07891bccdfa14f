"""The per-call source every chart page aggregates (``rows_for``).

Settled minutes come from ``grpc_settled_calls`` (``call_rollup``: the same rows,
stored by the settle), so only the unsettled rest is merged and computed: at 1 M
calls that is what brought the pages' queries from 0.9-3.9 s to 0.2-0.6 s.

``phases.per_call_sql`` always estimates clock offsets (a second pass over
every call, plus a scalar subquery) to correct the one-way phases. These pages
need that only when their calls span more than one host (``needs_clock``): on
one host the one-way phases are exact without it, and skipping it makes a
query over 1 M unmerged calls about three times cheaper (1.8 s -> 0.6 s
measured on two cores), which is what keeps a page under the 2 s target.
Across hosts they pay for it: every page shows the best estimate.

Everything else is ``phases``' and ``calls``' own: the same ``PHASES``
expressions, the same merged-calls CTE, the same filters and parameters.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import Any

import pandas as pd

from grpc_overhead.analyzer import call_rollup, weighted
from grpc_overhead.analyzer.call_rollup import ALGORITHM as ALGORITHM
from grpc_overhead.analyzer.call_rollup import rows_sql as rows_sql
from grpc_overhead.analyzer.calls import rows_to_scan
from grpc_overhead.analyzer.clock_offsets import ClockOptions, query_parameters
from grpc_overhead.analyzer.options import (
    CALL_FILTER,
    HAS_ROW_START,
    ROW_FILTER,
    CallFilters,
    CallsOptions,
)
from grpc_overhead.analyzer.phase_terms import phases_read
from grpc_overhead.analyzer.phases import PHASES, needed_phases
from grpc_overhead.analyzer.result_columns import ALL_PHASES, CONSECUTIVE_PHASES
from grpc_overhead.analyzer.rollup import settled_range
from grpc_overhead.analyzer.store.base import Store

#: Phases computable without an offset estimate (``Phase.only_with_clock``; today all).
CLOCKLESS_PHASES = tuple(phase for phase in PHASES if not phase.only_with_clock)
CLOCKLESS_PHASE_NAMES = tuple(phase.name for phase in CLOCKLESS_PHASES)

#: What a stacked bar shows: the consecutive phases and the rest, which add up to total.
STACKED_PHASES: tuple[str, ...] = (*CONSECUTIVE_PHASES, "unattributed")

#: Calls seen from one side only: a server whose callers are not instrumented (no client
#: half: no total, no network phases; its server phases and count stand), or a client
#: calling a server that is not (client phases and total stand).
SERVER_ONLY = "server_duration_defined AND NOT total_defined"
CLIENT_ONLY = "total_defined AND NOT server_duration_defined"
#: Client-only calls whose server dropped its half by design (tail-aware sampling: the
#: server named itself in its trailer, the only way ``server_instance`` is set without a
#: server half): its server is instrumented, the half was not kept.
CLIENT_ONLY_SAMPLED = f"{CLIENT_ONLY} AND server_instance != ''"

#: Bucket lengths a timeline picks from (seconds): round numbers a reader trusts.
BUCKET_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)


def rows_for(
    store: Store,
    filters: CallFilters | None,
    options: CallsOptions | None = None,
    keys: str = "",
    *,
    clock: bool | None = None,
    clock_options: ClockOptions | None = None,
    phases: Collection[str] | None = None,
    estimates: bool = False,
) -> tuple[str, dict[str, Any]]:
    """(SQL, bound values): ``rows_sql`` rows of the calls ``filters`` keep; settled
    minutes read from ``grpc_settled_calls`` (the same rows, stored when they
    settled) and only the other calls computed raw. Callers add their own values
    to the bound ones.

    ``clock``: whether the raw part estimates clock offsets; by default only where
    it is needed (``needs_clock``); False for a caller that reads no one-way phase.
    ``clock_options``: bound too; other than the defaults, everything is raw (the
    stored rows have the default windows).
    ``phases``: only these phases' columns (``phases.per_call_sql``; ``phases_read``
    finds them in a query's text), where a query reads a few.
    ``estimates``: also each call's clock estimate (``call_rollup.ESTIMATE_COLUMNS``,
    ``clock_defined``): the raw part then always estimates offsets, and settled minutes
    give the ones the settle stored (a million calls computed raw for the clock finding
    took 2.7 s; read stored, a tenth of that).
    """
    options = options or CallsOptions()
    if estimates:
        clock = True
    elif clock is None:
        clock = needs_clock(store, filters, options)
    raw = rows_sql(options, clock=clock, keys=keys, phases=phases)
    settled = _settled(store, filters, clock_options, options)
    bound = query_parameters(filters, clock_options, settled)
    if not settled:
        return raw, bound
    columns = call_rollup.settled_columns(store, options, estimates=estimates)
    if phases is not None:
        left_out = {
            f"`{name}_{part}`"
            for name in set(ALL_PHASES) - needed_phases(phases)
            for part in ("value", "defined")
        }
        columns = [column for column in columns if column not in left_out]
    stored = call_rollup.settled_rows_sql(columns, options)
    if not rows_to_scan(store, options, bound):
        return stored, bound
    return f"{stored}\nUNION ALL\nSELECT {', '.join(columns)} FROM ({raw})", bound


def _settled(
    store: Store, filters: CallFilters | None, clock: ClockOptions | None, options: CallsOptions
) -> tuple[int, int] | None:
    """The settled minutes in the filters' range, when ``grpc_settled_calls`` has them
    (it keeps the OpenTelemetry service names, so that filter applies to it too)."""
    if not call_rollup.has_settled_calls(store, options):
        return None
    any_otel = replace(filters, otel_service=None) if filters is not None else None
    return settled_range(store, any_otel, clock, options)


def needs_clock(
    store: Store, filters: CallFilters | None, options: CallsOptions | None = None
) -> bool:
    """Whether the filtered calls name more than one host, so that their one-way phases
    need the clock offset estimate. Reads the unmerged halves' host columns: cheap."""
    options = options or CallsOptions()
    found = store.query(
        "SELECT length(arrayFilter(host -> host != '', arrayDistinct(arrayConcat("
        "groupUniqArray(client_host), groupUniqArray(server_host))))) AS hosts\n"
        f"FROM {options.calls} WHERE {ROW_FILTER} AND {CALL_FILTER}",
        parameters(filters),
        readonly=True,
    )
    return int(found["hosts"].iloc[0]) > 1


def parameters(filters: CallFilters | None) -> dict[str, Any]:
    """The bound values ``rows_sql`` takes (default clock options: host domains, 60 s windows)."""
    return query_parameters(filters, None)


def halves(
    store: Store, filters: CallFilters | None, options: CallsOptions | None = None
) -> tuple[int, int, int] | None:
    """(first, last call start in Unix ns, half rows) of the stored halves the filters
    keep, or None. Reads three columns without merging halves: cheap at any size,
    and only used to choose bucket lengths and sampling rates."""
    options = options or CallsOptions()
    start = "greatest(client_start_ns, server_start_ns)"
    scan = parameters(filters)
    found = store.query(
        f"SELECT min({start}) AS first, max({start}) AS last, count() AS n\n"
        f"FROM {options.calls} WHERE {ROW_FILTER} AND {HAS_ROW_START} AND {CALL_FILTER}",
        scan,
        readonly=True,
    )
    if not int(found["n"].iloc[0]):
        return None
    first, last = int(found["first"].iloc[0]), int(found["last"].iloc[0])
    # The halves pre-filter is wider than the call filter by a margin; clip to the filter.
    return max(first, scan["since_ns"]), min(last, scan["until_ns"] - 1), int(found["n"].iloc[0])


def time_span(
    store: Store, filters: CallFilters | None, options: CallsOptions | None = None
) -> tuple[int, int] | None:
    """(first, last) call start in Unix ns (``halves``), or None."""
    found = halves(store, filters, options)
    return (found[0], found[1]) if found else None


def bucket_seconds(first_ns: int, last_ns: int, target: int) -> int:
    """The shortest round bucket that cuts ``[first, last]`` into at most ``target`` buckets."""
    span_s = max(last_ns - first_ns, 0) / 1e9
    for step in BUCKET_STEPS_S:
        if span_s / step <= target:
            return step
    return BUCKET_STEPS_S[-1]


#: What ``sides`` counts (after ``service, method`` when ``by_method``).
SIDES_COLUMNS = ("calls", "server_only_calls", "client_only_calls", "client_only_sampled_calls")


def sides(
    store: Store,
    filters: CallFilters | None = None,
    *,
    options: CallsOptions | None = None,
    by_method: bool = False,
) -> pd.DataFrame:
    """One row: ``calls``, ``server_only_calls``, ``client_only_calls`` (``SERVER_ONLY``,
    ``CLIENT_ONLY``) and, among those, ``client_only_sampled_calls`` (``CLIENT_ONLY_SAMPLED``)
    among the calls the filters keep, so a page can say why a phase
    that needs both sides is missing for them; ``by_method``: one row per (service,
    method), for ``report``. Neither side needs a clock estimate: none is computed."""
    counts = (  # weighted: the calls made, estimated under sampling
        f"{weighted.count()} AS calls,"
        f" {weighted.count_if(SERVER_ONLY)} AS server_only_calls,"
        f" {weighted.count_if(CLIENT_ONLY)} AS client_only_calls,"
        f" {weighted.count_if(CLIENT_ONLY_SAMPLED)} AS client_only_sampled_calls"
    )
    rows, bound = rows_for(store, filters, options, clock=False, phases=phases_read(counts))
    if by_method:
        sql = (
            f"SELECT service, method, {counts} FROM ({rows})"
            " GROUP BY service, method ORDER BY service, method"
        )
    else:
        sql = f"SELECT {counts} FROM ({rows})"
    return store.query(sql, bound, readonly=True)
