"""``grpc-overhead serve`` with the app: one process receives spans, stores them and shows them.

Real processes end to end: serve (intake + chDB + Streamlit), the instrumented
prediction service and the load generator exporting OTLP straight to the
intake, and Debian's Chromium reading the app while serve still runs.
"""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest

from grpc_overhead.cli.serve import SERVE_INFO_FILE
from grpc_overhead.processes import ServiceProcess, free_port, offline_env, run_load
from harness.browser import ARTIFACTS, EXCEPTION, calls_metric, chromium, open_page, start_serve

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

CALLS = 25
RUN = "serve-app"


def test_serve_shows_calls_that_arrived_through_its_intake(tmp_path: Path):
    store, intake_port = tmp_path / "store", free_port()
    serve = start_serve(store, intake_port, offline_env())
    try:
        assert f"intake listening on 127.0.0.1:{intake_port}" in serve.text()
        with urllib.request.urlopen(serve.url + "/_stcore/health", timeout=10) as health:
            assert health.status == 200
        assert (store / SERVE_INFO_FILE).is_file()

        endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{intake_port}"}
        with ServiceProcess(
            ["--workers", "2"], env=offline_env(OTEL_SERVICE_NAME="predictor", **endpoint)
        ) as service:
            result = run_load(
                "--target",
                service.target,
                "--calls",
                str(CALLS),
                "--concurrency",
                "2",
                "--run-id",
                RUN,
                env=offline_env(OTEL_SERVICE_NAME="loadgen", **endpoint),
            )
            assert result.returncode == 0, result.stderr

        with chromium() as browser:
            page = browser.new_page()
            shown = None
            deadline = time.monotonic() + 60
            # Spans are exported within about a second; the page is reloaded until they show.
            while time.monotonic() < deadline:
                open_page(page, f"{serve.url}/overview?run={RUN}")
                assert page.locator(EXCEPTION).count() == 0
                shown = calls_metric(page)
                if shown == CALLS:
                    break
                time.sleep(1)
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "serve-app-overview.png"), full_page=True)
            assert shown == CALLS
            # Live data: auto-refresh is on by default inside serve.
            toggle = page.locator('[data-testid="stSidebar"] [data-testid="stCheckbox"]').filter(
                has_text="Auto-refresh"
            )
            assert toggle.locator("input").is_checked()
    finally:
        code = serve.stop()
    assert code == 0, serve.text()
    assert "intake stopped:" in serve.text()
    assert not (store / SERVE_INFO_FILE).exists()


def test_a_page_opened_before_the_first_call_shows_it_without_a_reload(tmp_path: Path):
    """The freshness path: the Overview is open on an empty store (its empty state stops
    the page run), calls arrive, and auto-refresh alone must bring them on screen."""
    store, intake_port = tmp_path / "store", free_port()
    serve = start_serve(store, intake_port, offline_env())
    try:
        with chromium() as browser:
            page = browser.new_page()
            open_page(page, f"{serve.url}/overview?run={RUN}")
            assert (
                "No calls stored yet" in page.locator('[data-testid="stAlert"]').first.inner_text()
            )
            # Naming the endpoint keeps the exporters' own 10 s timeout (offline_env): a first
            # store on a busy machine may take longer than 0.5 s.
            endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{intake_port}"}
            service_env = offline_env(OTEL_SERVICE_NAME="predictor", **endpoint)
            with ServiceProcess(["--workers", "2"], env=service_env) as service:
                result = run_load(
                    "--target",
                    service.target,
                    "--calls",
                    "3",
                    "--concurrency",
                    "1",
                    "--run-id",
                    RUN,
                    env=offline_env(OTEL_SERVICE_NAME="loadgen", **endpoint),
                )
                assert result.returncode == 0, result.stderr
            shown = None
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and shown != 3:
                page.wait_for_timeout(250)  # no reload, no click: the page reruns itself
                shown = calls_metric(page)
            assert shown == 3, "auto-refresh never brought the calls on screen"
            assert page.locator(EXCEPTION).count() == 0
    finally:
        serve.stop()
