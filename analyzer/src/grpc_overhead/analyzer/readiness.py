"""A store made ready to read: what ``report``, ``findings``, the app and serve's readers
do before their first query, in one place.

The calls' tables and views are created where this process may write (idempotent: on a
store the collector's exporter made, this assembles its spans), and settled minutes are
rolled up where no other process does it (``backend.owns_data``: an embedded store; on a
ClickHouse server several readers run and none settles, so nothing is rolled up twice;
a store read through ``serve`` is serve's to prepare).
"""

from __future__ import annotations

from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.phase_view import create_call_tables
from grpc_overhead.analyzer.rollup import settle, settled_until
from grpc_overhead.analyzer.store.base import Store, any_row, table_exists


def prepare_for_reading(store: Store, options: CallsOptions, *, settle_now: bool = True) -> str:
    """'' when ``store`` is ready, else why not (it has no traces table yet).
    ``settle_now=False`` leaves the roll-up to the caller (the app's ``BackgroundSettle``)."""
    if not table_exists(store, options.traces_table, options.database):
        return f"{store.description}: no {options.traces_table} table"
    if store.backend.writable:  # else its owner (serve) made them
        create_call_tables(store, options)
    if settle_now:
        settle_where_ours(store, options)
    return ""


def settle_where_ours(store: Store, options: CallsOptions) -> None:
    """Roll settled minutes up on a store no other process settles (``owns_data``)."""
    if store.backend.owns_data:
        settle(store, options)


def has_calls(store: Store, options: CallsOptions) -> bool:
    """Whether any call (or half of one) is stored: read one row, not a count."""
    return any_row(store, options.calls, readonly=False)


def unsettled_halves(store: Store, options: CallsOptions) -> int:
    """Call halves at or after the roll-up's watermark (all of them before any roll-up)."""
    watermark = 0
    if table_exists(store, options.rollup_table, options.database):
        watermark = settled_until(store, options)
    found = store.query(
        f"SELECT count() AS n FROM {options.calls} "
        "WHERE greatest(client_start_ns, server_start_ns) >= {watermark:Int64}",
        {"watermark": watermark},
    )
    return int(found["n"].iloc[0])
