"""Jaeger as a real peer: the fan-out, the links that point at it, and importing from it.

One real Jaeger v2 (built by scripts/build-jaeger.sh) serves the module. One
real pipeline run (prediction service + load -> collector with the
embedded-jaeger config -> serve's intake and Jaeger) feeds it and a store;
every test reads what that run left in both.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from grpc_overhead.analyzer.grafana.dashboards import tail
from grpc_overhead.analyzer.store import open_store
from grpc_overhead.app import cached, runtime
from grpc_overhead.cli.jaeger import BINARY, Jaeger, JaegerError, build, get_json
from grpc_overhead.collector.runner import CollectorProcess
from grpc_overhead.instrumentation import environment
from grpc_overhead.processes import ServiceProcess, free_port, offline_env, run_load
from harness.ground_truth.pipeline import ServeProcess, report
from tests.app.conftest import run_page
from tests.dashboards.datasource import QueryContext, expand
from tests.dashboards.seeded import variables

pytestmark = pytest.mark.e2e

CALLS = 12
RUN_ID = "jaeger-e2e"
CLIENT_EVENTS = {
    "requestCreated",
    "outboundMessage",
    "outboundMessageSent",
    "clientReceivedResponse",
    "inboundMessageRead",
}
SERVER_EVENTS = {
    "serverCallStarted",
    "inboundMessage",
    "inboundMessageRead",
    "predictionsMade",
    "outboundMessage",
    "outboundMessageSent",
}


@pytest.fixture(scope="module", name="jaeger")
def jaeger_fixture() -> Iterator[Jaeger]:
    try:
        build()
    except JaegerError as error:  # make test builds it first: a failure here must be seen
        pytest.fail(f"Jaeger cannot be built here: {error}", pytrace=False)
    with Jaeger() as jaeger:
        yield jaeger


@dataclass
class Run:
    store: Path
    started: datetime
    report: dict


@pytest.fixture(scope="module", name="run")
def run_fixture(jaeger: Jaeger, tmp_path_factory: pytest.TempPathFactory) -> Run:
    store = tmp_path_factory.mktemp("fanout") / "store"
    started = datetime.now(UTC)
    intake_port, collector_port = free_port(), free_port()
    serve = ServeProcess(store, intake_port)
    try:
        with CollectorProcess(
            "embedded-jaeger",
            otlp_port=collector_port,
            intake=f"127.0.0.1:{intake_port}",
            health_port=free_port(),
            env={environment.JAEGER_ENDPOINT: jaeger.otlp_grpc},
        ):
            endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector_port}"}
            service_env = offline_env(OTEL_SERVICE_NAME="predictor", **endpoint)
            with ServiceProcess(["--workers", "2"], env=service_env) as service:
                result = run_load(
                    "--target",
                    service.target,
                    "--calls",
                    str(CALLS),
                    "--concurrency",
                    "2",
                    "--entities",
                    "20",
                    "--features",
                    "4",
                    "--run-id",
                    RUN_ID,
                    env=offline_env(OTEL_SERVICE_NAME="loadgen", **endpoint),
                )
                assert result.returncode == 0, result.stderr
        # Leaving the block stopped the collector: it flushed to both exporters.
    finally:
        serve.stop()
    return Run(store, started, report(store, "--run", RUN_ID))


def trace_ids(store: Path) -> list[str]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_overhead",
            "sql",
            "--store",
            str(store),
            "--format",
            "json",
            f"SELECT DISTINCT TraceId AS id FROM grpc_calls WHERE run_id = '{RUN_ID}' ORDER BY id",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=offline_env(),
    )
    assert done.returncode == 0, done.stderr
    return [row["id"] for row in json.loads(done.stdout)]


def spans_of(answer: dict) -> list[dict]:
    return [
        span
        for resource in answer["result"]["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]


def test_the_fanout_sends_every_trace_to_jaeger_with_our_events(jaeger: Jaeger, run: Run) -> None:
    ids = trace_ids(run.store)
    assert len(ids) == CALLS == run.report["calls"]
    services = get_json(f"{jaeger.url}/api/v3/services")["services"]
    assert {"predictor", "loadgen"} <= set(services)
    for trace_id in ids:
        spans = spans_of(jaeger.trace(trace_id))
        kinds = {span["kind"]: span for span in spans}
        # OTLP JSON enum names (Jaeger's v3 gateway): the client and the server half.
        client = next(s for k, s in kinds.items() if "CLIENT" in str(k) or k == 3)
        server = next(s for k, s in kinds.items() if "SERVER" in str(k) or k == 2)
        assert {event["name"] for event in client["events"]} >= CLIENT_EVENTS
        assert {event["name"] for event in server["events"]} >= SERVER_EVENTS
        assert server["parentSpanId"] == client["spanId"]


def test_the_explorer_and_dashboard_links_open_a_trace_jaeger_returns(
    jaeger: Jaeger, run: Run
) -> None:
    wanted = trace_ids(run.store)[0]
    with open_store(str(run.store)) as store:
        cached.clear_caches()
        runtime.register(runtime.Served(store, jaeger_url=jaeger.url + "/"))
        try:
            page = run_page("explorer", {"trace": wanted})
            [button] = page.get("link_button")
            explorer_link = button.proto.url
        finally:
            runtime.unregister()
            cached.clear_caches()
        # The tail dashboard's slowest calls, expanded as Grafana would, with its link template.
        [slowest] = [item for item in tail()["panels"] if item["title"] == "Slowest calls"]
        window = QueryContext(run.started - timedelta(minutes=1), datetime.now(UTC))
        sql = expand(slowest["targets"][0]["rawSql"], variables(jaeger_url=jaeger.url), window)
        dashboard_ids = store.query(sql)["trace_id"].tolist()
    [override] = [o for o in slowest["fieldConfig"]["overrides"] if "trace_id" in str(o)]
    template = override["properties"][0]["value"][0]["url"]
    dashboard_links = [
        template.replace("${jaeger_url}", jaeger.url).replace("${__value.raw}", trace_id)
        for trace_id in dashboard_ids
    ]
    assert explorer_link == f"{jaeger.url}/trace/{wanted}"
    assert len(dashboard_links) == CALLS
    for link in [explorer_link, *dashboard_links]:
        base, _, trace_id = link.rpartition("/trace/")
        assert base == jaeger.url
        with urllib.request.urlopen(link, timeout=10) as page_answer:  # the UI route answers
            assert page_answer.status == 200
        spans = spans_of(jaeger.trace(trace_id))  # ...and the API has that very trace
        assert spans and all(
            span["traceId"].lower() == trace_id or len(span["traceId"]) != 32 for span in spans
        )


def import_command(jaeger: Jaeger, store: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_overhead",
            "import",
            "jaeger",
            "--url",
            jaeger.url,
            "--store",
            str(store),
            "--since",
            "30m",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=offline_env(),
        stdin=subprocess.DEVNULL,
    )


def test_import_from_jaeger_is_idempotent_and_reports_the_same(
    jaeger: Jaeger, run: Run, tmp_path: Path
) -> None:
    store = tmp_path / "imported"
    first = import_command(jaeger, store)
    assert first.returncode == 0, first.stderr
    assert "query API v3" in first.stderr and "new" in first.stderr  # progress
    assert f"imported {2 * CALLS} new spans (0 already stored" in first.stdout
    again = import_command(jaeger, store, "--service", "predictor", "--service", "loadgen")
    assert again.returncode == 0, again.stderr
    assert f"imported 0 new spans ({2 * CALLS} already stored" in again.stdout
    imported = report(store, "--run", RUN_ID)
    assert imported["calls"] == CALLS
    [ours] = run.report["methods"]
    [theirs] = imported["methods"]
    assert theirs["phases"] == ours["phases"]  # nanoseconds survive the round trip


def test_import_through_api_v1_keeps_every_call(jaeger: Jaeger, run: Run, tmp_path: Path) -> None:
    store = tmp_path / "v1"
    done = import_command(jaeger, store, "--api", "v1")
    assert done.returncode == 0, done.stderr
    assert "query API v1" in done.stderr
    imported = report(store, "--run", RUN_ID)
    [ours], [theirs] = run.report["methods"], imported["methods"]
    assert imported["calls"] == CALLS
    for phase in ("total", "processing", "server_residence", "client_serialize"):
        # v1 speaks microseconds: each timestamp loses its sub-µs part.
        assert theirs["phases"][phase]["mean_us"] == pytest.approx(
            ours["phases"][phase]["mean_us"], abs=2.0
        )


def test_import_errors_are_one_line(jaeger: Jaeger, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    for url, expected in ((dead, "unreachable"), ("ftp://x", "bad Jaeger URL")):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_overhead",
                "import",
                "jaeger",
                "--url",
                url,
                "--store",
                str(tmp_path / "s"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=offline_env(),
        )
        assert done.returncode == 2 and expected in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    nothing = import_command(jaeger, tmp_path / "s", "--service", "nobody")
    assert nothing.returncode == 0 and "no traces of this service" in nothing.stderr


def test_the_build_is_cached_and_the_binary_is_v1_76(jaeger: Jaeger) -> None:
    """A second build is a no-op (the binary is newer than the script), as the collector's."""
    before = BINARY.stat().st_mtime_ns
    done = subprocess.run(
        ["bash", "scripts/build-jaeger.sh"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=BINARY.parents[2],
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0 and "up to date" in done.stdout, done.stderr
    assert BINARY.stat().st_mtime_ns == before
    version = subprocess.run(
        [str(BINARY), "version"], capture_output=True, text=True, timeout=30, check=False
    )
    assert "v1.76.0" in version.stdout + version.stderr
