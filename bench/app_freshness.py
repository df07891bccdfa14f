"""The freshness half of ``bench.app``: the time from a call finishing to the app showing it.

``grpc-overhead serve`` (intake + store + app), the collector with the embedded config (when
built; else straight to the intake), one prediction service; per probe one call with its own
run id while the browser shows the Overview filtered to that run (see ``bench.app``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import log, median, percentile
from grpc_overhead.processes import ServiceProcess, free_port, offline_env
from harness.browser import chromium, open_page, start_serve


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def _calls_shown(page: Any) -> int:
    metric = page.locator('[data-testid="stMetric"]').filter(has_text="Calls").first
    if metric.count() == 0:
        return 0
    return int(metric.locator('[data-testid="stMetricValue"]').inner_text().replace(",", ""))


def _collector(intake_port: int) -> Any:
    from grpc_overhead.collector.runner import CollectorError, CollectorProcess

    collector = CollectorProcess(
        "embedded",
        otlp_port=free_port(),
        intake=f"127.0.0.1:{intake_port}",
        health_port=free_port(),
    )
    try:
        return collector.start()
    except CollectorError as error:
        log(f"no collector ({error}); spans go straight to the intake")
        return None


#: Seconds a page is left open on auto-refresh, nothing arriving, while serve's CPU is read.
IDLE_S = 20.0


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads)."""
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _idle_page_cpu_share(page: Any, url: str, pid: int) -> float:
    """Share of one core serve spends while ``url`` stays open on auto-refresh and nothing
    arrives (the reruns' queries): the cost of a tab left open on a live serve."""
    open_page(page, url)
    page.wait_for_timeout(3000)  # the first run and its follow-ups are over
    before = _cpu_seconds(pid)
    page.wait_for_timeout(IDLE_S * 1000)
    return (_cpu_seconds(pid) - before) / IDLE_S


def freshness(
    probes: int,
    timeout_s: float = 60.0,
    *,
    through_collector: bool = True,
    python: str = sys.executable,
) -> dict[str, Any]:
    """``through_collector``: SDK -> collector (embedded config) -> serve, when the collector
    is built; False: SDK -> serve directly. ``python``: the interpreter (and so the
    checkout) serve, the service and the load generator (their instrumentation) run with."""
    directory = Path(tempfile.mkdtemp(prefix="grpc-overhead-bench-fresh-"))
    intake_port = free_port()
    shown_at: dict[str, tuple[str, int]] = {}
    idle_cpu = None
    serve = start_serve(directory / "store", intake_port, offline_env(), python=python)
    collector = None
    try:
        collector = _collector(intake_port) if through_collector else None
        endpoint = (
            f"http://{collector.otlp_endpoint}" if collector else f"http://127.0.0.1:{intake_port}"
        )
        # Naming the endpoint keeps the exporters' own timeout (10 s; offline_env): a first
        # store on a loaded machine may take longer than 0.5 s.
        env = offline_env(
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
            OTEL_SERVICE_NAME="predictor",
        )
        with (
            ServiceProcess(["--workers", "2"], env=env, python=python) as service,
            chromium() as browser,
        ):
            page = browser.new_page()
            for probe in range(probes):
                mode = "reload" if probe % 2 == 0 else "auto-refresh"
                run = f"fresh-{probe}"
                # The Overview (its Calls metric): ``/`` leads to Findings since it opened first.
                url = f"{serve.url}/overview?run={run}"
                open_page(page, url)
                load = subprocess.Popen(
                    [
                        python,
                        "-m",
                        "grpc_overhead",
                        "load",
                        "--quiet",
                        "--target",
                        service.target,
                        "--calls",
                        "1",
                        "--concurrency",
                        "1",
                        "--run-id",
                        run,
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    env=offline_env(
                        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
                        OTEL_SERVICE_NAME="loadgen",
                    ),
                )
                deadline = time.monotonic() + timeout_s
                while time.monotonic() < deadline:
                    if mode == "reload":
                        open_page(page, url)
                    else:
                        page.wait_for_timeout(50)
                    if _calls_shown(page) >= 1:
                        shown_at[run] = (mode, time.time_ns())
                        break
                load.wait(60)
                log(f"  probe {run} ({mode}): {'shown' if run in shown_at else 'NOT shown'}")
            if shown_at:  # the Overview of a run with a call, left open
                idle_cpu = _idle_page_cpu_share(page, url, serve.process.pid)
    finally:
        if collector is not None:
            collector.stop()
        serve.stop()
    ends, stored = _client_ends(directory / "store")
    page_query_s = _page_query_seconds(directory / "store", sorted(shown_at), python)
    shutil.rmtree(directory, ignore_errors=True)
    by_mode: dict[str, list[float]] = {"reload": [], "auto-refresh": []}
    delivery: dict[str, list[float]] = {"reload": [], "auto-refresh": []}
    missing = no_client_half = 0
    for probe in range(probes):
        run = f"fresh-{probe}"
        if run not in shown_at or run not in ends:
            missing += 1
            continue
        if not ends[run]:  # stored without its client half: no call end to measure from
            no_client_half += 1
            continue
        mode, shown = shown_at[run]
        by_mode[mode].append((shown - ends[run]) / 1e9)
        delivery[mode].append((stored[run] - ends[run]) / 1e9)
    return {
        "probes": probes,
        "through_collector": collector is not None,
        "not_shown_within_s": {"count": missing, "timeout_s": timeout_s},
        "stored_without_client_half": no_client_half,
        "page_query_s": _round(page_query_s),
        "idle_page_cpu_share": _round(idle_cpu, 3),
        "modes": {
            mode: {
                **_delays(median(values), median(delivery[mode]), page_query_s),
                "median_s": _round(median(values)),
                "p90_s": _round(percentile(values, 90)),
                "max_s": _round(max(values) if values else None),
                "samples_s": [round(value, 3) for value in values],
            }
            for mode, values in by_mode.items()
        },
    }


def _client_ends(store: Path) -> tuple[dict[str, int], dict[str, int]]:
    """run id -> the client span end (unix ns) of its call, and run id -> when its last
    half was stored (the calls view's arrival stamp), read after serve stopped."""
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
            "SELECT run_id, max(client_end_ns) AS end_ns,"
            " greatest(max(client_arrived_ns), max(server_arrived_ns)) AS stored_ns"
            " FROM grpc_calls WHERE run_id LIKE 'fresh-%' GROUP BY run_id",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=offline_env(),
    )
    if done.returncode != 0:
        raise RuntimeError(f"reading the freshness store failed: {done.stderr}")
    rows = json.loads(done.stdout)
    return (
        {row["run_id"]: int(row["end_ns"]) for row in rows},
        {row["run_id"]: int(row["stored_ns"]) for row in rows},
    )


