"""Experiment runs: the ``grpc_runs`` table and the per-run phase summary.

An experiment (``grpc-overhead experiment FILE``) runs one load per cell of its
matrix; each cell is a *run*: its spans carry ``grpc_overhead.run_id``, and one
row of ``grpc_runs`` says what was run and what the load generator saw. The
phases come from the calls themselves (``phases.calls`` filtered by run id), so
a run is explained by the same SQL as ``report``.

``grpc_runs`` (one row per run; a run recorded twice keeps its latest row:
ReplacingMergeTree on ``recorded``; readers use ``FINAL``):

============================  ===============================================
run_id String                 the cell's run id (the spans' grpc_overhead.run_id)
experiment LowCardinality     the experiment's name (FILE's ``name``)
invocation String             one ``experiment`` command's cells share it (name-timestamp)
cell UInt32                   the cell's index in the matrix (0-based)
config String                 the cell's whole configuration, JSON
transport LowCardinality      grpc | rest
started, ended DateTime64(6)  the load's start and end (UTC)
calls, errors UInt64          calls made, calls that failed
calls_per_s Float64           calls / load duration
predictions_per_s Float64     entities scored / load duration (OK calls)
p50_us, p99_us Float64        client-measured latency of OK calls
phases String                 JSON {PHASE: {"p50_us", "mean_us", "calls", "ci_us"}}
recorded DateTime64(6)        when this row was written
rounds String                 JSON [{"round", "started_ns", "ended_ns", "calls", "errors",
                              "calls_per_s", "p50_us", "p99_us"}]: the cell's rounds
machine String                JSON: the machine check taken while the cell ran
under_load UInt8              1: the cell ran on a busy machine (``machine`` says how)
comparison String             JSON: the cell against its baseline cell ({} for a baseline):
                              {"baseline_run_id", "phase": "total", "verdict", "diff_us",
                              "ci_us", "summary", "explained_by", "phases": [...]}
============================  ===============================================

``rounds``, ``machine``, ``under_load`` and ``comparison`` came with interleaved rounds; a
store made before them gets them added (``ALTER TABLE ... ADD COLUMN IF NOT
EXISTS``), its old rows reading ``[]``, ``{}`` and 0.

The same SQL runs on chDB and on a ClickHouse server (``Store``); values are
always bound as parameters. Dashboards read ``phases`` with
``JSONExtractFloat(phases, 'processing', 'p50_us')``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from grpc_overhead.analyzer import verdicts
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.phases import calls
from grpc_overhead.analyzer.result_columns import ALL_PHASES, DESIGN_PHASES
from grpc_overhead.analyzer.store.base import Store, table_exists

RUNS_TABLE = "grpc_runs"
#: The phases a cell summary carries (the design's, then the useful extras).
CELL_PHASES: tuple[str, ...] = (*DESIGN_PHASES, "pool_wait", "server_duration")
RUN_COLUMNS = (
    "run_id",
    "experiment",
    "invocation",
    "cell",
    "config",
    "transport",
    "started",
    "ended",
    "calls",
    "errors",
    "calls_per_s",
    "predictions_per_s",
    "p50_us",
    "p99_us",
    "phases",
    "recorded",
    "rounds",
    "machine",
    "under_load",
    "comparison",
)
#: Columns added after the table's first release: (name, type and default).
ADDED_COLUMNS = (
    ("rounds", "String DEFAULT '[]'"),
    ("machine", "String DEFAULT '{}'"),
    ("under_load", "UInt8 DEFAULT 0"),
    ("comparison", "String DEFAULT '{}'"),
)


def create_runs_sql(options: CallsOptions) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {options.qualified(RUNS_TABLE)}{options.on_cluster()} (\n"
        "    run_id String,\n"
        "    experiment LowCardinality(String),\n"
        "    invocation String,\n"
        "    cell UInt32,\n"
        "    config String,\n"
        "    transport LowCardinality(String),\n"
        "    started DateTime64(6, 'UTC'),\n"
        "    ended DateTime64(6, 'UTC'),\n"
        "    calls UInt64,\n"
        "    errors UInt64,\n"
        "    calls_per_s Float64,\n"
        "    predictions_per_s Float64,\n"
        "    p50_us Float64,\n"
        "    p99_us Float64,\n"
        "    phases String,\n"
        "    recorded DateTime64(6, 'UTC'),\n"
        + ",\n".join(f"    {name} {kind}" for name, kind in ADDED_COLUMNS)
        + "\n) ENGINE = ReplacingMergeTree(recorded)\nORDER BY (experiment, run_id)"
    )


def create_runs(store: Store, options: CallsOptions | None = None) -> None:
    """Create ``grpc_runs`` if missing, and add the columns an older one lacks (idempotent)."""
    options = options or CallsOptions()
    store.command(create_runs_sql(options))
    for name, kind in ADDED_COLUMNS:
        store.command(
            f"ALTER TABLE {options.qualified(RUNS_TABLE)}{options.on_cluster()} "
            f"ADD COLUMN IF NOT EXISTS {name} {kind}"
        )


@dataclass
class RunRecord:
    """One cell's run, as ``grpc_runs`` holds it (times: Unix ns)."""

    run_id: str
    experiment: str
    invocation: str
    cell: int
    config: dict[str, Any]
    started_ns: int
    ended_ns: int
    calls: int
    errors: int
    calls_per_s: float
    predictions_per_s: float
    p50_us: float | None
    p99_us: float | None
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    under_load: bool = False
    comparison: dict[str, Any] = field(default_factory=dict)

    @property
    def transport(self) -> str:
        return str(self.config.get("transport", "grpc"))


