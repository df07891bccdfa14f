"""ClickHouse's HTTP interface over a ``Store``, so curl and ClickHouse clients read a chDB store.

A chDB directory belongs to one process (``serve``); this is how every other
process reads it while serve runs: ``report``, ``sql`` and ``app`` through the
``ClickHouseHttpStore`` backend, curl, clickhouse-connect and other HTTP
clients directly. Read-only, under the same ``QueryLimits`` as
``grpc-overhead sql``; the formats are those the engine emits.

    interface = HttpInterface(Answerer(store, credentials=Credentials("me", "secret")),
                              port=8123).start()
"""

from __future__ import annotations

from grpc_overhead.analyzer.http_interface.answers import Answer, Answerer, Credentials, Request
from grpc_overhead.analyzer.http_interface.listener import (
    DEFAULT_HTTP_HOST,
    DEFAULT_HTTP_PORT,
    HttpInterface,
)

__all__ = [
    "DEFAULT_HTTP_HOST",
    "DEFAULT_HTTP_PORT",
    "Answer",
    "Answerer",
    "Credentials",
    "HttpInterface",
    "Request",
]
