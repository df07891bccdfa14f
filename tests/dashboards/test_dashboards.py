"""The Grafana dashboards: their JSON model, and every panel's query on a real chDB store.

Each panel's rawSql goes through the datasource's own expansion steps
(``datasource.expand``) and runs on a chDB store seeded with known calls; the
numbers are checked against the seed and against ``report`` on the same store.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from grpc_overhead.analyzer.grafana.__main__ import main as write_dashboards
from grpc_overhead.analyzer.grafana.dashboards import DASHBOARDS, TABLE_PHASES
from grpc_overhead.analyzer.grafana.experiments import CALLS_WHERE, RUNS_WHERE
from grpc_overhead.analyzer.grafana.panels import (
    DATASOURCE,
    FILTERS,
    PLUGIN,
    SCHEMA_VERSION,
    VARIABLE_QUERIES,
)
from grpc_overhead.analyzer.options import CallFilters
from grpc_overhead.analyzer.phase_view import create_call_tables
from grpc_overhead.analyzer.report import build_report
from grpc_overhead.analyzer.runs import list_runs, run_calls
from grpc_overhead.analyzer.store.base import Store
from tests.dashboards import seeded
from tests.dashboards.datasource import QueryContext, Variable, expand

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "dashboards"
PANEL_TYPES = {"table": 1, "timeseries": 0, "barchart": 1, "stat": 1}
EXPERIMENTS = "grpc-overhead-experiments.json"


def load(name: str) -> dict[str, Any]:
    return json.loads((FOLDER / name).read_text())


def panels(names: tuple[str, ...] = tuple(DASHBOARDS)) -> Iterator[tuple[str, dict[str, Any]]]:
    for name in names:
        for panel in load(name)["panels"]:
            yield name, panel


def panel(name: str, title: str) -> dict[str, Any]:
    for candidate in load(name)["panels"]:
        if candidate["title"] == title:
            return candidate
    raise KeyError(title)


# -- the JSON model -----------------------------------------------------------------------------


@pytest.mark.unit
def test_the_committed_files_are_what_the_generator_writes() -> None:
    assert write_dashboards([str(FOLDER), "--check"]) == 0


@pytest.mark.unit
def test_every_dashboard_follows_the_datasources_conventions() -> None:
    uids = set()
    for name in DASHBOARDS:
        model = load(name)
        assert model["schemaVersion"] == SCHEMA_VERSION
        assert model["uid"].startswith("grpc-overhead-") and model["uid"] not in uids
        uids.add(model["uid"])
        required = {item["id"]: item for item in model["__requires"]}
        assert required[PLUGIN]["type"] == "datasource"
        names = [variable["name"] for variable in model["templating"]["list"]]
        if name == EXPERIMENTS:
            assert names == ["datasource", "database", "experiment", "invocation"]
        else:
            assert names == [
                "datasource",
                "database",
                "service",
                "method",
                "run",
                "instance",
                "jaeger_url",
            ]
        for variable in model["templating"]["list"]:
            if variable["name"] in ("service", "method", "run", "instance"):
                assert variable["includeAll"] and variable["multi"]
                assert variable["datasource"] == DATASOURCE
        ids = [item["id"] for item in model["panels"]]
        assert len(ids) == len(set(ids))


@pytest.mark.unit
def test_every_panel_is_a_sql_target_on_the_clickhouse_datasource() -> None:
    count = 0
    for name, item in panels():
        count += 1
        assert item["datasource"] == DATASOURCE, (name, item["title"])
        assert item["type"] in PANEL_TYPES, (name, item["title"])
        assert item["description"] and item["title"]
        (target,) = item["targets"]
        assert target["datasource"] == DATASOURCE
        assert target["editorType"] == "sql"
        assert target["format"] == PANEL_TYPES[item["type"]]
        sql = target["rawSql"]
        if name == EXPERIMENTS:
            assert RUNS_WHERE in sql, item["title"]
            assert "$__timeFilter(start_time)" in sql or "$__toTime" in sql
            continue
        assert "$__timeFilter(start_time)" in sql
        assert "${database}.`grpc_calls` FINAL" in sql.replace("`${database}`", "${database}")
        for condition in FILTERS:
            assert condition in sql, (name, item["title"], condition)
    assert count >= 22


@pytest.mark.unit
def test_no_panel_calls_total_minus_processing_network() -> None:
    """network_overhead (total - processing) holds queuing and serialization too: a panel
    that plots it does not call it network in its title, as the app no longer does
    (issue 21); the phase table lists it under its phase name."""
    for name, shown in panels():
        sql = " ".join(target["rawSql"] for target in shown["targets"])
        if "network_overhead_us" in sql:
            assert "network" not in shown["title"].lower(), (name, shown["title"])
    tail = panel("grpc-overhead-tail.json", "p50 vs p99: total and all but processing")
    assert "total - processing" in tail["description"]


@pytest.mark.unit
def test_trace_ids_link_to_jaeger() -> None:
    linked = 0
    for _, item in panels():
        columns = item["targets"][0]["rawSql"].split("FROM", 1)[0]
        if "trace_id" not in columns:
            continue
        linked += 1
        (override,) = [
            override
            for override in item["fieldConfig"]["overrides"]
            if override["matcher"] == {"id": "byName", "options": "trace_id"}
        ]
        (links,) = [prop["value"] for prop in override["properties"] if prop["id"] == "links"]
        assert links[0]["url"] == "${jaeger_url}/trace/${__value.raw}"
    assert linked == 2  # the slowest calls and the failed calls


@pytest.mark.unit
def test_provisioning_files_name_the_plugin_and_the_folder() -> None:
    datasources = yaml.safe_load(
        (FOLDER / "provisioning/datasources/grpc-overhead-clickhouse.yaml").read_text()
    )
    (source,) = datasources["datasources"]
    assert datasources["apiVersion"] == 1
    assert source["type"] == PLUGIN
    assert source["jsonData"]["protocol"] in ("native", "http")
    assert source["jsonData"]["traces"]["defaultTable"] == "otel_traces"
    providers = yaml.safe_load((FOLDER / "provisioning/dashboards/grpc-overhead.yaml").read_text())
    (provider,) = providers["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]


# -- every query on a real store ---------------------------------------------------------------


@pytest.fixture(scope="module", name="store")
def store_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    yield from seeded.seeded_store(tmp_path_factory.mktemp("dashboards"))


def run(
    store: Store,
    item: dict[str, Any],
    variables: dict[str, Variable] | None = None,
    context: QueryContext = seeded.CONTEXT,
) -> pd.DataFrame:
    sql = expand(item["targets"][0]["rawSql"], variables or seeded.variables(), context)
    assert "$" not in sql.replace("'$'", ""), "an unexpanded macro or variable is left"
    return store.query(sql, readonly=True)


@pytest.mark.e2e
def test_every_panel_query_runs_and_shows_the_seeded_calls(store: Store) -> None:
    for name, item in panels():
        frame = run(store, item)
        assert len(frame) > 0, (name, item["title"])
        empty = run(store, item, context=seeded.EMPTY_RANGE)
        if item["type"] != "stat":
            assert empty.empty, (name, item["title"])


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None or (isinstance(a, float) and math.isnan(a)):
        return (a is None or math.isnan(a)) and (b is None or math.isnan(b))
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


def _assert_breakdown_is_the_reports(dashboard: pd.DataFrame, report: pd.DataFrame) -> None:
    expected = report[report["phase"].isin(TABLE_PHASES)]
    assert len(dashboard) == len(expected) > 0
    merged = dashboard.merge(expected, on=["service", "method", "phase"], suffixes=("", "_r"))
    assert len(merged) == len(expected)
    for row in merged.itertuples(index=False):
        assert row.calls == row.calls_r and row.phase_calls == row.phase_calls_r, row
        for statistic in ("p50_us", "p90_us", "p99_us", "mean_us"):
            ours, theirs = getattr(row, statistic), getattr(row, f"{statistic}_r")
            ours = None if row.phase_calls == 0 else ours
            assert _close(ours, theirs), (row.method, row.phase, statistic, ours, theirs)


@pytest.mark.e2e
def test_phase_breakdown_is_the_reports(store: Store) -> None:
    table = panel("grpc-overhead-phases.json", "Phase breakdown (p50 / p90 / p99 / mean, µs)")
    _assert_breakdown_is_the_reports(run(store, table), build_report(store).breakdown)
    # Filters select what report's filters select.
    selected = run(store, table, seeded.variables(method=["PredictBatch"], run=["run-2"]))
    filters = CallFilters(method="PredictBatch", run_id="run-2")
    _assert_breakdown_is_the_reports(selected, build_report(store, filters).breakdown)
    assert set(selected["method"]) == {"PredictBatch"}
    assert set(run(store, table, seeded.variables(run=["run-2", "run-1"]))["method"]) == {
        "Predict",
        "PredictBatch",
        "Remote",
    }


@pytest.mark.e2e
def test_instance_filter_and_load_balance(store: Store) -> None:
    table = panel("grpc-overhead-instances.json", "Per server instance")
    frame = run(store, table).set_index("server_instance")
    half = seeded.PREDICT_CALLS // 2
    assert frame["calls"].to_dict() == {
        "s-1": half + seeded.BATCH_CALLS,
        "s-2": half,
        "s-3": seeded.REMOTE_CALLS,
    }
    assert math.isclose(frame["share_pct"].sum(), 100, abs_tol=0.05)
    assert frame.loc["s-1", "errors"] + frame.loc["s-2", "errors"] == seeded.FAILED_CALLS
    only = run(store, table, seeded.variables(instance=["s-2"]))
    assert only["server_instance"].tolist() == ["s-2"] and only["calls"].tolist() == [half]
    # A client instance selects the calls it made, whichever server served them.
    by_client = run(store, table, seeded.variables(instance=["c-2"]))
    assert by_client["calls"].sum() == seeded.BATCH_CALLS


@pytest.mark.e2e
def test_tail_compares_each_phase_with_the_reports_median(store: Store) -> None:
    frame = run(store, panel("grpc-overhead-tail.json", "Slowest 1% vs median, per phase (µs)"))
    report = build_report(store).breakdown.set_index(["method", "phase"])
    for row in frame.itertuples(index=False):
        expected = report.loc[(row.method, row.phase)]
        assert _close(row.median_us if expected.phase_calls else None, expected.p50_us)
        assert _close(row.tail_from_us, report.loc[(row.method, "total")].p99_us)
    predict = frame[(frame["method"] == "Predict") & (frame["phase"] == "processing")].iloc[0]
    # The slowest Predict calls are the ones with the longest processing (10 µs steps).
    assert predict.slowest_1pct_mean_us > predict.median_us + 500
    slowest = run(store, panel("grpc-overhead-tail.json", "Slowest calls"))
    assert slowest["total_us"].is_monotonic_decreasing and len(slowest) == 50
    assert slowest["trace_id"].str.fullmatch("[0-9a-f]{32}").all()


@pytest.mark.e2e
def test_clock_offsets_are_the_reports(store: Store) -> None:
    frame = run(store, panel("grpc-overhead-clock-offsets.json", "Offset per host pair"))
    report = build_report(store).offsets.set_index(["client_host", "server_host"])
    remote = frame[frame["server_host"] == "host-b"].iloc[0]
    expected = report.loc[("host-a", "host-b")]
    assert remote.calls == seeded.REMOTE_CALLS == expected.calls
    assert _close(remote.offset_us, expected.offset_us)
    assert _close(remote.uncertainty_us, expected.uncertainty_us)
    # The jitter-free estimate is the true offset within its uncertainty; the raw
    # one-way phases carry the offset, the corrected ones do not, the sum is exact.
    assert abs(remote.offset_us - seeded.SERVER_OFFSET_NS / 1000) <= remote.uncertainty_us
    shift = remote.request_network_raw_mean_us - remote.request_network_mean_us
    assert _close(shift, remote.offset_us)
    raw_sum = remote.request_network_raw_mean_us + remote.response_network_raw_mean_us
    assert _close(raw_sum, remote.both_directions_mean_us)
    local = frame[frame["server_host"] == "host-a"].iloc[0]
    assert local.offset_us == 0 and local.calls == seeded.PREDICT_CALLS + seeded.BATCH_CALLS


@pytest.mark.e2e
def test_errors_and_payload_show_the_seed(store: Store) -> None:
    codes = run(store, panel("grpc-overhead-errors.json", "Status codes per method"))
    failed = codes[codes["status_code"] == 14]
    assert failed[["method", "calls"]].values.tolist() == [
        [f"{seeded.SERVICE}/Predict", seeded.FAILED_CALLS]
    ]
    calls = run(store, panel("grpc-overhead-errors.json", "Failed calls"))
    assert len(calls) == seeded.FAILED_CALLS and set(calls["status_code"]) == {14}
    payload = run(store, panel("grpc-overhead-payload.json", "Per method and compression"))
    batch = payload[payload["method"] == f"{seeded.SERVICE}/PredictBatch"].iloc[0]
    assert batch.compression_used == "gzip" and batch.calls == seeded.BATCH_CALLS
    assert batch.request_bytes == seeded.BATCH_REQUEST_BYTES


@pytest.mark.e2e
def test_variable_queries_list_what_the_store_holds(store: Store) -> None:
    def options(name: str, variables: dict[str, Variable] | None = None) -> list[str]:
        sql = expand(VARIABLE_QUERIES[name], variables or seeded.variables(), seeded.CONTEXT)
        return store.query(sql, readonly=True).iloc[:, 0].tolist()

    assert options("service") == [seeded.SERVICE]
    assert options("method") == ["Predict", "PredictBatch", "Remote"]
    assert options("run") == ["run-1", "run-2"]
    assert options("instance") == ["c-1", "c-2", "s-1", "s-2", "s-3"]
    assert options("method", seeded.variables(service=["other.Service"])) == []
    database = next(
        variable
        for variable in load("grpc-overhead-phases.json")["templating"]["list"]
        if variable["name"] == "database"
    )
    found = store.query(expand(database["query"]["rawSql"], seeded.variables(), seeded.CONTEXT))
    assert found.iloc[:, 0].tolist()[0] == "default"


# -- the experiments dashboard -------------------------------------------------------------------


@pytest.mark.e2e
def test_experiment_cells_are_the_grpc_runs_rows(store: Store) -> None:
    expected = list_runs(store, seeded.EXPERIMENT).set_index("run_id")
    cells = run(store, panel(EXPERIMENTS, "Cells"))
    assert cells["run_id"].tolist() == ["run-1", "run-2"] == expected.index.tolist()
    for row in cells.itertuples(index=False):
        want = expected.loc[row.run_id]
        assert json.loads(row.config) == json.loads(want.config)
        assert (row.invocation, row.cell, row.calls, row.errors) == (
            seeded.INVOCATION,
            want.cell,
            want.calls,
            want.errors,
        )
        for column in ("calls_per_s", "predictions_per_s", "p50_us", "p99_us", "under_load"):
            assert getattr(row, column) == want[column], (row.run_id, column)
        assert row.rounds == len(json.loads(want.rounds))
    # the verdict against the baseline, as recorded; a baseline has none
    baseline, batched = cells.itertuples(index=False)
    assert (baseline.against, baseline.verdict, list(baseline.interval_us)) == ("", "", [])
    assert (batched.against, batched.verdict, batched.diff_us) == ("batch=1", "slower", 3100.0)
    assert list(batched.interval_us) == [2800.5, 3400.25]
    assert (baseline.under_load, batched.under_load, batched.rounds) == (0, 1, 3)
    throughput = run(store, panel(EXPERIMENTS, "Throughput per cell"))
    assert throughput["predictions_per_s"].tolist() == [97.5, 6400.0]
    assert throughput["errors"].tolist() == [seeded.FAILED_CALLS, 0]
    # The experiment variable selects: the other experiment's cell (run-x) only there.
    other = run(store, panel(EXPERIMENTS, "Cells"), seeded.variables(experiment="other"))
    assert other["run_id"].tolist() == ["run-x"]
    unknown = seeded.variables(invocation=["batching-19700101T000000"])
    assert run(store, panel(EXPERIMENTS, "Cells"), unknown).empty


@pytest.mark.e2e
def test_per_cell_phases_are_report_runs(store: Store) -> None:
    item = panel(EXPERIMENTS, "Per cell and method: total p50 / p99 and mean phases (µs)")
    assert CALLS_WHERE in item["targets"][0]["rawSql"]
    frame = run(store, item)
    stacked = run(store, panel(EXPERIMENTS, "Mean phases per cell (stacked)")).set_index("run_id")
    assert stacked.index.tolist() == ["run-1", "run-2"]
    # run-1 holds the Predict and the Remote calls, run-2 the PredictBatch ones.
    assert frame[["run_id", "method", "calls"]].values.tolist() == [
        ["run-1", "Predict", seeded.PREDICT_CALLS],
        ["run-1", "Remote", seeded.REMOTE_CALLS],
        ["run-2", "PredictBatch", seeded.BATCH_CALLS],
    ]
    for row in frame.itertuples(index=False):
        report = build_report(store, CallFilters(run_id=row.run_id)).breakdown
        expected = report.set_index(["method", "phase"]).loc[row.method]
        assert row.calls == expected.loc["total", "calls"]
        assert _close(row.total_p50_us, expected.loc["total", "p50_us"])
        assert _close(row.total_p99_us, expected.loc["total", "p99_us"])
        for phase in stacked.columns:
            mean = expected.loc[phase, "mean_us"] if expected.loc[phase, "phase_calls"] else None
            assert _close(getattr(row, f"{phase}_mean_us"), mean), (row, phase)
    # The stack per cell: each phase's mean over the run's calls (all methods).
    for run_id in stacked.index:
        calls = run_calls(store, run_id)
        for phase in stacked.columns:
            values = calls[f"{phase}_us"].dropna()
            expected = float(values.mean()) if len(values) else None
            assert _close(stacked.loc[run_id, phase], expected), (run_id, phase)
    # run-2's batches process for 4 ms each: the stack shows it.
    assert _close(stacked.loc["run-2", "processing"], 4000.0)
    # A selection of another experiment shows only its own cells' calls.
    other = run(store, item, seeded.variables(experiment="other"))
    assert other.empty


@pytest.mark.e2e
def test_the_experiments_dashboard_runs_where_no_experiment_ran(store: Store) -> None:
    # What `serve` / `report` leave on a ClickHouse fed by the collector: the experiments
    # dashboard must show no data there, not "Unknown table grpc_runs". (One chDB store per
    # process: the seeded one, its runs set aside meanwhile.)
    store.command("RENAME TABLE grpc_runs TO grpc_runs_set_aside")
    try:
        create_call_tables(store)
        for _, item in panels(("grpc-overhead-experiments.json",)):
            assert run(store, item).empty, item["title"]
    finally:
        store.command("DROP TABLE IF EXISTS grpc_runs")
        store.command("RENAME TABLE grpc_runs_set_aside TO grpc_runs")
