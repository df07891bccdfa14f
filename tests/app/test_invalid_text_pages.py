"""Every page reads a store holding text that is not UTF-8 (issue 10)."""

from __future__ import annotations

import pytest

from tests.analyzer.invalid_text import insert_call_with_invalid_text
from tests.app.conftest import run_page

pytestmark = pytest.mark.e2e

PAGES = [
    "findings",
    "overview",
    "phases",
    "explorer",
    "instances",
    "payload",
    "clock_offsets",
    "sql_console",
]


@pytest.mark.parametrize("page", PAGES)
def test_page_shows_the_call(served_store, page: str) -> None:
    insert_call_with_invalid_text(served_store)
    at = run_page(page)
    assert not at.exception, at.exception
    assert not at.error, [error.value for error in at.error]
    if page == "sql_console":
        at.text_area[0].set_value("SELECT SpanName FROM otel_traces")
        at.button[0].click().run()
        assert not at.exception and not at.error
        assert at.dataframe[0].value["SpanName"].str.startswith("bad\ufffd").all()
