"""The moment a report or a page reads the store as of (``CallFilters.as_of_ns``).

Each half row of ``grpc_calls`` is stamped with the engine's clock when its INSERT runs
(``client_arrived_ns``/``server_arrived_ns``), but its rows become visible only when that
INSERT commits, which under load takes a while (the intake's INSERT ... SELECT of a
batch of spans: seconds on a busy machine). A snapshot taken while one runs would see
that batch in some of its queries and not in others: a report's header would count calls
its status codes do not. So the snapshot is "now", or just before the oldest INSERT
still running if any: every row stamped up to it has committed, and every later one is
left to the next read.

Where the process that runs the inserts is known, it says (``Store.known_snapshot``: an
embedded store notes its span inserts, ``store.in_flight``; serve's HTTP interface answers
for the store serve owns). Elsewhere (a ClickHouse server that other writers fill) the
engine's list of running queries is the only source: one cheap query of
``system.processes``, less exact (``MARGIN_NS``).
"""

from __future__ import annotations

from grpc_overhead.analyzer.errors import QueryError
from grpc_overhead.analyzer.store.base import Snapshot, Store

#: Taken off the oldest running INSERT's start. Its rows' stamps (``now64()``, fixed when
#: the statement is analyzed) can precede the start its ``elapsed`` gives by tens of ms on
#: a busy machine: at 1 ms, a report read during load counted up to 11 calls of ~400 in
#: its status codes that its header, read first, had not (2 readings of 8, twice); at
#: 50 ms and 500 ms none in 7. Live views lag by this much more, only while an INSERT runs.
#: (Those counts may also have been the server-instance miscount ``options.SHOWN_FILTER``
#: now avoids.) Where the store knows its inserts (``store.in_flight``) none of this is used.
MARGIN_NS = 100_000_000

_NOW = "toUnixTimestamp64Nano(now64(9))"
SNAPSHOT_SQL = (
    f"SELECT {_NOW} AS now, countIf(query_kind = 'Insert') AS inserts,"
    f" minIf({_NOW} - toInt64(elapsed * 1e9), query_kind = 'Insert') AS oldest"
    " FROM system.processes"
)


def read(store: Store) -> Snapshot:
    """The store's snapshot now (Unix ns on the store's clock)."""
    known = store.known_snapshot()
    if known is not None:
        return known
    try:
        found = store.query(SNAPSHOT_SQL, readonly=True).iloc[0]
    except QueryError:  # no access to system.processes: the engine's clock alone
        found = store.query(f"SELECT {_NOW} AS now, 0 AS inserts, 0 AS oldest").iloc[0]
    now = int(found["now"])
    if int(found["inserts"]):
        return Snapshot(min(now, int(found["oldest"]) - MARGIN_NS), now)
    return Snapshot(now, now)


def snapshot_ns(store: Store) -> int:
    """Unix ns on the store's clock: every half row stamped up to it is visible."""
    return read(store).moment_ns
