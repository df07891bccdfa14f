"""Calls and latency per server instance: does the load spread evenly?

gRPC keeps one HTTP/2 connection per channel and sends every call on it, so
a client that connected to one instance stays there: after a deploy or a
scale-out the old instances keep all the load and the new ones idle, until
connections are recycled (the seed article's ``max_connection_age`` lesson).
The answer is per instance: its share of calls over time against the fair
share, and its latency next to its peers'.

An instance is the server half's ``service.instance.id``; without one its
``host.name``; for a call whose server half never arrived, the address the
client dialled (``dialled:host:port``), so such calls are visible rather than
lost. Everything aggregates inside ClickHouse; results are bounded by the
number of instances and time buckets, never by the number of calls.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from grpc_overhead.analyzer import weighted
from grpc_overhead.analyzer.analysis_cost import grouping_source
from grpc_overhead.analyzer.clock_offsets import query_parameters
from grpc_overhead.analyzer.insights.rows import rows_for
from grpc_overhead.analyzer.options import (
    CALL_FILTER,
    HAS_ROW_START,
    ROW_FILTER,
    TIME_FILTER,
    CallFilters,
    CallsOptions,
)
from grpc_overhead.analyzer.phase_terms import Phase
from grpc_overhead.analyzer.phases import PHASES
from grpc_overhead.analyzer.result_columns import QUANTILE_STATE_FUNCTION, QUANTILE_WEIGHT
from grpc_overhead.analyzer.store.base import Store

INSTANCE = (
    "multiIf(server_instance != '', server_instance, server_host != '', server_host,"
    " server_address != '', concat('dialled:', server_address), '(unknown)')"
)

#: At most this many instances in a table; the timeline draws the busiest
#: ``TIMELINE_INSTANCES`` and sums the rest into ``OTHERS``.
MAX_INSTANCES = 1000
TIMELINE_INSTANCES = 12
OTHERS = "(other instances)"

#: Bucket lengths the timeline picks from (seconds): round numbers a reader trusts.
BUCKET_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
TARGET_BUCKETS = 60

_PHASES = {phase.name: phase for phase in PHASES}

#: Instances of one service: the server's OpenTelemetry service name, else the gRPC service.
#: A client half kept alone under tail-aware sampling names its server instance but not
#: the server's service: '' (``concurrent`` gives it its instance's group).
SERVER_GROUP = (
    "multiIf(server_service != '', server_service,"
    " server_start_ns = 0 AND server_instance != '', '', service)"
)
#: Time buckets two instances of a group must share before their spread means anything:
#: one instance taking over from another shares the bucket of the hand-over, no more.
MIN_SHARED_BUCKETS = 3


def phase(name: str) -> Phase:
    """A phase of ``phases.PHASES`` that needs no other phase and no clock offset."""
    found = _PHASES[name]
    if "_value" in found.value + found.defined or "clock" in found.defined:
        raise ValueError(f"phase {name} depends on other phases; use phases.per_call_sql")
    return found


def quantiles_us(name: str, alias: str) -> list[str]:
    """p50 and p99 (µs) of a self-contained phase over the calls where it is defined."""
    found = phase(name)
    arguments = f"toFloat64({found.value}) / 1000, {QUANTILE_WEIGHT}, {found.defined}"
    state = f"{QUANTILE_STATE_FUNCTION}If(0.5, 0.99)({arguments})"  # weighted: every call made
    return [f"{state}[1] AS p50_{alias}_us", f"{state}[2] AS p99_{alias}_us"]


def _defined_or_nan(frame: pd.DataFrame, columns: list[str], counts: pd.Series) -> None:
    """A quantile over no value comes back as 0 (or NaN); show it as missing."""
    for column in columns:
        frame[column] = frame[column].astype("float64").where(counts > 0)


SUMMARY_COLUMNS = (
    "instance",
    "host",
    "server_service",
    "calls",
    "share",
    "load_ratio",
    "calls_per_s",
    "p50_total_us",
    "p99_total_us",
    "p50_server_duration_us",
    "p99_server_duration_us",
    "errors",
    "first_call",
    "last_call",
)


def instance_load(
    store: Store,
    filters: CallFilters | None = None,
    *,
    buckets: int = TARGET_BUCKETS,
    options: CallsOptions | None = None,
) -> pd.DataFrame:
    """Per instance, and per (time bucket, instance): calls and latency, in one pass.

    One scan of the merged calls answers both the page's table and its
    timeline (``GROUPING SETS``), so the page reads the calls once.
    ``level`` is 'instance' (the whole range; ``bucket_ns`` 0), 'bucket'
    (``bucket_s`` long buckets, round lengths, at most about ``buckets``) or
    'overlap' (per bucket, instance, ``server_group`` and ``dialled`` address:
    read by ``concurrent``).
    Latency columns are µs, NaN where no call defines them. Split it with
    ``summary`` and ``timeline``.
    """
    options = options or CallsOptions()
    span = time_span(store, filters, options)
    step_s = bucket_seconds(*span, target=buckets) if span else 60
    total, server = phase("total"), phase("server_duration")
    # No one-way phase here: the raw part needs no clock estimate.
    # Its phases are written out over the call's columns (``phase``): none computed.
    rows, bound = rows_for(store, filters, options, clock=False, phases=())
    sql = (
        "SELECT multiIf(grouping(dialled) = 0, 'overlap', grouping(bucket_ns) = 0, 'bucket',"
        " 'instance') AS level, bucket_ns, instance, server_group, dialled,"
        " anyIf(server_host, server_host != '') AS host,"
        " anyIf(server_service, server_service != '') AS server_service,"
        f" {weighted.count()} AS calls,\n    "
        + ",\n    ".join(
            [
                *quantiles_us("total", "total"),
                *quantiles_us("server_duration", "server_duration"),
                f"{weighted.count_if(total.defined)} AS total_calls",
                f"{weighted.count_if(server.defined)} AS server_calls",
            ]
        )
        + f",\n    {weighted.count_if('client_error OR server_error')} AS errors,"
        "\n    min(call_start_ns) AS first_ns, max(call_start_ns) AS last_ns\n"
        "FROM "
        + grouping_source(
            "\n    SELECT *,"
            " intDiv(call_start_ns, {bucket_ns:Int64}) * {bucket_ns:Int64} AS bucket_ns,"
            f" {INSTANCE} AS instance, {SERVER_GROUP} AS server_group, server_address AS dialled\n"
            f"    FROM ({rows})\n"
        )
        + "\n"
        "GROUP BY GROUPING SETS\n"
        "    ((bucket_ns, instance), (instance), (bucket_ns, instance, server_group, dialled))\n"
        "ORDER BY level DESC, bucket_ns, calls DESC, instance\n"
        "LIMIT {max_rows:UInt32}"
    )
    parameters: dict[str, Any] = {
        **bound,
        "bucket_ns": step_s * 1_000_000_000,
        "max_rows": MAX_INSTANCES * (buckets * 4 + 1),
    }
    frame = store.query(sql, parameters, readonly=True)
    _defined_or_nan(frame, ["p50_total_us", "p99_total_us"], frame["total_calls"])
    _defined_or_nan(
        frame, ["p50_server_duration_us", "p99_server_duration_us"], frame["server_calls"]
    )
    frame["bucket_s"] = step_s
    return frame


def summary(load: pd.DataFrame) -> pd.DataFrame:
    """One row per server instance (``instance_load``'s 'instance' rows), busiest first.

    Columns ``SUMMARY_COLUMNS``: ``share`` of all matching calls;
    ``load_ratio`` = calls against the mean per instance (1 = a fair share;
    the largest value is the imbalance, max/mean); ``calls_per_s`` over the
    instance's first to last call; p50/p99 of total and server_duration
    (µs); errors; first and last call (UTC). At most ``MAX_INSTANCES`` rows.
    """
    frame = load[load["level"] == "instance"].copy()
    frame = frame.sort_values(["calls", "instance"], ascending=[False, True], kind="stable")
    frame = frame.head(MAX_INSTANCES).reset_index(drop=True)
    calls = frame["calls"].astype("int64")
    frame["share"] = (calls / calls.sum()).astype("float64")
    frame["load_ratio"] = (calls / calls.mean()).astype("float64")
    span_s = (frame["last_ns"] - frame["first_ns"]) / 1e9
    frame["calls_per_s"] = (calls / span_s.where(span_s > 0)).astype("float64")
    frame["first_call"] = pd.to_datetime(frame["first_ns"], unit="ns", utc=True)
    frame["last_call"] = pd.to_datetime(frame["last_ns"], unit="ns", utc=True)
    return frame[list(SUMMARY_COLUMNS)]


CONCURRENT_COLUMNS = (
    "server_service",
    "dialled",
    "instances",
    "shared_buckets",
    "shared_s",
    "calls",
    "imbalance",
    "busiest",
    "busiest_share",
)


def concurrent(load: pd.DataFrame) -> pd.DataFrame:
    """Load spread among instances that served *together*: one row per group of
    instances of one service (``SERVER_GROUP``) reached through the same dialled
    address, over the time buckets in which two or more of them served calls (at
    least ``MIN_SHARED_BUCKETS``; an instance serves from the bucket of its first call
    to that of its last), worst imbalance first (``CONCURRENT_COLUMNS``).

    Why these groups: an uneven spread is a connection problem (gRPC keeps a
    channel on one connection, so clients that connected before a scale-out stay
    on the old instances) only when the clients asked for the same thing and got
    different instances. Instances that ran one after another never shared load,
    and a client that dialled one instance's own address chose it (a scenario
    aimed at one instance): neither is a balancing problem, and neither is a row.
    ``imbalance`` is the busiest instance's calls against the mean per instance
    within the shared buckets (1 = even).
    """
    rows = load[load["level"] == "overlap"].copy()
    # A client half kept alone under sampling has no group of its own (''): it takes its
    # instance's, so its calls are not split off (an instance with only such halves
    # keeps '').
    known = rows[rows["server_group"] != ""].drop_duplicates("instance")
    own = known.set_index("instance")["server_group"]
    alone = rows["server_group"] == ""
    rows.loc[alone, "server_group"] = rows.loc[alone, "instance"].map(own).fillna("")
    step_s = int(load["bucket_s"].iloc[0]) if len(load) else 0
    records = []
    for (group, dialled), part in rows.groupby(["server_group", "dialled"], sort=True):
        # An instance serves from its first call's bucket to its last call's.
        spans = part.groupby("instance")["bucket_ns"].agg(["min", "max"])
        buckets = sorted(part["bucket_ns"].unique())
        serving = {
            bucket: [name for name, (first, last) in spans.iterrows() if first <= bucket <= last]
            for bucket in buckets
        }
        shared = [bucket for bucket in buckets if len(serving[bucket]) >= 2]
        if len(shared) < MIN_SHARED_BUCKETS:
            continue
        present = sorted({name for bucket in shared for name in serving[bucket]})
        within = part[part["bucket_ns"].isin(shared)].groupby("instance")["calls"].sum()
        calls = within.reindex(present, fill_value=0)
        calls = calls.sort_values(ascending=False, kind="stable")
        records.append(
            (
                group,
                dialled,
                len(calls),
                len(shared),
                len(shared) * step_s,
                int(calls.sum()),
                float(calls.iloc[0] / calls.mean()),
                str(calls.index[0]),
                float(calls.iloc[0] / calls.sum()),
            )
        )
    frame = pd.DataFrame.from_records(records, columns=list(CONCURRENT_COLUMNS))
    return frame.sort_values("imbalance", ascending=False, kind="stable").reset_index(drop=True)


def imbalance(load: pd.DataFrame) -> float:
    """Busiest instance's calls against the mean per instance over the range (1 = even;
    NaN without calls)."""
    calls = load.loc[load["level"] == "instance", "calls"].astype("int64")
    return float(calls.max() / calls.mean()) if len(calls) and calls.sum() else float("nan")


# -- over time ----------------------------------------------------------------------------------


def time_span(
    store: Store, filters: CallFilters | None, options: CallsOptions
) -> tuple[int, int] | None:
    """(first, last) call start (Unix ns) in the filters' time range, or None.

    Read from the unmerged halves (each half's start stands for its call's):
    cheap, and only used to choose bucket lengths.
    """
    sql = (
        "SELECT count() AS n, min(call_start_ns) AS first, max(call_start_ns) AS last FROM ("
        "SELECT greatest(client_start_ns, server_start_ns) AS call_start_ns, service, method,"
        f" run_id, client_service, server_service FROM {options.calls}"
        f" WHERE {ROW_FILTER} AND {HAS_ROW_START})"
        f" WHERE {TIME_FILTER} AND {CALL_FILTER}"
    )
    found = store.query(sql, query_parameters(filters, None), readonly=True).iloc[0]
    if not int(found["n"]):
        return None
    return int(found["first"]), int(found["last"])


def bucket_seconds(first_ns: int, last_ns: int, target: int = TARGET_BUCKETS) -> int:
    """The shortest round bucket that cuts ``[first, last]`` into at most ``target`` buckets."""
    length_s = max(last_ns - first_ns, 0) / 1e9
    for step in BUCKET_STEPS_S:
        if length_s / step <= target:
            return step
    return int(-(-length_s // target // 86400) * 86400)


def timeline(load: pd.DataFrame) -> pd.DataFrame:
    """One row per (time bucket, instance) from ``instance_load``'s 'bucket' rows.

    Columns ``TIMELINE_COLUMNS``: calls, share of the bucket's calls,
    imbalance (the bucket's busiest instance against the mean over every
    instance of the range: 1 = perfectly even), p50/p99 total and p99
    server_duration (µs). Every instance has a row in every bucket that has
    calls (0 where it got none), so an idle instance shows as 0 %, not as a
    gap. Beyond ``TIMELINE_INSTANCES`` instances the quietest are summed
    into ``OTHERS`` (their latency is then unknown: NaN).
    """
    frame = load[load["level"] == "bucket"]
    if frame.empty:
        return _empty_timeline()
    step_s = int(frame["bucket_s"].iloc[0])
    frame = _fold_quiet_instances(frame[["bucket_ns", "instance", *_BUCKET_VALUES]])
    frame = _fill_idle_buckets(frame)
    per_bucket = frame.groupby("bucket_ns")["calls"]
    instances = frame["instance"].nunique()
    bucket_calls = per_bucket.transform("sum")
    frame["share"] = (frame["calls"] / bucket_calls.where(bucket_calls > 0)).astype("float64")
    frame["imbalance"] = (
        per_bucket.transform("max") / (bucket_calls / instances).where(bucket_calls > 0)
    ).astype("float64")
    frame["bucket_start"] = pd.to_datetime(frame["bucket_ns"], unit="ns", utc=True)
    frame["bucket_s"] = step_s
    frame = frame.sort_values(["bucket_ns", "instance"], kind="stable")
    return frame[list(TIMELINE_COLUMNS)].reset_index(drop=True)


_BUCKET_VALUES = ("calls", "p50_total_us", "p99_total_us", "p99_server_duration_us")

TIMELINE_COLUMNS = (
    "bucket_start",
    "bucket_s",
    "instance",
    "calls",
    "share",
    "imbalance",
    "p50_total_us",
    "p99_total_us",
    "p99_server_duration_us",
)


def _empty_timeline() -> pd.DataFrame:
    return pd.DataFrame({column: [] for column in TIMELINE_COLUMNS})


def _fold_quiet_instances(frame: pd.DataFrame) -> pd.DataFrame:
    totals = frame.groupby("instance")["calls"].sum().sort_values(ascending=False, kind="stable")
    if len(totals) <= TIMELINE_INSTANCES:
        return frame
    keep = set(totals.index[: TIMELINE_INSTANCES - 1])
    kept = frame[frame["instance"].isin(keep)]
    others = (
        frame[~frame["instance"].isin(keep)].groupby("bucket_ns", as_index=False)["calls"].sum()
    )
    others["instance"] = OTHERS
    return pd.concat([kept, others], ignore_index=True)


def _fill_idle_buckets(frame: pd.DataFrame) -> pd.DataFrame:
    """Every (bucket, instance) pair, 0 calls where the instance got none."""
    index = pd.MultiIndex.from_product(
        [sorted(frame["bucket_ns"].unique()), sorted(frame["instance"].unique())],
        names=["bucket_ns", "instance"],
    )
    filled = frame.set_index(["bucket_ns", "instance"]).reindex(index).reset_index()
    filled["calls"] = filled["calls"].fillna(0).astype("int64")
    return filled
