"""Fixtures for the app's tests: a real chDB store registered as the app's source.

AppTest runs a page script in this process, so the store a test registers
through ``runtime.register`` is exactly what the page reads, as in ``serve``.

    def test_overview(served_store):
        insert_spans(served_store, [*synthetic_call(Truth())])
        at = run_page("overview")
        assert not at.exception
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from grpc_overhead.analyzer.store.base import Store
from grpc_overhead.app import cached, runtime
from tests.analyzer.seed import analysis_store, clear

APP_DIR = Path(cached.__file__).parent
PAGE_TIMEOUT_S = 60.0


@pytest.fixture(scope="module", name="app_store")
def app_store_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """A real chDB store with every analyzer table, shared by the module's tests."""
    with analysis_store(tmp_path_factory.mktemp("app-store")) as store:
        yield store


@pytest.fixture(name="served_store")
def served_store_fixture(app_store: Store) -> Iterator[Store]:
    """The module's store, emptied and registered as the app's source for this test."""
    clear(app_store)
    cached.clear_caches()
    runtime.register(runtime.Served(app_store))
    try:
        yield app_store
    finally:
        runtime.unregister()
        cached.clear_caches()


def page_script(name: str) -> Path:
    return APP_DIR / "pages" / f"{name}.py"


def run_page(name: str, query_params: dict[str, str] | None = None) -> AppTest:
    """Run ``app/pages/<name>.py`` once, with ``query_params`` in the URL; returns the AppTest."""
    at = AppTest.from_file(str(page_script(name)), default_timeout=PAGE_TIMEOUT_S)
    for key, value in (query_params or {}).items():
        at.query_params[key] = value
    return at.run()
