"""The app in a real browser: Debian's Chromium driven by Playwright against ``grpc-overhead app``.

The store is seeded in its own process (tests/app/seeded.py: 600 calls with
known methods, runs, instances, sizes and algorithms), the app command serves
it, and every page is opened the way a user does. Screenshots go to
``test-artifacts/browser/`` (git-ignored) whether a test passes or fails.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grpc_overhead.processes import offline_env
from harness.browser import (
    ARTIFACTS,
    EXCEPTION,
    PAGES,
    PLOT_DRAWN,
    PLOTLY,
    REPO,
    RunningApp,
    chromium,
    open_page,
    query_params,
    start_app,
    wait_loaded,
)
from tests.app.seeded import DEFAULT_CALLS, trace_id

pytestmark = pytest.mark.browser

SHOTS = ARTIFACTS / "browser"
#: The SQL console draws tables, no chart.
WITHOUT_CHARTS = {"sql"}
#: Query parameters a page needs to show everything: the explorer draws one call.
PAGE_PARAMS = {"explorer": f"?trace={trace_id(0)}"}
#: Seeded calls per method (tests/app/seeded.py: n % 10 == 7 PredictBatch, == 9 Lookup).
PREDICT_CALLS = DEFAULT_CALLS * 8 // 10
#: Predict calls of run-b (odd n, n % 10 in 1, 3, 5).
PREDICT_RUN_B_CALLS = DEFAULT_CALLS * 3 // 10


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApp]:
    store = tmp_path_factory.mktemp("browser") / "store"
    seeded = subprocess.run(
        [sys.executable, "-m", "tests.app.seeded", str(store), str(DEFAULT_CALLS)],
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


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    SHOTS.mkdir(parents=True, exist_ok=True)
    with chromium() as context:
        yield context


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    tab = browser.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield tab
        assert not errors, f"JavaScript errors: {errors}"
    finally:
        name = request.node.name.replace("/", "_").replace("[", "-").rstrip("]") or "page"
        tab.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
        tab.close()


def calls_shown(page: Any) -> int:
    """The Overview's first metric, "Calls"."""
    metric = page.locator('[data-testid="stMetric"]').filter(has_text="Calls").first
    assert metric.locator('[data-testid="stMetricLabel"]').inner_text().strip() == "Calls"
    return int(metric.locator('[data-testid="stMetricValue"]').inner_text().replace(",", ""))


def choose(page: Any, label: str, option: str) -> None:
    """Pick ``option`` in the sidebar selectbox labelled ``label``, then wait for the rerun.

    The rerun writes the choice into the URL (query parameter ``label.lower()``); waiting
    for that first means a rerun a loaded machine starts late is not mistaken for one
    already over (run9d read the old URL at load 5)."""
    box = page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').filter(
        has_text=label
    )
    box.click()
    page.get_by_role("option", name=option, exact=True).click()
    page.wait_for_url(lambda url: query_params(url).get(label.lower()) == option, timeout=60_000)
    wait_loaded(page)


@pytest.mark.parametrize(("path", "title"), PAGES, ids=[title for _, title in PAGES])
def test_every_page_loads_without_errors_and_draws_its_charts(app, page, path, title):
    open_page(page, f"{app.url}/{path}{PAGE_PARAMS.get(path, '')}")
    assert page.locator(EXCEPTION).count() == 0, page.locator(EXCEPTION).first.inner_text()
    errors = page.locator('[data-testid="stAlertContentError"]')
    assert errors.count() == 0, errors.first.inner_text()
    # The navigation lists every page by its title, and this page is the current one.
    for _, other in PAGES:
        assert page.get_by_role("link", name=other, exact=True).count() == 1, other
    current = page.locator('[data-testid="stSidebarNav"] a[aria-current="page"]')
    # (The link's text starts with its icon's ligature name.)
    assert current.inner_text().strip().splitlines()[-1] == title
    assert page.locator("h1").count() >= 1
    charts = page.locator(PLOTLY)
    if path not in WITHOUT_CHARTS:
        assert charts.count() >= 1, f"{title}: no plotly chart"
        # Drawn, not just placed: every chart has plotly's SVG.
        assert page.locator(f"{PLOTLY} {PLOT_DRAWN}").count() >= charts.count()


