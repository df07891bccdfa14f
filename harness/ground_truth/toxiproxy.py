"""The harness's toxiproxy: the product's driver (``grpc_overhead.cli.toxiproxy``), re-exported."""

from grpc_overhead.cli.toxiproxy import (
    BINARY,
    DOWNSTREAM,
    UPSTREAM,
    Proxy,
    Toxiproxy,
    ToxiproxyError,
    find_binary,
)

__all__ = [
    "BINARY",
    "DOWNSTREAM",
    "UPSTREAM",
    "Proxy",
    "Toxiproxy",
    "ToxiproxyError",
    "find_binary",
]
