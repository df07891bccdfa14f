"""``python -m tests.pipeline.page_counts STORE RUN...``: what the app's pages and the JSON
report say, per run and for the whole store.

Calls the analyzer functions the Overview, Phases and sidebar use and builds the
report the way ``grpc-overhead report --format json`` does, with one engine start
for everything; prints ``{run_id or "": {...}}``: the calls each counts, the calls
seen from one side only, which phases are defined for how many calls, the report.
"""

from __future__ import annotations

import json
import sys

from grpc_overhead.analyzer.calls import calls_source, create_calls
from grpc_overhead.analyzer.insights import catalog, overview, phases, rows
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.report import build_report, to_json
from grpc_overhead.analyzer.rollup import settle
from grpc_overhead.analyzer.store import open_store


def main(argv: list[str]) -> int:
    store_dir, run_ids = argv[0], argv[1:]
    options = CallsOptions()
    answers = {}
    # The stopped store, opened here: nothing in flight, nothing held back (as `report`
    # and the app read such a store: ``CallFilters.at_rest``).
    with open_store(store_dir) as store:
        create_calls(store, options)
        settle(store, options)
        choices = catalog.filter_choices(store, options=options)
        at_rest = CallFilters().at_rest()
        everything = overview.summary(overview.overview(store, at_rest, options=options)).iloc[0]
        answers[""] = {
            "official_spans": _official_spans(store),
            "overview_calls": int(everything["calls"]),
            "report": to_json(build_report(store, at_rest, options=options)),
        }
        for run_id in run_ids:
            filters = CallFilters(run_id=run_id).at_rest()
            summary = overview.summary(overview.overview(store, filters, options=options))
            quantiles = phases.phase_quantiles(store, filters, options=options)
            phase_calls = quantiles.groupby("phase")["calls"].max().astype(int).to_dict()
            row = summary.iloc[0]
            sides = rows.sides(store, filters, options=options).iloc[0]
            answers[run_id] = {
                "overview_calls": int(row["calls"]),
                "overview": {k: _plain(row[k]) for k in summary.columns if "start" not in k},
                "sidebar_calls": int(choices[choices["run_id"] == run_id]["calls"].sum()),
                "phase_calls": phase_calls,
                "sides": {name: int(sides[name]) for name in sides.index},
                "out_of_order": _out_of_order(store, run_id, filters, options),
                "report": to_json(build_report(store, filters, options=options)),
            }
    print(json.dumps(answers))
    return 0


def _out_of_order(
    store: object, run_id: str, filters: CallFilters, options: CallsOptions
) -> dict[str, dict]:
    """Per method: the calls whose request (response) events are both there but stamped
    in reverse order on one shared clock (every process here runs on this machine), a
    thread having stamped its "sent" after the peer read. Such a call's one-way network
    phase (and ``unattributed``, made from it) is left out by design
    (``analyzer.phase_bounds``), so a test counts it apart."""
    request = (
        "server_call_started_ns != 0 AND client_outbound_message_sent_ns != 0"
        " AND server_call_started_ns < client_outbound_message_sent_ns"
    )
    response = (
        "client_received_response_ns != 0 AND server_outbound_message_sent_ns != 0"
        " AND client_received_response_ns < server_outbound_message_sent_ns"
    )
    found = store.query(  # type: ignore[attr-defined]
        f"SELECT method, countIf({request}) AS request_network,"
        f" countIf({response}) AS response_network,"
        f" countIf(({request}) OR ({response})) AS unattributed"
        f" FROM ({calls_source(options)})"
        " WHERE run_id = {counted_run:String} GROUP BY method",
        {**filters.parameters(), "counted_run": run_id},
    )
    return {
        row["method"]: {
            phase: int(row[phase])
            for phase in ("request_network", "response_network", "unattributed")
        }
        for _, row in found.iterrows()
    }


def _official_spans(store: object) -> dict[str, int]:
    """opentelemetry-instrumentation-grpc's spans in the store: how many, how many folded
    into one of ours, and how many share no trace with a span of ours."""
    found = store.query(  # type: ignore[attr-defined]
        "SELECT count() AS spans,"
        " countIf(SpanAttributes['grpc_overhead.folded_into'] != '') AS folded,"
        " countIf(TraceId NOT IN (SELECT TraceId FROM otel_traces"
        "   WHERE ScopeName = 'grpc_overhead.instrumentation')) AS other_trace"
        " FROM otel_traces WHERE ScopeName = 'opentelemetry.instrumentation.grpc'"
    )
    return {name: int(found[name].iloc[0]) for name in found.columns}


def _plain(value: object) -> object:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
