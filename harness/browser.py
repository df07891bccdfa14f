"""Drive Debian's Chromium with Playwright against a running app (tests and bench/app.py).

Playwright's own browser download cannot work on these machines, so the
browser is the system's ``/usr/bin/chromium`` (scripts/system-packages.sh
installs it), launched with a fresh profile and without anything that
phones home. A page counts as *loaded* when Streamlit says its script run
is over (``stApp[data-test-script-state=notRunning]``), nothing is still
marked stale from the previous run or waiting for its lazily loaded code
(``stSkeleton``), and every plotly chart on it has drawn its SVG: what a
user sees as "done".
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpc_overhead.processes import stop_process

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: (url path, title) of every page, as grpc_overhead.app.navigation names them; "/" leads
#: to the first.
PAGES: tuple[tuple[str, str], ...] = (
    ("findings", "Findings"),
    ("overview", "Overview"),
    ("phases", "Phases"),
    ("payload", "Payload & compression"),
    ("instances", "Instances"),
    ("explorer", "Call explorer"),
    ("clock-offsets", "Clock offsets"),
    ("experiments", "Experiments"),
    ("sql", "SQL"),
)
EXCEPTION = '[data-testid="stException"]'
PLOTLY = '[data-testid="stPlotlyChart"]'
PLOT_DRAWN = ".js-plotly-plot .main-svg"
APP_IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"

_IDLE_JS = """
([plotly, drawn]) => {
  const app = document.querySelector('[data-testid="stApp"]');
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  if (app.getAttribute('data-test-connection-state') !== 'CONNECTED') return false;
  // Elements left from the previous run are faded ("stale") until the run replaces them.
  if (document.querySelector('[data-stale="true"]')) return false;
  // A lazily loaded element (plotly's bundle, the first time) shows a skeleton until ready.
  if (document.querySelector('[data-testid="stSkeleton"]')) return false;
  const charts = document.querySelectorAll(plotly);
  for (const chart of charts) {
    if (!chart.querySelector(drawn)) return false;
  }
  return true;
}
"""


@contextlib.contextmanager
def chromium(*, ignore_https_errors: bool = False) -> Iterator[Any]:
    """A Playwright browser context on Debian's Chromium with a fresh, temporary profile
    (``ignore_https_errors``: for an app whose certificate a test's own CA signed)."""
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="grpc-overhead-chromium-")
    try:
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile,
                executable_path=CHROMIUM,
                headless=True,
                args=CHROMIUM_ARGS,
                viewport={"width": 1400, "height": 1000},
                ignore_https_errors=ignore_https_errors,
            )
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def wait_loaded(page: Any, timeout_s: float = 60.0) -> None:
    """Until the script run is over and every plotly chart is drawn (see module doc)."""
    page.wait_for_selector('[data-testid="stApp"]', timeout=timeout_s * 1000)
    # Two consecutive idle checks 100 ms apart: a run that starts right after the first
    # one (navigation reruns the script once the session is up) is not missed.
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        page.wait_for_function(_IDLE_JS, arg=[PLOTLY, PLOT_DRAWN], timeout=timeout_s * 1000)
        page.wait_for_timeout(100)
        if page.evaluate(_IDLE_JS, [PLOTLY, PLOT_DRAWN]):
            return
    raise TimeoutError(f"page {page.url} did not settle within {timeout_s:g} s")


def open_page(page: Any, url: str, timeout_s: float = 60.0) -> float:
    """Navigate to ``url`` and wait until loaded; returns the seconds it took."""
    started = time.perf_counter()
    page.goto(url, wait_until="domcontentloaded", timeout=timeout_s * 1000)
    if _path(url) == "":
        # ``/`` is a hidden page that switches to the first one in a second script run,
        # which a loaded machine may start after the first run looked settled.
        page.wait_for_url(lambda now: _path(now) != "", timeout=timeout_s * 1000)
    wait_loaded(page, timeout_s)
    return time.perf_counter() - started


def _path(url: str) -> str:
    from urllib.parse import urlparse

    return urlparse(url).path.strip("/")


def calls_metric(page: Any) -> int | None:
    """The Overview's "Calls" metric as a number (None when the page shows none)."""
    metric = page.locator('[data-testid="stMetric"]').filter(has_text="Calls").first
    if metric.count() == 0:
        return None
    return int(metric.locator('[data-testid="stMetricValue"]').inner_text().replace(",", ""))


def query_params(url: str) -> dict[str, str]:
    from urllib.parse import parse_qsl, urlparse

    return dict(parse_qsl(urlparse(url).query))


# -- a running app -----------------------------------------------------------------------------


@dataclass
class RunningApp:
    """A ``grpc-overhead`` command that serves the app (``app`` or ``serve``), as a child."""

    process: subprocess.Popen[str]
    url: str
    output: list[str]

    def stop(self) -> int:
        """SIGTERM (what Ctrl-C does in a terminal) and wait; SIGKILL after 30 s."""
        return stop_process(self.process, 30.0)

    def text(self) -> str:
        return "".join(self.output)


def start_command(
    args: list[str],
    env: dict[str, str],
    timeout_s: float = 120.0,
    *,
    ready: str = r"^app: (http\S+)$",
    python: str = sys.executable,
) -> RunningApp:
    """Run ``grpc-overhead ARGS`` and wait for its ``app: URL`` line (or the line ``ready``
    matches: its group 1 is the URL; stdout and stderr are read by a thread, so the
    child never blocks on a full pipe). ``python``: the interpreter (and so the
    checkout) to run it with, e.g. another branch's virtualenv."""
    import queue
    import threading

    process = subprocess.Popen(
        [python, "-m", "grpc_overhead", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    output: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line)
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            line = ""
        if line is None or time.monotonic() > deadline:
            if process.poll() is None:
                process.kill()
            process.wait()
            raise RuntimeError(f"grpc-overhead {args[0]} did not start: {''.join(output)}")
        found = re.match(ready, line or "")
        if found:
            return RunningApp(process, found.group(1), output)


def start_app(store: Path, env: dict[str, str], python: str = sys.executable) -> RunningApp:
    """``grpc-overhead app --store STORE --port 0 --no-browser``."""
    args = ["app", "--store", str(store), "--port", "0", "--no-browser"]
    return start_command(args, env, python=python)


def start_serve(
    store: Path, otlp_port: int, env: dict[str, str], python: str = sys.executable
) -> RunningApp:
    """``grpc-overhead serve --store STORE --otlp-port N --app-port 0 --http-port 0``
    (intake + app + HTTP interface, on free ports: 8123 stays free on a shared machine);
    ``python``: as ``start_command``'s."""
    return start_command(
        [
            "serve",
            "--store",
            str(store),
            "--otlp-port",
            str(otlp_port),
            "--app-port",
            "0",
            "--http-port",
            "0",
        ],
        env,
        python=python,
    )


def start_serve_http(store: Path, env: dict[str, str], *extra: str) -> RunningApp:
    """``grpc-overhead serve --store STORE --no-app --otlp-port 0 --http-port 0 EXTRA``,
    awaited until its ClickHouse HTTP interface answers (``RunningApp.url`` is its URL;
    "off" with ``--no-http``)."""
    port = [] if "--no-http" in extra else ["--http-port", "0"]
    return start_command(
        ["serve", "--store", str(store), "--no-app", "--otlp-port", "0", *port, *extra],
        env,
        ready=r"^clickhouse http: (http\S+|off)",
    )
