"""Streams in a real browser (Chromium via Playwright, ``grpc-overhead app``): the Overview's
stream figure and the call explorer's message timeline are drawn, without errors.
Screenshots go to ``test-artifacts/browser/``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from grpc_overhead.processes import offline_env
from harness.browser import (
    ARTIFACTS,
    EXCEPTION,
    PLOT_DRAWN,
    PLOTLY,
    REPO,
    chromium,
    open_page,
    start_app,
)

pytestmark = pytest.mark.browser

SHOTS = ARTIFACTS / "browser"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str]]:
    store = tmp_path_factory.mktemp("stream-browser") / "store"
    seeded = subprocess.run(
        [sys.executable, "-m", "tests.app.stream_seeded", str(store)],
        capture_output=True,
        text=True,
        timeout=180,
        env=offline_env(),
        cwd=REPO,
    )
    assert seeded.returncode == 0, seeded.stderr
    running = start_app(store, offline_env())
    try:
        yield running, seeded.stdout.strip()
    finally:
        running.stop()


@pytest.fixture
def page() -> Iterator[Any]:
    SHOTS.mkdir(parents=True, exist_ok=True)
    with chromium() as context:
        tab = context.new_page()
        errors: list[str] = []
        tab.on("pageerror", lambda error: errors.append(str(error)))
        yield tab
        assert not errors, f"JavaScript errors: {errors}"


def drawn(page: Any) -> None:
    assert page.locator(EXCEPTION).count() == 0, page.locator(EXCEPTION).first.inner_text()
    errors = page.locator('[data-testid="stAlertContentError"]')
    assert errors.count() == 0, errors.first.inner_text()
    charts = page.locator(PLOTLY)
    assert page.locator(f"{PLOTLY} {PLOT_DRAWN}").count() >= charts.count() >= 1


def test_the_overview_draws_streams_per_message(app, page):
    running, _ = app
    open_page(page, f"{running.url}/overview")
    drawn(page)
    streams = page.get_by_text("Streams, per message")
    assert streams.count() == 1
    streams.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "streams-overview.png"), full_page=True)


def test_the_explorer_draws_a_bidi_call_as_its_messages(app, page):
    running, trace = app
    open_page(page, f"{running.url}/explorer?trace={trace}")
    drawn(page)
    messages = page.get_by_text("Messages", exact=True)
    assert messages.count() == 1
    assert page.get_by_text("Time to first response").count() == 1
    messages.scroll_into_view_if_needed()  # the app scrolls inside its own container
    page.screenshot(path=str(SHOTS / "streams-explorer.png"), full_page=True)
