"""How long the store keeps what it holds, and a disk budget it never outgrows.

A ``serve`` left running would otherwise fill its disk: nothing expired. Two mechanisms,
both plain ClickHouse so that the same tables behave the same on chDB and on a server:

- **Retention** is each table's ``TTL``: raw data (spans, the calls assembled from them,
  settled calls, the arrival log) for ``raw``, the minute rollups and run records, which
  are small and what long trends are read from, for ``rollups``. The engine drops expired
  rows in its own background merges; ``merge_with_ttl_timeout`` is shortened with the
  retention so that a short one is honoured within a small fraction of itself.
- **A disk budget** (``max_bytes``): when the tables' parts outgrow it, the oldest raw data
  goes (whole days' partitions first, then the rows before a cut-off), down to
  ``BUDGET_TARGET`` of the budget, so new spans keep being stored while old ones make room.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from grpc_overhead.analyzer import call_rollup, rollup, runs
from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.store import Store
from grpc_overhead.analyzer.store_size import table_sizes

#: A retention shorter than this would expire calls before they settle into rollups.
MIN_RETENTION = timedelta(minutes=5)
MAX_RETENTION = timedelta(days=36_525)
#: The engine's default wait between TTL merges (4 h), kept for long retentions.
DEFAULT_TTL_MERGE_WAIT_S = 14_400
#: A budget that is exceeded is brought back down to this share of itself, so that the
#: next few seconds of spans do not exceed it again at once.
BUDGET_TARGET = 0.8
#: Passes of one look at the budget (each on what the one before left).
BUDGET_PASSES = 4
#: At most this share of the raw data goes in one pass (the newest is never all dropped).
MAX_DROP_SHARE = 0.95
#: Outdated parts (replaced by a merge or a deletion) are removed after this many seconds
#: instead of the engine's 8 minutes, so that a budget frees disk, not only bytes counted.
OLD_PARTS_LIFETIME_S = 10

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400, "w": 604_800}


def parse_duration(text: str) -> timedelta:
    """``30m``, ``12h``, ``7d``, ``2w`` (or seconds, ``s``) -> a duration."""
    found = _DURATION.match(text or "")
    if not found:
        raise BadInput(
            f"cannot read {text!r} as a duration: give a number and a unit, "
            "s, m, h, d or w (30m, 12h, 7d, 2w)"
        )
    seconds = float(found.group(1)) * _UNITS[found.group(2)]
    if seconds > MAX_RETENTION.total_seconds():
        raise BadInput(f"{text!r} is longer than a store can mean to keep (at most 100 years)")
    return timedelta(seconds=seconds)


@dataclass(frozen=True)
class Retention:
    """What ``serve --retention/--rollup-retention/--max-store-gb`` asked for (None: keep)."""

    raw: timedelta | None = None
    rollups: timedelta | None = None
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        for name, kept in (("--retention", self.raw), ("--rollup-retention", self.rollups)):
            if kept is not None and kept < MIN_RETENTION:
                raise BadInput(
                    f"{name} {_say(kept)} is too short: calls settle into rollups in the "
                    f"minutes after they end; keep at least {_say(MIN_RETENTION)}"
                )
        if self.raw and self.rollups and self.rollups < self.raw:
            raise BadInput(
                f"--rollup-retention {_say(self.rollups)} is shorter than --retention "
                f"{_say(self.raw)}: the rollups are what remains of a day once its calls "
                "expire; give them at least as long"
            )
        if self.max_bytes is not None and self.max_bytes <= 0:
            raise BadInput("--max-store-gb must be above 0")

    @property
    def active(self) -> bool:
        return bool(self.raw or self.rollups or self.max_bytes)

    def describe(self) -> str:
        parts = [
            f"raw data {_say(self.raw) if self.raw else 'kept'}",
            f"rollups {_say(self.rollups) if self.rollups else 'kept'}",
        ]
        if self.max_bytes:
            parts.append(f"disk budget {self.max_bytes / 1e9:g} GB")
        return ", ".join(parts)


def _say(kept: timedelta) -> str:
    seconds = int(kept.total_seconds())
    for unit in ("w", "d", "h", "m"):
        if seconds % _UNITS[unit] == 0:
            return f"{seconds // _UNITS[unit]}{unit}"
    return f"{seconds}s"


@dataclass(frozen=True)
class TimedTable:
    """A table and its rows' time as a ``DateTime`` expression."""

    name: str
    time: str
    raw: bool  # raw data (``Retention.raw``) or rollups


def timed_tables(options: CallsOptions) -> list[TimedTable]:
    """Every table serve writes that grows with time, raw data first."""
    seconds = "toDateTime(intDiv({}, 1000000000))"
    return [
        TimedTable(options.traces_table, "toDateTime(Timestamp)", True),
        TimedTable(f"{options.traces_table}_trace_id_ts", "toDateTime(Start)", True),
        TimedTable(
            options.calls_table,
            seconds.format("greatest(client_start_ns, server_start_ns)"),
            True,
        ),
        TimedTable(call_rollup.SETTLED_CALLS_TABLE, seconds.format("call_start_ns"), True),
        TimedTable(rollup.ARRIVALS_TABLE, seconds.format("window_start_ns"), True),
        TimedTable(options.rollup_table, seconds.format("window_start_ns"), False),
        TimedTable(options.offset_rollup_table, seconds.format("window_start_ns"), False),
        TimedTable(rollup.RUNS_TABLE, seconds.format("started_ns"), False),
        TimedTable(runs.RUNS_TABLE, "toDateTime(started)", False),
    ]