def test_sidebar_filters_change_the_numbers_and_the_url(app, page):
    open_page(page, f"{app.url}/overview")
    assert calls_shown(page) == DEFAULT_CALLS
    assert "method" not in query_params(page.url)

    choose(page, "Method", "Predict")
    assert query_params(page.url)["method"] == "Predict"
    assert calls_shown(page) == PREDICT_CALLS

    choose(page, "Run", "run-b")
    assert query_params(page.url) == {"method": "Predict", "run": "run-b"}
    assert calls_shown(page) == PREDICT_RUN_B_CALLS


def test_a_shared_url_opens_the_same_view(app, page):
    open_page(page, f"{app.url}/overview?method=Predict&run=run-b")
    assert calls_shown(page) == PREDICT_RUN_B_CALLS
    sidebar = page.locator('[data-testid="stSidebar"]')
    assert sidebar.get_by_role("combobox", name="Method").input_value() == "Predict"
    assert sidebar.get_by_role("combobox", name="Run").input_value() == "run-b"


def test_the_call_explorer_draws_a_pasted_trace_and_puts_it_in_the_url(app, page):
    open_page(page, f"{app.url}/explorer")
    assert page.locator(PLOTLY).count() == 0  # nothing picked yet
    wanted = trace_id(7)
    page.get_by_role("textbox", name="Trace id").fill(wanted)
    page.get_by_role("textbox", name="Trace id").press("Enter")
    wait_loaded(page)
    assert query_params(page.url)["trace"] == wanted
    assert page.locator(f"{PLOTLY} {PLOT_DRAWN}").count() >= 1
    assert page.locator(EXCEPTION).count() == 0


def test_the_sql_console_runs_a_query_and_downloads_its_csv(app, page):
    open_page(page, f"{app.url}/sql")
    page.get_by_role("textbox", name="Query").fill(
        "SELECT method, count() AS calls FROM grpc_calls FINAL GROUP BY method ORDER BY method"
    )
    page.get_by_role("button", name="Run").click()
    wait_loaded(page)
    assert page.locator(EXCEPTION).count() == 0
    assert page.locator('[data-testid="stDataFrame"]').count() == 1
    with page.expect_download() as download:
        page.get_by_role("button", name="Download CSV").click()
    csv = Path(download.value.path()).read_text().splitlines()
    other = DEFAULT_CALLS // 10
    assert csv == [
        "method,calls",
        f"Lookup,{other}",
        f"Predict,{PREDICT_CALLS}",
        f"PredictBatch,{other}",
    ]


def test_the_root_url_leads_to_the_findings_with_its_filters(app, page):
    open_page(page, f"{app.url}/?method=Predict")  # waits for the switch away from /
    assert page.url.split("?")[0].rstrip("/").endswith("/findings")
    assert query_params(page.url) == {"method": "Predict"}
    assert page.locator("h1").first.inner_text().strip() == "Findings"
    assert page.get_by_text("Page not found").count() == 0
    sidebar = page.locator('[data-testid="stSidebar"]')
    assert sidebar.get_by_role("combobox", name="Method").input_value() == "Predict"
    # The filter goes with the user to the next page.
    page.get_by_role("link", name="Overview", exact=True).click()
    wait_loaded(page)
    assert calls_shown(page) == PREDICT_CALLS


