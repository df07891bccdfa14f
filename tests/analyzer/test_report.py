"""The report: JSON contract, CSV and table formats, and the command's errors."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from grpc_overhead.analyzer.report import build_report, render_table, to_csv, to_json
from grpc_overhead.analyzer.result_columns import ALL_PHASES, DESIGN_PHASES
from grpc_overhead.cli.report import ReportInputError, main, parse_moment
from tests.analyzer import seed
from tests.analyzer.seed import MS, Truth, module_store_fixture, store_fixture  # noqa: F401

CLI = Path(sys.executable).with_name("grpc-overhead")


def mixed_calls(store) -> None:
    """Predict across hosts with events, Health same-host with events, Legacy without events."""
    spans = [
        span
        for pair in seed.calls_across_hosts(
            4, server_offset=37 * MS, request_network=3 * MS, response_network=MS
        )
        for span in pair
    ]
    for index in range(3):
        truth = Truth(start=seed.BASE_NS + index * MS)
        spans += seed.synthetic_call(truth, method="Health")
        spans += seed.synthetic_call(truth, service="legacy.Old", method="Get", official=True)
    seed.insert_spans(store, spans)


@pytest.mark.e2e
def test_json_contract(store):
    mixed_calls(store)
    document = json.loads(json.dumps(to_json(build_report(store))))
    assert {
        "calls",
        "stored_calls",
        "methods",
        "clock_offsets",
        "status_codes",
        "sides",
        "store",
    } == set(document)
    assert document["calls"] == document["stored_calls"] == 10  # nothing sampled: weight 1
    size = document["store"]  # the whole store's, per table and per call
    assert size["calls"] == 10
    tables = {entry["table"]: entry for entry in size["tables"]}
    assert tables["otel_traces"]["rows"] == 20 and tables["grpc_calls"]["rows"] > 0
    assert size["bytes_on_disk"] == sum(entry["bytes_on_disk"] for entry in size["tables"])
    assert size["bytes_per_call"] == round(size["bytes_on_disk"] / 10, 1)
    for entry in size["tables"]:
        assert entry["bytes_per_call"] == round(entry["bytes_on_disk"] / 10, 1)
    two_sided = {
        "two_sided": 10,
        "server_only": 0,
        "client_only": 0,
        "client_only_sampled": 0,
        "missing": None,
    }
    assert document["sides"] == two_sided
    methods = {(m["service"], m["method"]): m for m in document["methods"]}
    assert set(methods) == {
        ("predict.Predictor", "Predict"),
        ("predict.Predictor", "Health"),
        ("legacy.Old", "Get"),
    }
    for method in document["methods"]:
        assert {"service", "method", "calls", "stored_calls", "phases", "sides"} <= set(method)
        assert method["stored_calls"] == method["calls"]
        assert method["sides"]["two_sided"] == method["calls"]
        assert set(DESIGN_PHASES) <= set(method["phases"])
        assert list(method["phases"]) == list(ALL_PHASES)
        for statistics in method["phases"].values():
            assert {"p50_us", "p90_us", "p99_us", "mean_us"} <= set(statistics)
    legacy = methods[("legacy.Old", "Get")]
    assert legacy["calls"] == 3
    assert legacy["phases"]["processing"] == {
        "p50_us": None,
        "p90_us": None,
        "p99_us": None,
        "mean_us": None,
        "calls": 0,
    }
    assert legacy["phases"]["total"]["p50_us"] == pytest.approx(
        Truth().expected_phases_us()["total"], rel=1e-6
    )
    health = methods[("predict.Predictor", "Health")]["phases"]
    assert health["processing"]["mean_us"] == 2000
    offsets = {(o["client_host"], o["server_host"]): o for o in document["clock_offsets"]}
    for offset in offsets.values():
        assert {"client_host", "server_host", "offset_us", "uncertainty_us", "calls"} <= set(offset)
    assert offsets[("host-a", "host-b")]["offset_us"] == 38_000
    assert offsets[("host-a", "host-b")]["uncertainty_us"] == 2_000
    assert offsets[("host-a", "host-a")]["offset_us"] == 0


@pytest.mark.e2e
def test_csv_and_table(store):
    mixed_calls(store)
    report = build_report(store)
    rows = list(csv.DictReader(io.StringIO(to_csv(report))))
    assert len(rows) == 3 * len(ALL_PHASES)
    assert set(rows[0]) == {
        "errors",
        "status_codes",
        "stored_calls",
        "service",
        "method",
        "calls",
        "phase",
        "phase_calls",
        "p50_us",
        "p90_us",
        "p99_us",
        "mean_us",
    }
    processing = [r for r in rows if r["method"] == "Get" and r["phase"] == "processing"]
    assert processing[0]["p50_us"] == "" and processing[0]["phase_calls"] == "0"
    text = render_table(report, width=120)
    assert "predict.Predictor/Predict: 4 calls" in text
    assert "unattributed" in text and "client_server_gap" in text
    assert "host-b" in text and "38,000.0" in text
    assert "bytes per call over 10 calls" in text and "biggest tables: " in text


@pytest.mark.unit
def test_since_and_until_parsing():
    now = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
    assert parse_moment("15m", option="--since", now=now) == now - timedelta(minutes=15)
    assert parse_moment("2h", option="--since", now=now) == now - timedelta(hours=2)
    assert parse_moment("1.5d", option="--since", now=now) == now - timedelta(hours=36)
    assert parse_moment("2026-11-21T10:00:00Z", option="--since") == datetime(
        2026, 11, 21, 10, tzinfo=UTC
    )
    assert parse_moment("2026-11-21T10:00:00", option="--since").tzinfo is not None
    with pytest.raises(ReportInputError, match="bad --since 'yesterday'"):
        parse_moment("yesterday", option="--since")
    with pytest.raises(ReportInputError, match="bad --since '99999999d': that is before year 1"):
        parse_moment("99999999d", option="--since")


@pytest.mark.unit
def test_command_errors_before_opening_a_store(tmp_path, capsys):
    assert main(["--store", str(tmp_path), "--since", "last tuesday"]) == 2
    assert "bad --since 'last tuesday'" in capsys.readouterr().err
    missing = tmp_path / "nowhere"
    assert main(["--store", str(missing)]) == 2
    assert f"no store at {missing}" in capsys.readouterr().err
    assert not missing.exists()  # the report never creates a store
    assert main(["--store", str(tmp_path), "--window", "0"]) == 2
    for window in ("nan", "inf", "1e308"):  # each one a traceback before
        assert main(["--store", str(tmp_path), "--window", window]) == 2
        assert f"bad --window {window}" in capsys.readouterr().err.replace("1e+308", "1e308")
    # Backwards: nothing could match, which looked like a quiet hour (exit 0, empty report).
    assert main(["--store", str(tmp_path), "--since", "1h", "--until", "2h"]) == 2
    assert "--since 1h (" in capsys.readouterr().err


def calls_with_statuses(store) -> None:
    """Predict: 3 OK, 2 DEADLINE_EXCEEDED (client saw it), 1 UNAVAILABLE the server alone
    reported (its client half is missing); Health: 2 OK from another OTel client service."""
    spans = []
    for index in range(6):
        client, server = seed.synthetic_call(Truth(start=seed.BASE_NS + index * MS))
        if index in (3, 4):
            client.attributes["rpc.grpc.status_code"] = "4"
            client.status = "Error"
        if index == 5:
            server.attributes["rpc.grpc.status_code"] = "14"
            spans.append(server)
            continue
        spans += [client, server]
    for index in range(2):
        client, server = seed.synthetic_call(
            Truth(start=seed.BASE_NS + (10 + index) * MS), method="Health"
        )
        client.service_name = "health-checker"
        spans += [client, server]
    seed.insert_spans(store, spans)


@pytest.mark.e2e
def test_status_codes_in_json_csv_and_table(store):
    calls_with_statuses(store)
    report = build_report(store)
    document = json.loads(json.dumps(to_json(report)))
    assert {"calls", "methods", "clock_offsets", "status_codes"} <= set(document)
    methods = {m["method"]: m for m in document["methods"]}
    assert methods["Predict"]["errors"] == 3
    assert methods["Predict"]["status_codes"] == [
        {"code": 0, "status": "OK", "calls": 3, "share": 0.5},
        {"code": 4, "status": "DEADLINE_EXCEEDED", "calls": 2, "share": 0.3333},
        {"code": 14, "status": "UNAVAILABLE", "calls": 1, "share": 0.1667},
    ]
    assert methods["Health"]["errors"] == 0
    assert document["status_codes"][0] == {"code": 0, "status": "OK", "calls": 5, "share": 0.625}
    assert sum(entry["calls"] for entry in document["status_codes"]) == document["calls"] == 8

    rows = list(csv.DictReader(io.StringIO(to_csv(report))))
    predict = [row for row in rows if row["method"] == "Predict"]
    assert {row["errors"] for row in predict} == {"3"}
    assert predict[0]["status_codes"] == "OK=3;DEADLINE_EXCEEDED=2;UNAVAILABLE=1"
    text = render_table(report, width=160)
    assert "status codes: OK 3 (50.0%), DEADLINE_EXCEEDED 2 (33.3%), UNAVAILABLE 1" in text


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(CLI), "report", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "120"},
    )


@pytest.mark.e2e
def test_command_on_a_real_store(module_store, tmp_path):
    """One process owns a chDB directory: the report gets a clear message while we hold it,
    and the report once it is free."""
    store = seed.clear(module_store)
    mixed_calls(store)
    directory = store.directory
    locked = run_cli("--store", directory, "--format", "json")
    assert locked.returncode == 2
    assert "is in use by process" in locked.stderr and "Traceback" not in locked.stderr

    empty = tmp_path / "empty"
    empty.mkdir()
    store.close()
    result = run_cli("--store", str(empty))
    assert result.returncode == 2, result.stderr
    assert "no calls yet: send OTLP to the intake" in result.stderr
    assert "Traceback" not in result.stderr

    result = run_cli("--store", directory, "--format", "json", "--service", "predict.Predictor")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["calls"] == 7
    assert [m["method"] for m in document["methods"]] == ["Health", "Predict"]
    assert document["store"]["calls"] == 10  # the store's size is the whole store's
    assert "grpc_settled_calls" in {entry["table"] for entry in document["store"]["tables"]}

    result = run_cli("--store", directory, "--format", "csv", "--method", "Get")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == 1 + len(ALL_PHASES)

    result = run_cli("--store", directory, "--run", "run-2")  # a typo, not an empty report
    assert result.returncode == 2
    assert "no calls of run 'run-2'; known runs: run-1" in result.stderr

    result = run_cli("--store", directory, "--since", "10m")  # the seeded calls are older
    assert result.returncode == 0 and "no calls match the filters" in result.stdout