def ttl_merge_wait_s(kept: timedelta) -> int:
    """A 24th of the retention, between 10 s and the engine's default 4 h."""
    return int(min(DEFAULT_TTL_MERGE_WAIT_S, max(10, kept.total_seconds() // 24)))


def apply_retention(store: Store, options: CallsOptions, retention: Retention) -> list[str]:
    """Give every existing table the TTL its retention asks for; the tables changed.

    Idempotent and cheap when nothing changed (one read of ``system.tables``), so serve
    calls it every few seconds: tables created later (an experiment's run records, rollups
    rebuilt by a new version) get theirs too.
    """
    engines = _engines(store, options)
    changed = []
    for table in timed_tables(options):
        kept = retention.raw if table.raw else retention.rollups
        if table.name not in engines:
            continue
        settings = []
        if (
            retention.max_bytes
            and f"old_parts_lifetime = {OLD_PARTS_LIFETIME_S}" not in (engines[table.name])
        ):
            settings.append(f"old_parts_lifetime = {OLD_PARTS_LIFETIME_S}")
        if kept is not None:
            seconds = int(kept.total_seconds())
            ttl = f"TTL {table.time} + toIntervalSecond({seconds})"
            if ttl not in engines[table.name]:
                store.command(f"ALTER TABLE {options.qualified(table.name)} MODIFY {ttl}")
                settings.append(f"merge_with_ttl_timeout = {ttl_merge_wait_s(kept)}")
        if settings:
            store.command(
                f"ALTER TABLE {options.qualified(table.name)} MODIFY SETTING {', '.join(settings)}"
            )
            changed.append(table.name)
    return changed


def _engines(store: Store, options: CallsOptions) -> dict[str, str]:
    """Table name -> ``engine_full`` (where the TTL and settings show) in the database."""
    found = store.query(
        "SELECT name, engine_full FROM system.tables WHERE database = " + _database(options),
        {"database": options.database},
    )
    return dict(zip(found["name"], found["engine_full"], strict=True))


def _database(options: CallsOptions) -> str:
    return "{database:String}" if options.database else "currentDatabase()"


def store_bytes(store: Store, options: CallsOptions) -> int:
    """Bytes on disk of the database's active parts (what its data takes now)."""
    return int(table_sizes(store, options)["bytes_on_disk"].sum())


@dataclass(frozen=True)
class BudgetPass:
    """What one look at the disk budget found and did."""

    bytes_before: int
    max_bytes: int
    cutoff: datetime | None = None  # raw data that started before this was dropped

    def describe(self) -> str:
        said = f"store at {self.bytes_before / 1e9:.3f} GB of its {self.max_bytes / 1e9:g} GB"
        if self.cutoff is None:
            return said
        return f"{said}: dropped the spans and calls that started before {self.cutoff:%F %T} UTC"


def keep_within_budget(store: Store, options: CallsOptions, max_bytes: int) -> BudgetPass:
    """Drop the oldest raw data when the store outgrew ``max_bytes`` (else do nothing).

    Bytes are not quite proportional to spans (each part has a fixed cost, and the
    tables compress differently), so a pass that leaves the store over its budget is
    followed by another, on what is left, up to ``BUDGET_PASSES``."""
    size = store_bytes(store, options)
    done = BudgetPass(size, max_bytes)
    for _ in range(BUDGET_PASSES):
        if size <= max_bytes:
            break
        cutoff = _drop_oldest(store, options, size, max_bytes)
        if cutoff is None:
            break
        done = BudgetPass(done.bytes_before, max_bytes, cutoff)
        size = store_bytes(store, options)
    return done


def _drop_oldest(store: Store, options: CallsOptions, size: int, max_bytes: int) -> datetime | None:
    """Drop the oldest share of the raw data that brings ``size`` to the target; the
    cut-off (None: no span left to drop)."""
    share = min(MAX_DROP_SHARE, (size - BUDGET_TARGET * max_bytes) / size)
    found = store.query(
        "SELECT count() AS spans, "
        f"quantileExact({{share:Float64}})(toUnixTimestamp(Timestamp)) AS cutoff "
        f"FROM {options.traces}",
        {"share": share},
    )
    if not int(found["spans"].iloc[0]):
        return None  # nothing raw left: rollups alone, said by serve
    # One second past the quantile: the cut-off drops whole seconds, the quantile's own too.
    cutoff = datetime.fromtimestamp(int(found["cutoff"].iloc[0]) + 1, UTC)
    engines = _engines(store, options)
    for table in timed_tables(options):
        if table.raw and table.name in engines:
            _drop_before(store, options, table, cutoff, engines[table.name])
    return cutoff


def _drop_before(
    store: Store, options: CallsOptions, table: TimedTable, cutoff: datetime, engine: str
) -> None:
    """Whole days go as partitions (no rewrite); the rest by a synchronous deletion.

    DDL takes no query parameters: the cut-off is inlined as an integer, partition ids are
    the engine's own (checked to be plain before use)."""
    name = options.qualified(table.name)
    seconds = int(cutoff.timestamp())
    if "PARTITION BY toDate(" in engine:
        old_days = store.query(
            f"SELECT _partition_id AS id FROM {name} GROUP BY id "
            f"HAVING max({table.time}) < toDateTime({{cutoff:Int64}}, 'UTC')",
            {"cutoff": seconds},
        )
        for partition in old_days["id"]:
            if _PARTITION_ID.match(partition):
                store.command(f"ALTER TABLE {name} DROP PARTITION ID '{partition}'")
    store.command(
        f"ALTER TABLE {name} DELETE WHERE {table.time} < toDateTime({seconds}, 'UTC') "
        "SETTINGS mutations_sync = 1"
    )


_PARTITION_ID = re.compile(r"^[0-9A-Za-z_-]+$")
