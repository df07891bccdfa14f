"""A query from the SQL page stops when its browser tab goes away (issue 10).

Before, an endless query kept a core busy after the tab was closed, for as long
as the process lived. The app runs as its own process (``grpc-overhead app``),
so the test watches that process's CPU time once the tab is closed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from grpc_overhead.processes import offline_env
from harness.browser import REPO, RunningApp, chromium, open_page, start_app

pytestmark = pytest.mark.browser

ENDLESS = "SELECT count() FROM numbers(1000000000000000)"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApp]:
    store = tmp_path_factory.mktemp("abandoned") / "store"
    seeded = subprocess.run(
        [sys.executable, "-m", "tests.app.seeded", str(store), "10"],
        capture_output=True,
        text=True,
        timeout=120,
        env=offline_env(),
        cwd=REPO,
    )
    assert seeded.returncode == 0, seeded.stderr
    running = start_app(store, offline_env())
    try:
        yield running
    finally:
        running.stop()


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_share(pid: int, seconds: float = 1.0) -> float:
    """CPU seconds per second the process used over the next ``seconds``."""
    before = _cpu_seconds(pid)
    time.sleep(seconds)
    return (_cpu_seconds(pid) - before) / seconds


def _cpu_share_once(pid: int, reached: Callable[[float], bool], limit_s: float = 60) -> float:
    """The process's CPU share, second by second, until ``reached`` (or the limit)."""
    deadline = time.monotonic() + limit_s
    share = _cpu_share(pid)
    while not reached(share) and time.monotonic() < deadline:
        share = _cpu_share(pid)
    return share


def test_closing_the_tab_kills_its_query(app: RunningApp) -> None:
    pid = app.process.pid
    with chromium() as browser:
        page = browser.new_page()
        open_page(page, f"{app.url}/sql")
        page.get_by_role("textbox", name="Query").fill(ENDLESS)
        page.get_by_role("button", name="Run").click()
        running = _cpu_share_once(pid, lambda share: share > 0.25)
        page.close()
    assert running > 0.25, f"the query did not seem to run ({running:.2f} s CPU per s)"
    # The session ends, the watcher polls every 0.2 s, the engine stops: within the limit.
    after = _cpu_share_once(pid, lambda share: share < 0.5 * running)
    assert after < 0.5 * running, (
        f"still busy a minute after the tab closed: {after:.2f} s CPU per s "
        f"(running: {running:.2f})"
    )