#: Times the Overview's answer for one run on the bench's store, in a process of its own
#: (chDB runs one store per process): the page run's query share of the freshness.
_PAGE_QUERY = """
import sys, time
from grpc_overhead.analyzer.calls import CallFilters
from grpc_overhead.analyzer.insights import overview
from grpc_overhead.analyzer.store import open_store
with open_store(sys.argv[1]) as store:
    times = []
    for run in sys.argv[2:]:
        started = time.perf_counter()
        overview.overview(store, CallFilters(run_id=run))
        times.append(time.perf_counter() - started)
print(sorted(times)[len(times) // 2])
"""


def _page_query_seconds(store: Path, runs: list[str], python: str) -> float | None:
    """Median seconds of the Overview's query for each run shown (as the page asks it), on
    the code path measured (``python``: with ``--before``, the other checkout's)."""
    if not runs:
        return None
    done = subprocess.run(
        [python, "-c", _PAGE_QUERY, str(store), *runs],
        capture_output=True,
        text=True,
        timeout=300,
        env=offline_env(),
    )
    if done.returncode != 0:
        raise RuntimeError(f"timing the Overview's query failed: {done.stderr}")
    return float(done.stdout.strip().splitlines()[-1])


def _delays(
    shown_s: float | None, delivered_s: float | None, page_query_s: float | None
) -> dict[str, Any]:
    """The median's parts, named: delivery (call end to both halves stored: the SDK's
    export interval, the collector's batch and queue, the intake's write and the calls
    view), the Overview's query (``page_query_s``, measured on the same store), and the
    rest of the app's part (the refresh interval and stillness, the answer cache, the
    page's other queries and the browser's rendering)."""
    if shown_s is None or delivered_s is None:
        return {"delays_s": None}
    query = min(page_query_s or 0.0, max(shown_s - delivered_s, 0.0))
    parts = {
        "delivery": delivered_s,
        "overview_query": query,
        "refresh_and_render": max(shown_s - delivered_s - query, 0.0),
    }
    return {
        "delays_s": {name: _round(value) for name, value in parts.items()},
        "delay_shares": {name: _round(value / shown_s, 3) for name, value in parts.items()},
    }


