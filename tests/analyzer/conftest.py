"""Fixtures for the analyzer's tests that read a store through serve's real HTTP interface.

They stand on the seed's ``module_store``/``store`` fixtures, which each such test module
imports (``tests.analyzer.seed``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from grpc_overhead.analyzer.http_interface import Answerer, Credentials, HttpInterface
from grpc_overhead.analyzer.store import ClickHouseHttpStore
from grpc_overhead.analyzer.store.base import Store

#: The interface's one user, as its clients log in.
HTTP_USER = "reader"
HTTP_PASSWORD = "s3cret"


@pytest.fixture(scope="module")
def interface(module_store: Store) -> Iterator[HttpInterface]:
    """serve's HTTP interface on the module's store, on a free port."""
    answerer = Answerer(module_store, credentials=Credentials(HTTP_USER, HTTP_PASSWORD))
    running = HttpInterface(answerer, port=0).start()
    yield running
    running.stop()


@pytest.fixture
def reader(interface: HttpInterface, store: Store) -> Store:
    """The module's store, emptied for this test, read through the interface (read-only)."""
    return ClickHouseHttpStore(
        interface.url, user=HTTP_USER, password=HTTP_PASSWORD, read_only=True
    )