def _moment(unix_ns: int) -> datetime:
    """A Unix-ns time as a UTC datetime (µs): both backends take it for DateTime64(6).

    (A bare int would be read in the column's unit, µs, and clamp to year 9999.)
    """
    seconds, nanoseconds = divmod(int(unix_ns), 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC) + timedelta(microseconds=nanoseconds // 1000)


def _float(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def record_run(store: Store, record: RunRecord, options: CallsOptions | None = None) -> None:
    """Insert (or replace) the run's row."""
    options = options or CallsOptions()
    values = [
        record.run_id,
        record.experiment,
        record.invocation,
        int(record.cell),
        json.dumps(record.config, sort_keys=True),
        record.transport,
        _moment(record.started_ns),
        _moment(record.ended_ns),
        int(record.calls),
        int(record.errors),
        float(record.calls_per_s),
        float(record.predictions_per_s),
        _float(record.p50_us),
        _float(record.p99_us),
        json.dumps(record.phases, sort_keys=True),
        _moment(time.time_ns()),
        json.dumps(record.rounds),
        json.dumps(record.machine, sort_keys=True),
        int(bool(record.under_load)),
        json.dumps(record.comparison, sort_keys=True),
    ]
    store.insert(options.qualified(RUNS_TABLE), RUN_COLUMNS, [[value] for value in values])


def list_runs(
    store: Store, experiment: str | None = None, options: CallsOptions | None = None
) -> pd.DataFrame:
    """Every recorded run (of ``experiment`` if given), oldest first; empty if none yet."""
    options = options or CallsOptions()
    if not table_exists(store, RUNS_TABLE, options.database):
        return pd.DataFrame(columns=list(RUN_COLUMNS))
    # ``*``: a store written before the added columns is read as it is, then filled in.
    frame = store.query(
        f"SELECT * FROM {options.qualified(RUNS_TABLE)} FINAL\n"
        "WHERE {experiment:String} = '' OR experiment = {experiment:String}\n"
        "ORDER BY started, cell",
        {"experiment": experiment or ""},
        readonly=True,
    )
    defaults = {"rounds": "[]", "machine": "{}", "under_load": 0, "comparison": "{}"}
    for name, value in defaults.items():
        if name not in frame:
            frame[name] = value
    return frame[list(RUN_COLUMNS)]


def round_windows(runs: pd.DataFrame, run_id: str) -> list[tuple[int, int]]:
    """(started_ns, ended_ns) of each round of a recorded run; [] for a run of one round or
    a run ``grpc_runs`` does not hold (a plain ``load --run-id`` run)."""
    if runs.empty or "rounds" not in runs:
        return []
    rows = runs[runs["run_id"] == run_id]
    if rows.empty:
        return []
    rounds = json.loads(rows.iloc[-1]["rounds"] or "[]")
    windows = [(int(item["started_ns"]), int(item["ended_ns"])) for item in rounds]
    return windows if len(windows) > 1 else []


def round_labels(frame: pd.DataFrame, windows: list[tuple[int, int]]) -> np.ndarray | None:
    """Each call's round, by its start: rounds never overlap (a cell's rounds run one after
    another, with other cells and fresh processes between), so the boundary between two
    rounds is the middle of the gap between them. None when there are no rounds."""
    if not windows or "call_start_ns" not in frame:
        return None
    starts = sorted(started for started, _ in windows)
    ends = sorted(ended for _, ended in windows)
    boundaries = [(ends[k] + starts[k + 1]) // 2 for k in range(len(starts) - 1)]
    starts_of_calls = frame["call_start_ns"].to_numpy(dtype=np.int64)
    return np.searchsorted(np.asarray(boundaries, dtype=np.int64), starts_of_calls, side="right")


def experiments(store: Store, options: CallsOptions | None = None) -> pd.DataFrame:
    """One row per experiment: name, runs, first start, last end (latest first)."""
    options = options or CallsOptions()
    if not table_exists(store, RUNS_TABLE, options.database):
        return pd.DataFrame(columns=["experiment", "runs", "started", "ended"])
    return store.query(
        "SELECT experiment, count() AS runs, min(started) AS started, max(ended) AS ended\n"
        f"FROM {options.qualified(RUNS_TABLE)} FINAL GROUP BY experiment ORDER BY ended DESC",
        readonly=True,
    )


def run_calls(
    store: Store,
    run_id: str,
    options: CallsOptions | None = None,
    *,
    limit: int | None = None,
) -> pd.DataFrame:
    """One row per call of the run, every phase in µs (``phases.calls``)."""
    return calls(store, CallFilters(run_id=run_id), limit=limit, options=options)


def _number(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return None if math.isnan(number) else round(number, 3)


def phase_summary(
    frame: pd.DataFrame,
    phases: tuple[str, ...] = CELL_PHASES,
    rounds: np.ndarray | None = None,
    resamples: int = verdicts.DEFAULT_RESAMPLES,
) -> dict[str, Any]:
    """{PHASE: {"p50_us", "mean_us", "calls", "ci_us"}} over a ``run_calls`` frame (exact
    quantiles); ``ci_us`` is the 95 % interval of the p50 (``verdicts``: over ``rounds``,
    each call's round, and the calls within them; the calls alone without rounds)."""
    summary: dict[str, Any] = {}
    for index, phase in enumerate(phases):
        column = f"{phase}_us"
        if column not in frame or frame[column].dropna().empty:
            summary[phase] = {"p50_us": None, "mean_us": None, "calls": 0, "ci_us": None}
            continue
        weights = (
            frame["weight"].to_numpy(dtype=np.float64, na_value=1.0) if "weight" in frame else None
        )
        groups, weighted = verdicts.weighted_rounds_of(
            frame[column].to_numpy(dtype=np.float64, na_value=np.nan), weights, rounds
        )
        values = np.concatenate(groups)
        pooled = None if weighted is None else np.concatenate(weighted)
        interval = verdicts.median_interval(groups, resamples, seed=index, weights=weighted)
        summary[phase] = {  # weighted: every call made, estimated under sampling
            "p50_us": _number(verdicts.median(values, pooled)),
            "mean_us": _number(np.average(values, weights=pooled)),
            "calls": verdicts.calls_made(groups, weighted),
            "ci_us": None if interval is None else [_number(interval[0]), _number(interval[1])],
        }
    return summary


def stored_calls(
    store: Store, run_id: str, options: CallsOptions | None = None, *, complete: bool = False
) -> int:
    """Calls of the run whose client half is stored (the client span is the last to close);
    with ``complete``, those whose server half is stored too (another process exports it,
    so it may arrive after the client's)."""
    options = options or CallsOptions()
    server = " AND server_start_ns != 0" if complete else ""
    found = store.query(
        f"SELECT count() AS n FROM {options.calls} FINAL "
        "WHERE run_id = {run_id:String} AND client_start_ns != 0" + server,
        {"run_id": run_id},
        readonly=True,
    )
    return int(found["n"].iloc[0])


__all__ = [
    "ALL_PHASES",
    "CELL_PHASES",
    "RUNS_TABLE",
    "RunRecord",
    "create_runs",
    "experiments",
    "list_runs",
    "phase_summary",
    "record_run",
    "round_labels",
    "round_windows",
    "run_calls",
    "stored_calls",
]
