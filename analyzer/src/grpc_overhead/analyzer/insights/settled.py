"""Per-phase sketches that read settled minutes from the rollups, as ``report`` does.

A page's distribution of a phase needs every call's value, which for a
million calls means merging two million call halves and computing every
phase: seconds. But the rollups (``rollup``) already hold, per settled
minute, each phase's t-digest state, sum and count, the very states
``report`` merges. ``phase_states_sql`` is the source a page aggregates
instead: the rollup rows of the settled minutes inside the filters' range,
``UNION ALL`` the same states computed raw over the other calls (the edges
of the range, the last minutes), so the answer covers every call matching
the filters and only the unsettled calls are merged and computed.

A t-digest state can be read at any levels (``quantilesTDigestIfMerge(levels)``),
so one sketch answers the quantile table, the ECDF and a histogram. Where
rollups cannot answer (other clock options, an OpenTelemetry service filter:
``rollup.settled_range``), everything is computed raw, with the same result
shape.
"""

from __future__ import annotations

from typing import Any

from grpc_overhead.analyzer.calls import rows_to_scan
from grpc_overhead.analyzer.clock_offsets import query_parameters
from grpc_overhead.analyzer.insights.rows import needs_clock
from grpc_overhead.analyzer.options import ROLLUP_FILTER, CallFilters, CallsOptions
from grpc_overhead.analyzer.phase_aggregates import state_aggregates
from grpc_overhead.analyzer.phases import per_call_sql
from grpc_overhead.analyzer.rollup import settled_range
from grpc_overhead.analyzer.store.base import Store


def phase_states_sql(
    store: Store,
    filters: CallFilters | None,
    options: CallsOptions | None = None,
    *,
    finished_at: str | None = None,
) -> tuple[str, dict[str, Any], bool]:
    """(SQL, parameters, from rollups): rows of ``{phase}_q`` (t-digest state, ns),
    ``{phase}_sum`` (ns) and ``{phase}_calls`` for every phase of ``ALL_PHASES``,
    covering the calls ``filters`` keep; merge them with ``-Merge``/``sum``.

    ``finished_at``: where no minute is settled (from rollups False), one row with the
    quantiles at these levels instead of the states, nothing left to merge
    (``phase_aggregates``: the same figures, in less time)."""
    options = options or CallsOptions()
    settled = settled_range(store, filters, None, options)
    parameters = query_parameters(filters, None, settled)
    # One host needs no clock estimate (rows.needs_clock); the rollups have the
    # estimate applied, which across hosts is what the raw part then computes too.
    clock = needs_clock(store, filters, options)
    per_call = per_call_sql(options, clock=clock)
    if not settled:
        finished = ",\n    ".join(state_aggregates(finished_at=finished_at))
        return f"SELECT\n    {finished}\nFROM ({per_call})", parameters, False
    states = ",\n    ".join(state_aggregates())
    raw = f"SELECT\n    {states}\nFROM ({per_call})"
    names = [column.split(" AS ")[-1] for column in state_aggregates()]
    rolled = (
        f"SELECT {', '.join(names)} FROM {options.qualified(options.rollup_table)}\n"
        "WHERE window_start_ns >= {settled_from_ns:Int64}"
        " AND window_start_ns < {settled_until_ns:Int64}"
        f" AND calls > 0 AND {ROLLUP_FILTER}"
    )
    if not rows_to_scan(store, options, parameters):
        return rolled, parameters, True
    return f"{rolled}\nUNION ALL\n{raw}", parameters, True