def _delay_cells(delays: dict[str, float] | None) -> list[float | None]:
    names = ("delivery", "overview_query", "refresh_and_render")
    return [delays[name] if delays else None for name in names]


#: Issue 25's targets: call end to the call on screen, with auto-refresh.
MEDIAN_TARGET_S = 2.0
P90_TARGET_S = 3.0


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.app_freshness [--probes N] [--before PYTHON]``: both paths, one
    after the other (with ``--before``, each on both code paths in turn), on this machine as
    it is (the load average is printed beside the figures)."""
    import argparse

    from bench.common import machine_info, markdown_table, publish

    parser = argparse.ArgumentParser(prog="bench.app_freshness", description=__doc__)
    parser.add_argument("--probes", type=int, default=12, help="probes per path (half reload)")
    parser.add_argument("--quick", action="store_true", help="4 probes per path; printed")
    parser.add_argument(
        "--before",
        metavar="PYTHON",
        help="also run serve, the service and the load generator with another checkout's"
        " interpreter",
    )
    args = parser.parse_args(argv)
    probes = 4 if args.quick else args.probes
    load_at_start = os.getloadavg()[0]
    machine = machine_info(("chdb", "streamlit", "opentelemetry-sdk"))  # before the run
    codes = {"": sys.executable}
    if args.before:
        codes = {"before": args.before, "after": sys.executable}
    paths = {}
    for path, through_collector in (("SDK -> serve", False), ("SDK -> collector -> serve", True)):
        for code, python in codes.items():  # code paths one after the other, per path
            log(f"{path} {code}".rstrip())
            name = f"{path} ({code})" if code else path
            paths[name] = freshness(probes, through_collector=through_collector, python=python)
    results = {
        "before": args.before,
        "machine": machine,
        "load_average_1m_at_start": round(load_at_start, 2),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "median_target_s": MEDIAN_TARGET_S,
        "p90_target_s": P90_TARGET_S,
        "paths": paths,
    }
    rows = []
    for path, found in paths.items():
        for mode, values in found["modes"].items():
            met = (
                values["median_s"] is not None
                and values["median_s"] < MEDIAN_TARGET_S
                and values["p90_s"] < P90_TARGET_S
            )
            rows.append(
                [
                    path
                    if found["through_collector"] or "collector" not in path
                    else f"{path} (collector not built: direct)",
                    mode,
                    values["median_s"],
                    values["p90_s"],
                    values["max_s"],
                    *_delay_cells(values.get("delays_s")),
                    len(values["samples_s"]),
                    found["not_shown_within_s"]["count"],
                    found["idle_page_cpu_share"],
                    "met" if met else "not met",
                ]
            )
    markdown = "\n".join(
        [
            f"### App freshness ({machine['date'][:10]}; {machine['cpu_count']} CPUs; load average "
            f"{results['load_average_1m_at_start']} at the start, "
            f"{results['load_average_1m_at_end']} at the end)",
            "",
            "Call end (the client span's end) to the call shown on the Overview filtered to its "
            f"run, in Chromium; {probes} probes per path, alternately reloading the page and "
            "leaving it open on auto-refresh (opened before the call). Targets: median < "
            f"{MEDIAN_TARGET_S:g} s, p90 < {P90_TARGET_S:g} s. The median's parts: delivery "
            "(call end to both halves stored: the SDK's export interval, 0.25 s (1 s before "
            "2026-11-29), the collector's "
            "200 ms flush, the intake and the calls view), the Overview's query (timed on the "
            "same store afterwards), and the rest (the wait for a rerun: as soon as the intake has "
            "stored a batch and the page has been still for 0.5 s; the page's other queries, "
            f"rendering). Idle CPU: serve's CPU, as a share of one core, over {IDLE_S:g} s "
            "with the Overview of a run with one call left open on auto-refresh and nothing "
            "arriving."
            + (
                f" `before`: serve, the service and the load generator run by `{args.before}`."
                if args.before
                else ""
            ),
            "",
            markdown_table(
                [
                    "path",
                    "watching",
                    "median s",
                    "p90 s",
                    "max s",
                    "delivery s",
                    "Overview query s",
                    "refresh + render s",
                    "calls",
                    "not shown",
                    "idle CPU",
                    "target",
                ],
                rows,
            ),
            "",
        ]
    )
    return publish("app_freshness", results, markdown, quick=args.quick)


if __name__ == "__main__":
    raise SystemExit(main())