#: Per plotly chart: its legend entries that are not fully inside the legend's visible box
#: and the chart (clipped entries hide behind plotly's legend scrollbar).
_CLIPPED_LEGEND_ENTRIES = """
() => Array.from(document.querySelectorAll('.js-plotly-plot')).map((plot) => {
  const legend = plot.querySelector('g.legend');
  if (!legend) return {entries: 0, clipped: []};
  const box = legend.querySelector('rect.bg').getBoundingClientRect();
  const chart = plot.getBoundingClientRect();
  const entries = Array.from(legend.querySelectorAll('g.traces'));
  const scrollbar = legend.querySelector('rect.scrollbar');
  const clipped = entries.filter((entry) => {
    const r = entry.getBoundingClientRect();
    return r.top < box.top - 1 || r.bottom > box.bottom + 1 || r.left < chart.left - 1
      || r.right > chart.right + 1 || r.bottom > chart.bottom + 1 || r.height === 0;
  }).map((entry) => entry.textContent);
  const scrolls = scrollbar ? scrollbar.getBoundingClientRect().height > 0 : false;
  return {entries: entries.length, clipped, scrolls};
})
"""


@pytest.mark.parametrize("method", ["Lookup", None], ids=["one method", "every method"])
@pytest.mark.parametrize("path", ["overview", "phases", "payload", "instances", "clock-offsets"])
def test_every_legend_entry_is_visible_at_the_default_width(app, page, path, method):
    open_page(page, f"{app.url}/{path}" + (f"?method={method}" if method else ""))
    charts = page.evaluate(_CLIPPED_LEGEND_ENTRIES)
    assert charts, "no chart drawn"
    assert any(chart["entries"] for chart in charts), "no chart with a legend"
    for chart in charts:
        assert chart["clipped"] == [], chart
        assert not chart.get("scrolls"), chart


def test_the_experiments_page_compares_two_runs_and_shares_them_in_the_url(app, page):
    open_page(page, f"{app.url}/experiments?experiment=seeded&a=run-b&b=run-a")
    assert page.locator(EXCEPTION).count() == 0
    assert query_params(page.url) == {"experiment": "seeded", "a": "run-b", "b": "run-a"}
    assert page.get_by_text("Compare two runs").count() == 1
    # the cells table and the compare table; the compare's verdict in words
    assert page.locator('[data-testid="stDataFrame"]').count() == 2
    summary = page.locator('[data-testid="stAlertContentInfo"]').nth(1).inner_text()
    verdicts = (
        "is faster than run-b by ",
        "is slower than run-b by ",
        "vs run-b: no measurable difference at the p50",
    )
    assert summary.startswith("run-a ") and any(verdict in summary for verdict in verdicts)
    assert page.locator(f"{PLOTLY} {PLOT_DRAWN}").count() >= 3


#: Per table (``st.dataframe``) drawn (not inside a closed expander): its key's class, and
#: how many pixels of rows hide below its visible box (glide's scroller: scrollHeight
#: beyond clientHeight).
_HIDDEN_TABLE_ROWS = """
() => Array.from(document.querySelectorAll('[data-testid="stDataFrame"]'))
  .filter((frame) => frame.checkVisibility()).map((frame) => {
  const keyed = frame.closest('[class*="st-key-"]');
  const key = keyed ? Array.from(keyed.classList).find((name) => name.startsWith('st-key-')) : '';
  const scroller = frame.querySelector('.dvn-scroller');
  return {key, hidden: scroller ? scroller.scrollHeight - scroller.clientHeight : -1};
})
"""
#: Lists the user sizes (up to 1,000 calls) scroll by design; every other table shows all.
SCROLLING_TABLES = {"st-key-explorer_calls"}


@pytest.mark.parametrize(("path", "title"), PAGES, ids=[title for _, title in PAGES])
def test_every_table_shows_all_its_rows(app, page, path, title):
    """Phases has 14 rows (unattributed last, "never hidden"); Streamlit's default height
    shows ten and hides the rest behind a scrollbar."""
    open_page(page, f"{app.url}/{path}{PAGE_PARAMS.get(path, '')}")
    if path == "experiments":  # its compare table needs two runs picked
        open_page(page, f"{app.url}/experiments?experiment=seeded&a=run-b&b=run-a")
    tables = page.evaluate(_HIDDEN_TABLE_ROWS)
    if path != "sql":  # the SQL page shows a table once a query ran
        assert tables, f"{title}: no table"
    for table in tables:
        if table["key"] in SCROLLING_TABLES:
            continue
        assert table["hidden"] == 0, (title, table)
