"""The app's targets, measured in a real browser: page load time with 1 M calls in the store
(target < 2 s per page) and freshness, the time from a call finishing to it showing in the
app (target < 5 s).

Page loads. ``bench.analysis.generate`` writes 1 M calls (both halves, as the view writes
them) into a chDB store; ``grpc-overhead app`` serves it (which rolls settled minutes up,
as it does for a user) and Debian's Chromium, driven by Playwright, opens each page. A load
is the navigation until Streamlit's script run is over and every plotly chart has drawn
(harness/browser.py ``wait_loaded``). Three kinds, medians:

* ``cold``: the first load of each page in a newly started app process (nothing cached;
  the first page also pays the Python imports of the page code and the browser's first
  download of Streamlit's and plotly's JavaScript), once per app start;
* ``load``: a full load (navigation to the page's URL, a new Streamlit session) in a warm
  process and browser, with a time range no earlier load used (it still covers every
  call), so every query of the page runs again: someone opening a link;
* ``switch``: clicking the page in the sidebar from the previous page (same session, a
  rerun): moving around the app. ``grpc-overhead app`` serves a store nobody writes to
  and keeps answers for ``cached.STATIC_TTL_S``, so these come from its cache, as they
  do for a user. The explorer is reached without a trace id this way (its table, no
  waterfall).

Before and after. ``--before PYTHON`` names the interpreter of another checkout (main's
virtualenv): its app and this checkout's then serve the same store in turn, app start by app
start (``--rounds``), so both code paths meet the same machine load, and the table puts
their medians side by side. ``make bench`` measures this checkout alone.

Freshness. ``grpc-overhead serve`` (intake + store + app), the collector with the embedded
config (when built; else straight to the intake), one prediction service. Per probe, the
load generator makes one call with its own run id while the browser shows the Overview
filtered to that run; the moment the Calls metric shows it is taken from this process's
wall clock and compared with the call's client span end as stored (same host, same clock).
Two ways of watching, interleaved: ``reload`` (navigating again until it shows, as a user
pressing reload) and ``auto-refresh`` (the page left open with its auto-refresh, the default
inside ``serve``).

Results: bench/results/app.json and app.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from playwright.sync_api import TimeoutError as PlaywrightTimeout

from bench import app_start
from bench.analysis import generate
from bench.app_freshness import freshness
from bench.common import log, machine_info, markdown_table, median, publish
from grpc_overhead.analyzer.calls import create_calls
from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.schema import create_schema
from grpc_overhead.analyzer.store import open_store
from grpc_overhead.app import cached
from grpc_overhead.processes import offline_env
from harness.browser import PAGES, chromium, open_page, start_app, wait_loaded

PAGE_TARGET_S = 2.0
FRESHNESS_TARGET_S = 2.0
CALLS = 1_000_000
TITLES = dict(PAGES)
#: cold: first load per app start; load: a full load later; switch: a click in the sidebar.
KINDS = ("cold", "load", "switch")
SAW_RUN_TIMEOUT_S = 10.0


def seed(directory: Path, calls: int) -> str:
    """``calls`` generated calls in a new store; returns one trace id (for the explorer)."""
    with open_store(str(directory)) as store:
        create_schema(store)
        create_calls(store, CallsOptions())
        generate(store, calls)
        found = store.query("SELECT TraceId FROM grpc_calls LIMIT 1")
        return str(found["TraceId"].iloc[0])


_WATCH_RUNS = """
() => {
  // Any script-state change to or from "running" anywhere (the app root may be re-mounted).
  window.__sawRun = false;
  const seen = (records) => {
    for (const r of records) {
      if (r.oldValue === 'running' || r.target.getAttribute(r.attributeName) === 'running') {
        window.__sawRun = true;
      }
    }
  };
  new MutationObserver(seen).observe(document.documentElement, {
    subtree: true, attributes: true, attributeOldValue: true,
    attributeFilter: ['data-test-script-state'],
  });
}
"""


def switch_to(page: Any, path: str, title: str, timeout_s: float = 120.0) -> float:
    """Click ``title`` in the sidebar navigation (same session: a rerun, no page load)."""
    page.evaluate(_WATCH_RUNS)
    started = time.perf_counter()
    page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=title).click()
    wanted = {f"/{path}".rstrip("/")}
    if path in OVERVIEW_PATHS:  # a checkout names the default page either way
        wanted |= {f"/{other}".rstrip("/") for other in OVERVIEW_PATHS}
    page.wait_for_url(lambda url: urlparse(url).path.rstrip("/") in wanted)
    url_changed = time.perf_counter()
    # The new page's run must have started before "idle" means anything. A run answered
    # from the cache can be over before the frontend ever marks it running: then the
    # page was drawn by the time its URL changed, and that is the time counted.
    try:
        page.wait_for_function("window.__sawRun === true", timeout=SAW_RUN_TIMEOUT_S * 1000)
    except PlaywrightTimeout:
        wait_loaded(page, timeout_s)
        return url_changed - started
    wait_loaded(page, timeout_s)
    return time.perf_counter() - started


#: The code paths a run compares: "before" (another checkout, ``--before PYTHON``: main's
#: virtualenv) and "after" (this checkout), each in its own app process on the same store.
CODE_PATHS = ("before", "after")
#: The 1-minute load average after each round of loads (the machine is shared).
LOAD_SAMPLES: list[float] = []
#: Where main's app (before issue 13) serves a page, where it differs: Overview at "/" only.
BEFORE_PATHS = {"overview": ""}
#: The Overview's paths: "/" before issue 13, "/overview" since (its sidebar link).
OVERVIEW_PATHS = ("", "overview")
#: Pages a before checkout may not have (the session's start predates issue 14's
#: Experiments page): measured on that code path only if its app lists them.
NEWER_PAGES = ("experiments",)


def page_loads(
    store: Path, trace: str, rounds: int, repeats: int, pythons: dict[str, str]
) -> dict[str, Any]:
    """Per code path (``pythons``: name -> interpreter), interleaved in ``rounds``: an app
    start, every page cold, then ``repeats`` times a full load after the cache lifetime
    and a switch to it from the previous page."""
    suffix = {"explorer": f"?trace={trace}"}
    kinds: dict[str, dict[str, dict[str, list[float]]]] = {
        name: {kind: {path: [] for path, _ in PAGES} for kind in KINDS} for name in pythons
    }
    app_start_s: dict[str, list[float]] = {name: [] for name in pythons}
    served = {name: _served(python) for name, python in pythons.items()}
    for _round_index in range(rounds):
        for name, python in pythons.items():
            started = time.perf_counter()
            app = start_app(store, offline_env(), python=python)
            app_start_s[name].append(time.perf_counter() - started)
            log(f"{name}: app started in {app_start_s[name][-1]:.1f} s ({app.url})")
            try:
                where = BEFORE_PATHS if name == "before" else {}
                _load_pages(app.url, suffix, repeats, kinds[name], name, where, served[name])
            finally:
                app.stop()
    return {
        "code_paths": {name: python for name, python in pythons.items()},
        "app_start_s": {
            name: [round(v, 2) for v in values] for name, values in app_start_s.items()
        },
        "pages": [
            {
                "page": TITLES[path],
                "path": f"/{path}",
                **{
                    f"{name}_{kind}_median_s": _round(median(kinds[name][kind][path]))
                    for name in pythons
                    for kind in KINDS
                },
                **{
                    f"{name}_{kind}_s": [round(v, 3) for v in kinds[name][kind][path]]
                    for name in pythons
                    for kind in KINDS
                },
            }
            for path, _ in PAGES
        ],
    }


def _load_pages(
    url: str,
    suffix: dict[str, str],
    repeats: int,
    kinds: dict[str, dict[str, list[float]]],
    name: str,
    where: dict[str, str],
    pages: tuple[tuple[str, str], ...],
) -> None:
    with chromium() as browser:
        page = browser.new_page()
        for path, _ in pages:
            at = where.get(path, path)
            seconds = open_page(page, f"{url}/{at}{suffix.get(path, '')}", 120)
            kinds["cold"][path].append(seconds)
            log(f"  {name} cold {TITLES[path]}: {seconds:.2f} s")
        for repeat in range(repeats):
            for index, (path, _title) in enumerate(pages):
                time.sleep(cached.TTL_S + 0.5)
                # A range starting at a different instant before any call: the same
                # calls, but a new cache key, so every query of the page runs again.
                since = f"range=custom&since=2000-01-01T00:{repeat:02d}:{index:02d}"
                query = suffix.get(path, "")
                target = f"{url}/{where.get(path, path)}{query + '&' if query else '?'}{since}"
                kinds["load"][path].append(open_page(page, target, 120))
                time.sleep(cached.TTL_S + 0.5)
                after, after_title = pages[(index + 1) % len(pages)]
                switched = switch_to(page, where.get(after, after), after_title)
                kinds["switch"][after].append(switched)
            LOAD_SAMPLES.append(round(os.getloadavg()[0], 1))
            log(
                f"  {name} "
                + ", ".join(
                    f"{TITLES[p]} {kinds['load'][p][-1]:.2f}/{kinds['switch'][p][-1]:.2f}"
                    for p, _ in pages
                )
            )


def _served(python: str) -> tuple[tuple[str, str], ...]:
    """``PAGES`` without the ``NEWER_PAGES`` the checkout of ``python`` has no module for."""
    missing = []
    for path in NEWER_PAGES:
        found = subprocess.run(
            [
                python,
                "-c",
                "import importlib.util as u, sys; "
                f"sys.exit(u.find_spec('grpc_overhead.app.pages.{path}') is None)",
            ],
            capture_output=True,
            timeout=120,
        )
        if found.returncode != 0:
            missing.append(path)
    return tuple((path, title) for path, title in PAGES if path not in missing)


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


# -- report ------------------------------------------------------------------------------------


def _verdict(value: float | None, target: float) -> str:
    if value is None:
        return "-"
    return "met" if value < target else "**not met**"


def markdown(results: dict[str, Any]) -> str:
    machine = results["machine"]
    loads = results["page_loads"]
    lines = [
        f"### App: page loads and freshness ({machine['date'][:10]}; {machine['cpu_count']} "
        f"CPUs, {machine['cpu_model']}; chDB {machine['versions']['chdb']}, Streamlit "
        f"{machine['versions']['streamlit']}, Chromium {results['chromium']})",
        "",
        f"Page loads with {results['calls']:,} calls in the store (chDB), real browser; "
        f"median seconds from navigation until the script run is over and every chart is "
        f"drawn. cold: first load per app start ({results['rounds']} starts per code path); "
        "load: full load (new session) with a time range not used before, so every query "
        "runs again; "
        f"switch: click in the sidebar from the previous page, answers from the app's "
        f"{results['static_ttl_s']:g} s cache ({results['repeats'] * results['rounds']} "
        f"each). Target < {PAGE_TARGET_S:g} s. "
        + _paths_sentence(loads["code_paths"], results["load_average_1m"]),
        "",
    ]
    names = list(loads["code_paths"])
    headers = ["page"]
    for kind in ("load", "cold", "switch"):
        headers += [f"{kind} s ({name})" for name in names]
    headers.append("target (load, after)")
    rows = []
    for page in loads["pages"]:
        row = [page["page"]]
        for kind in ("load", "cold", "switch"):
            row += [page[f"{name}_{kind}_median_s"] for name in names]
        row.append(_verdict(page[f"{names[-1]}_load_median_s"], PAGE_TARGET_S))
        rows.append(row)
    lines.append(markdown_table(headers, rows))
    lines.append(
        "App start on that store (open, roll up, serve): "
        + "; ".join(
            f"{name} {', '.join(f'{s:g}' for s in values)} s"
            for name, values in loads["app_start_s"].items()
        )
        + "."
    )
    fresh = results["freshness"]
    path = "load generator -> collector -> intake" if fresh["through_collector"] else "intake"
    lines += [
        "",
        f"Freshness: call end (client span end) to the call shown in the app, through {path} "
        f"-> chDB -> app; {fresh['probes']} probes, interleaved. Target < "
        f"{FRESHNESS_TARGET_S:g} s.",
        "",
        markdown_table(
            ["watching", "median s", "p90 s", "max s", "calls", "target (median)"],
            [
                [
                    mode,
                    v["median_s"],
                    v["p90_s"],
                    v["max_s"],
                    len(v["samples_s"]),
                    _verdict(v["median_s"], FRESHNESS_TARGET_S),
                ]
                for mode, v in fresh["modes"].items()
            ],
        ),
    ]
    if fresh.get("stored_without_client_half"):
        lines.append(
            f"{fresh['stored_without_client_half']} probe(s) shown but stored without the "
            "client half (no call end to measure from): left out."
        )
    if fresh["not_shown_within_s"]["count"]:
        lines.append(
            f"{fresh['not_shown_within_s']['count']} probe(s) not shown within "
            f"{fresh['not_shown_within_s']['timeout_s']:g} s."
        )
    return "\n".join(lines) + "\n"


def _paths_sentence(paths: dict[str, str], load: list[float]) -> str:
    """Which code ran, and the load average beside the figures (always printed)."""
    measured = (
        f"1-minute load average during the run: {min(load):.1f} to {max(load):.1f} on "
        f"{os.cpu_count()} CPUs (the bench's own app and browser included)."
        if load
        else ""
    )
    if len(paths) == 1:
        return measured
    return (
        f"before: {paths['before']} (another checkout's code); after: this checkout; "
        "each in its own app process on the same store, interleaved in rounds. "
        f"{measured} A shared machine: compare the columns, not the absolutes."
    )


def _chromium_version() -> str:
    try:
        done = subprocess.run(
            ["/usr/bin/chromium", "--version"], capture_output=True, text=True, timeout=30
        )
    except OSError:
        return "?"
    return done.stdout.strip().removeprefix("Chromium ").split(" ")[0] or "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.app", description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=CALLS)
    parser.add_argument(
        "--rounds", type=int, default=2, help="app starts per code path (cold loads), interleaved"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="loads and switches per page per app start"
    )
    parser.add_argument(
        "--before",
        metavar="PYTHON",
        help="the interpreter of another checkout to compare with, side by side in this run "
        "(e.g. main's .venv/bin/python); without it only this checkout is measured",
    )
    parser.add_argument("--probes", type=int, default=10, help="freshness probes")
    parser.add_argument(
        "--no-start",
        action="store_true",
        help="skip bench.app_start (the start on an unsettled store: its own results file)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="100k calls, 1 start, 1 repeat, 4 probes; printed"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.rounds, args.repeats, args.probes = 100_000, 1, 1, 4
    pythons = {"after": sys.executable}
    if args.before:
        pythons = {"before": args.before, **pythons}
    LOAD_SAMPLES.append(round(os.getloadavg()[0], 1))  # at the start: nothing of ours yet
    # Before the run: its load average is the machine's, not the bench's own app and browser.
    machine = machine_info(("chdb", "streamlit", "plotly", "playwright"))
    directory = Path(tempfile.mkdtemp(prefix="grpc-overhead-bench-app-"))
    try:
        log(f"generating {args.calls:,} calls")
        trace = seed(directory / "store", args.calls)
        loads = page_loads(directory / "store", trace, args.rounds, args.repeats, pythons)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    log("freshness")
    results = {
        "machine": machine,
        "chromium": _chromium_version(),
        "calls": args.calls,
        "ttl_s": cached.TTL_S,
        "static_ttl_s": cached.STATIC_TTL_S,
        "repeats": args.repeats,
        "rounds": args.rounds,
        "load_average_1m": LOAD_SAMPLES,
        "page_target_s": PAGE_TARGET_S,
        "freshness_target_s": FRESHNESS_TARGET_S,
        "page_loads": loads,
        "freshness": freshness(args.probes),
    }
    code = publish("app", results, markdown(results), quick=args.quick)
    # The start on a store nobody settled, its own results (bench/results/app_start.md).
    before = ["--before", args.before] if args.before else []
    if code or args.no_start:
        return code
    return app_start.main(["--quick"] if args.quick else before)


if __name__ == "__main__":
    raise SystemExit(main())
