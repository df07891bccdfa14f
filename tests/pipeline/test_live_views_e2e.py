"""Live views show calls, never halves (issue 21): pages and ``report`` read while load runs
agree with what they read after it stopped.

The real stack: the instrumented service and the load generator export through the real
collector to ``serve``; while load runs, ``report --format json`` reads through serve (a
subprocess, as a user runs it) and the Instances, Clock offsets and Overview pages run
(Streamlit's AppTest) on the store read through serve's HTTP interface, several times.
After the load and the stack stopped, the same reads on the stored calls. Halves whose
peer has not arrived yet must never show: no pseudo-instance ``dialled:...``, no pseudo
clock pair (a ``service:`` domain of a missing half), no one-sided call; and every count
of a reading agrees with its others (the report's header with its status codes and
sides). Live answers are a subset of the final ones (calls still in flight aside).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from grpc_overhead.analyzer.store import open_store
from grpc_overhead.app import cached, runtime
from grpc_overhead.processes import ServiceProcess, offline_env, stop_process
from harness.ground_truth.pipeline import report, through_collector
from tests.app.charts import metrics
from tests.app.conftest import run_page

pytestmark = pytest.mark.e2e

RUN = "live-views"
#: The load's bound: it is stopped (SIGTERM: it finishes its calls and flushes) once the
#: readings are done, so this only has to outlast them on a slow machine.
LOAD_S = 120
READINGS = 2


def _report(store: Path) -> dict[str, Any]:
    return report(store, "--run", RUN)


def _pages(store_dir: Path, *, live: bool) -> dict[str, Any]:
    """What the Instances, Clock offsets and Overview pages show for the run (``live``: as
    the app runs while serve's intake writes, auto-refresh aside)."""
    with open_store(str(store_dir)) as store:
        cached.clear_caches()
        runtime.register(runtime.Served(store, live=live))
        try:
            pages = {}
            for name in ("instances", "clock_offsets", "overview"):
                at = run_page(name, {"run": RUN, "refresh": "0"})
                assert not at.exception and not at.error, (name, at.exception, at.error)
                pages[name] = at
            instances = pages["instances"].dataframe[0].value
            pairs = pages["clock_offsets"].dataframe[0].value
            shown = metrics(pages["overview"])
            return {
                "instances": set(instances["instance"]),
                "instance_calls": int(instances["calls"].sum()),
                "instances_metric": int(metrics(pages["instances"])["Calls"].replace(",", "")),
                "pairs": set(pairs["pair"]),
                "pair_calls": int(pairs["calls"].sum()),
                "overview_calls": int(shown["Calls"].replace(",", "")),
                "captions": " ".join(c.value for at in pages.values() for c in at.caption),
            }
        finally:
            runtime.unregister()
            cached.clear_caches()


def _keys(store_dir: Path) -> set[tuple[str, str]]:
    with open_store(str(store_dir)) as store:
        found = store.query(
            "SELECT trace_id, client_span_id FROM grpc_call_phases WHERE run_id = {run:String}",
            {"run": RUN},
        )
    return set(zip(found["trace_id"], found["client_span_id"], strict=True))


def _consistent(body: dict[str, Any]) -> None:
    """Every count of one report agrees with the others, and no call is one-sided."""
    shown = {key: body[key] for key in ("calls", "status_codes", "sides")}
    shown["methods"] = [(m["method"], m["calls"], m["sides"]) for m in body["methods"]]
    assert body["calls"] == sum(code["calls"] for code in body["status_codes"]), shown
    sides = body["sides"]
    assert sides == {
        "two_sided": body["calls"],
        "server_only": 0,
        "client_only": 0,
        "client_only_sampled": 0,
        "missing": None,
    }
    for method in body["methods"]:
        assert method["calls"] == sum(code["calls"] for code in method["status_codes"])
        assert method["sides"]["two_sided"] == method["calls"]
    for offset in body["clock_offsets"]:
        assert offset["server_host"] and not offset["server_host"].startswith("service:")


def _no_halves(pages: dict[str, Any]) -> None:
    assert not [name for name in pages["instances"] if name.startswith("dialled:")]
    assert not [pair for pair in pages["pairs"] if "service:" in pair or pair.endswith("→ ")]
    assert "(missing)" not in pages["captions"]
    assert "side only" not in pages["captions"]
    # Counts on one page agree with each other.
    assert pages["instance_calls"] == pages["instances_metric"]


def test_live_pages_and_report_match_after_stop(tmp_path):
    store = tmp_path / "store"
    live_reports, live_pages, live_keys = [], [], []
    with through_collector(store) as collector_port:
        endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector_port}"}
        service_env = offline_env(OTEL_SERVICE_NAME="predictor", **endpoint)
        with ServiceProcess(["--workers", "4"], env=service_env) as service:
            load = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "grpc_overhead",
                    "load",
                    "--quiet",
                    "--target",
                    service.target,
                    "--duration",
                    str(LOAD_S),
                    "--rps",
                    "100",
                    "--concurrency",
                    "4",
                    "--run-id",
                    RUN,
                ],
                env=offline_env(OTEL_SERVICE_NAME="loadgen", **endpoint),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            try:
                time.sleep(4)  # the first calls are stored
                for _ in range(READINGS):
                    if load.poll() is not None:
                        break
                    live_reports.append(_report(store))
                    live_pages.append(_pages(store, live=True))
                    live_keys.append(_keys(store))
                interrupted = load.poll() is None
                if interrupted:
                    load.send_signal(signal.SIGTERM)
                code = load.wait(timeout=LOAD_S + 60)
                assert code == (130 if interrupted else 0), load.stderr.read()
            finally:
                stop_process(load)
    # Leaving stopped the collector (it flushed to the intake), then serve.
    final = _report(store)
    final_pages = _pages(store, live=False)
    final_keys = _keys(store)

    _consistent(final)
    _no_halves(final_pages)
    assert final["calls"] == len(final_keys) > 0
    assert final_pages["overview_calls"] == final_pages["instance_calls"] == final["calls"]
    for body, pages, keys in zip(live_reports, live_pages, live_keys, strict=True):
        assert 0 < body["calls"] <= final["calls"]
        _consistent(body)
        _no_halves(pages)
        # The same calls, instances and pairs: live answers are part of the final ones.
        assert keys <= final_keys
        assert pages["instances"] <= final_pages["instances"]
        assert pages["pairs"] <= final_pages["pairs"]
        assert {(o["client_host"], o["server_host"]) for o in body["clock_offsets"]} <= {
            (o["client_host"], o["server_host"]) for o in final["clock_offsets"]
        }
    # At least two readings while load ran, each seeing more calls: they were live.
    assert len({body["calls"] for body in live_reports}) == len(live_reports) >= 2
    assert max(body["calls"] for body in live_reports) < final["calls"]
