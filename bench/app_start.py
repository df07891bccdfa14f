"""The app's start on a store nobody settled, and its first pages, before and after.

    python -m bench.app_start [--calls 1000000] [--rounds 3] [--before PYTHON] [--quick]

A store written by ``serve`` is settled as it goes; one imported, generated or left by
a short-lived serve is not, and ``grpc-overhead app`` on it used to roll every minute
up before it answered (issue 25: 19.4 s at 1 M calls). Per round and code path, on a
fresh copy of the same unsettled store (so no path finds the other's roll-up): the
app's start (command to its "app:" line), the first Overview in a real browser
(navigation to drawn), and the time to a usable Overview (the two together); then,
once the roll-up is over (after: its "rolled up" line; before: it was over before the
start), a full load of the Overview on a new session and range, as later users get
it. Code paths interleaved round by round; medians. ``--before``: another checkout's
interpreter (``.venv/bin/python``). Writes bench/results/app_start.{json,md}.
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

from bench.common import log, machine_info, markdown_table, median, publish
from grpc_overhead.processes import offline_env
from harness.browser import chromium, open_page, start_app

CALLS = 1_000_000
ROLLED_UP = "settled minutes rolled up"


def one_start(store: Path, python: str, rolls_up_first: bool) -> dict[str, float | None]:
    """Start the app on ``store``; its start, first Overview and Overview once rolled up.
    ``rolls_up_first``: the code rolls the store up before it starts (the before path)."""
    with chromium() as browser:  # launched first: its start is not the app's
        started = time.perf_counter()
        app = start_app(store, offline_env(), python=python)
        start_s = time.perf_counter() - started
        try:
            first_s = open_page(browser.new_page(), f"{app.url}/overview", timeout_s=300)
            usable_s = time.perf_counter() - started
            deadline = time.monotonic() + 600
            while not rolls_up_first and ROLLED_UP not in app.text():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the roll-up did not end within 600 s:\n{app.text()}")
                time.sleep(0.5)
            rolled_up_s = time.perf_counter() - started
            # A new session and a range no query has used: every query of the page runs.
            since = "range=custom&since=2000-01-01T00:00:01"
            later_s = open_page(browser.new_page(), f"{app.url}/overview?{since}", timeout_s=300)
        finally:
            app.stop()
    return {
        "start_s": round(start_s, 2),
        "first_overview_s": round(first_s, 2),
        "usable_s": round(usable_s, 2),
        "rolled_up_s": round(rolled_up_s, 2),
        "overview_after_roll_up_s": round(later_s, 2),
    }


def measure(calls: int, rounds: int, pythons: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    directory = Path(tempfile.mkdtemp(prefix="grpc-overhead-bench-app-start-"))
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in pythons}
    try:
        log(f"generating {calls:,} calls")
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from harness.generated_calls import main; "
                "sys.exit(main(sys.argv[1:]))",
                str(directory / "seed"),
                str(calls),
            ],
            check=True,
            cwd=Path(__file__).parent.parent,
        )
        for round_number in range(rounds):
            for name, python in pythons.items():
                copy = directory / f"{name}-{round_number}"
                shutil.copytree(directory / "seed", copy, symlinks=True)  # relative links
                numbers = one_start(copy, python, rolls_up_first=name == "before")
                runs[name].append({**numbers, "load": os.getloadavg()[0]})
                log(f"{name}, round {round_number + 1}: {runs[name][-1]}")
                shutil.rmtree(copy, ignore_errors=True)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return runs


KEYS = ("start_s", "first_overview_s", "usable_s", "overview_after_roll_up_s")


def markdown(result: dict[str, Any]) -> str:
    machine = result["machine"]
    loads = [run["load"] for runs in result["runs"].values() for run in runs]
    lines = [
        "# The app's start on a store nobody settled",
        "",
        f"{machine['date']}, {machine['cpu_count']} CPUs, load average "
        f"{machine['load_average_1m_at_start']:.2f} at the start ({min(loads):.2f}-"
        f"{max(loads):.2f} after each start). {result['calls']:,} generated calls, never "
        f"rolled up; each start on a fresh copy; medians of {result['rounds']} interleaved "
        "rounds. start: the command to its `app:` line; first Overview: navigation to drawn, "
        "in a real browser; usable: the two together; Overview after the roll-up: a new "
        "session and range once every minute is rolled up.",
        "",
        markdown_table(
            ["code path", "start s", "first Overview s", "usable s", "Overview after roll-up s"],
            [
                [name, *(median([run[key] for run in runs]) for key in KEYS)]
                for name, runs in result["runs"].items()
            ],
        ),
        f"Targets: start < 5 s, every page < 2 s. `before`: {result.get('before') or 'none'}.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.app_start", description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=CALLS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", metavar="PYTHON", help="another checkout's interpreter")
    parser.add_argument("--quick", action="store_true", help="100k calls, 1 round; printed")
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.rounds = 100_000, 1
    pythons = {"after": sys.executable}
    if args.before:
        pythons = {"before": args.before, **pythons}
    result = {
        "machine": machine_info(("chdb", "streamlit")),
        "calls": args.calls,
        "rounds": args.rounds,
        "before": args.before,
        "runs": measure(args.calls, args.rounds, pythons),
    }
    result["medians"] = {
        name: {key: median([run[key] for run in runs]) for key in KEYS}
        for name, runs in result["runs"].items()
    }
    return publish("app_start", result, markdown(result), quick=args.quick)


if __name__ == "__main__":
    sys.exit(main())
