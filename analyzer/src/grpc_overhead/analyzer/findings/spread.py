"""load_imbalance (instances unevenly loaded behind one method) and tail (what makes p99).

load_imbalance: per server instance (``service.instance.id``, else its host),
the method's calls and latency. Found when one instance takes at least
``HOT_FACTOR`` times its fair share of the calls and its total p50 is at least
``SLOWER`` times the others' (calls-weighted): long-lived HTTP/2 connections
pin clients to it. The saving is what the method's p50 (p99) would become with
the calls spread evenly: each instance's latency is taken to grow with its share
of the calls (a line through the instances' (share, p50) points, weighted by
calls), read at the fair share, against the instances' p50s now, weighted by
their calls (per call on average: all calls' p50 can fall in the gap between
instances far apart). Moving calls
off the hot instance slows the others too, which the hot instance's p50 minus
the others' ignores (+57 % over the measured saving in the findings ground
truth). Near saturation latency grows faster than linearly with the share, so
the line overestimates the balanced p50: the saving is a lower bound (-50 %).

tail: the calls slower than the method's p95 ("slow calls") against all of
them: per consecutive phase, the slow calls' mean minus the phase's p50 is its
part of the tail; the phase with the largest part makes the tail when it
holds at least ``TAIL_PART`` of the parts that grew and p99 is at least ``TAIL_RATIO`` x p50
and ``MIN_TAIL_US`` above it. What the slow calls share is reported too: one
instance, larger payloads, or one tenth of the time range holding half of
them. The saving is at p99 only (the median call is not slow): p99 now minus
the p99 of the same calls with that phase held to its p50 wherever it took
longer (``held_p99_query``, a second query for the found phases only). Its
share of p99 - p50, the earlier estimate, counted the spread of every phase
above the median as saved (+15 % in the findings ground truth); this counts
that one phase's spread only.
Confidence from the number of slow calls (``SLOW_CALLS``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from grpc_overhead.analyzer import weighted
from grpc_overhead.analyzer.findings.advice import ACTIONS, VERIFY
from grpc_overhead.analyzer.findings.model import (
    HIGH,
    LOW,
    MEDIUM,
    SUBSET,
    SUBSETS,
    Checked,
    Finding,
    Spread,
    confidence,
    fmt_us,
    method_name,
)
from grpc_overhead.analyzer.findings.source import (
    UNARY,
    Columns,
    Query,
    Reader,
    per_method,
    tuple_items,
)
from grpc_overhead.analyzer.result_columns import CONSECUTIVE_PHASES

KIND_NAMES = ("load_imbalance", "tail")

INSTANCE = "if(server_instance != '', server_instance, server_host)"
#: The hot instance takes at least this many times its fair share (1 / instances) ...
HOT_FACTOR = 1.5
#: ... and its total p50 is at least this many times the others'.
SLOWER = 1.2
MIN_SHARE = 0.05
MIN_SAVING_US = 50.0

TAIL_PHASES: tuple[str, ...] = (*CONSECUTIVE_PHASES, "unattributed")
TAIL_RATIO = 2.0
MIN_TAIL_US = 1_000.0
TAIL_PART = 0.4
#: Slow calls behind a tail finding: (confidence, at least).
#: The slow calls are the top 5 %: medium needs 1,000 calls, high 4,000 (at 10 slow calls
#: for medium, a healthy service on a machine at load 7 showed a "tail" of 1.8 ms).
SLOW_CALLS = ((HIGH, 200), (MEDIUM, 50))
#: What the slow calls share: one instance, or one tenth of the time, holding at least
#: this share of them and this many times their share of all calls; or a p50 size this
#: many times all calls'.
CORRELATED_SHARE = 0.5
OVER_REPRESENTED = 2.0


def imbalance_query(relation: str) -> str:
    return (
        f"SELECT rpc_service, rpc_method, instance, {weighted.count()} AS calls,"
        " count() AS stored_calls,\n"
        f"    {weighted.quantiles('0.5, 0.99', 'total_us')} AS total_q,\n"
        f"    {weighted.quantile_by_subset('0.5', 'total_us', SUBSETS)} AS p50_by_subset\n"
        f"FROM (SELECT rpc_service, rpc_method, {INSTANCE} AS instance, total_us, weight,"
        f" {SUBSET} AS subset\n"
        f"    FROM {relation} WHERE total_us IS NOT NULL AND {INSTANCE} != '')\n"
        "GROUP BY rpc_service, rpc_method, instance\nORDER BY rpc_service, rpc_method, instance"
    )


def balanced(shares: Any, values: Any, weights: Any) -> float:
    """The latency at the fair share on the line through (share, latency) per instance,
    weighted by calls: what an instance takes when every one carries 1 / instances."""
    x, y, w = (np.asarray(v, dtype=float) for v in (shares, values, weights))
    if np.ptp(x) == 0:
        return float(np.average(y, weights=w))
    slope, intercept = np.polyfit(x, y, 1, w=np.sqrt(w))
    return float(intercept + max(0.0, slope) / len(x))


def find_imbalance(reader: Reader) -> tuple[list[Finding], list[Checked]]:
    rows = reader.query(imbalance_query)
    findings = []
    best: tuple[float, str] | None = None
    for (service, method), group in rows.groupby(["rpc_service", "rpc_method"], sort=True):
        if len(group) < 2:
            continue
        calls = group["calls"].astype(float)
        shares = calls / calls.sum()
        hot = int(shares.to_numpy().argmax())
        hot_row, others = group.iloc[hot], group.drop(group.index[hot])
        weights = others["calls"].astype(float)
        others_p50 = float((others["total_q"].map(lambda q: q[0]) * weights).sum() / weights.sum())
        others_p99 = float((others["total_q"].map(lambda q: q[1]) * weights).sum() / weights.sum())
        share, factor = float(shares.iloc[hot]), float(shares.iloc[hot]) * len(group)
        hot_p50 = float(hot_row.total_q[0])
        p50s, p99s = group["total_q"].map(lambda q: q[0]), group["total_q"].map(lambda q: q[1])
        even = (balanced(shares, p50s, calls), balanced(shares, p99s, calls))
        # Now, per call on average: the instances' p50s weighted by their calls (all calls'
        # p50 falls in the gap between instances 20 x apart: the demo's burst read 0 saving).
        now = (float(np.average(p50s, weights=calls)), float(np.average(p99s, weights=calls)))
        saving = (max(0.0, now[0] - even[0]), max(0.0, now[1] - even[1]))
        mean_p50 = float((group["total_q"].map(lambda q: q[0]) * calls).sum() / calls.sum())
        text = (
            f"{hot_row.instance} takes {share:.0%} of {len(group)} instances' calls, "
            f"p50 {fmt_us(hot_p50)} against {fmt_us(others_p50)} ({method_name(service, method)})"
        )
        if best is None or factor > best[0]:
            best = (factor, text)
        if (
            factor < HOT_FACTOR
            or hot_p50 < SLOWER * others_p50
            or saving[0] < max(MIN_SHARE * mean_p50, MIN_SAVING_US)
        ):
            continue
        by_subset = [
            now[0] - balanced(shares, group["p50_by_subset"].map(lambda q, j=j: q[j]), calls)
            for j in range(SUBSETS)
        ]
        evidence: dict[str, Any] = {
            "instances": {
                str(row.instance): {
                    "calls": int(row.calls),
                    "share": float(row.calls) / float(calls.sum()),
                    "total_p50_us": float(row.total_q[0]),
                    "total_p99_us": float(row.total_q[1]),
                }
                for row in group.itertuples(index=False)
            },
            "fair_share": 1 / len(group),
            "hot_share": share,
            "others_p50_us": others_p50,
            "others_p99_us": others_p99,
            "weighted_p50_us": now[0],
            "weighted_p99_us": now[1],
            "balanced_p50_us": even[0],
            "balanced_p99_us": even[1],
        }
        findings.append(
            Finding(
                kind="load_imbalance",
                service=service,
                method=method,
                instance=str(hot_row.instance),
                phases=("total",),
                calls=int(calls.sum()),
                evidence=evidence,
                saving_p50_us=saving[0],
                saving_p99_us=saving[1],
                saving_basis=(
                    f"a lower bound: the instances' p50/p99 now, weighted by their calls, minus "
                    f"what they would be with the calls spread evenly: each "
                    f"instance's latency grows with its share of the calls (a line through the "
                    f"{len(group)} instances' share and p50/p99, read at 1/{len(group)}); "
                    f"{hot_row.instance} takes {share:.0%}"
                ),
                confidence=confidence(
                    int(group["stored_calls"].sum()), Spread(saving[0], by_subset)
                ),
                action=ACTIONS["load_imbalance"],
                verify=VERIFY["load_imbalance"],
                **reader.shown(imbalance_query, service, method),
            )
        )
    if findings:
        return findings, []
    why = best[1] if best else f"{len(rows)} method-instance pairs, no method on 2 instances"
    return [], [Checked("load_imbalance", f"load: {why}")]


def tail_aggregates() -> list[str]:
    """Per method (``source.per_method``: ``slow`` and ``bucket`` per call): total's p50/p99,
    the slow calls' count and mean, per phase their mean and its p50 over all calls, and
    the calls per instance and per tenth of the time, slow and all. Columns ``tail__...``."""
    # Weighted: every call made, estimated under sampling (``weighted``).
    slow_means = ", ".join(weighted.average_if(f"coalesce({p}_us, 0)", "slow") for p in TAIL_PHASES)
    medians = ", ".join(weighted.quantile("0.5", f"coalesce({p}_us, 0)") for p in TAIL_PHASES)
    instance, bytes_ = f"[{INSTANCE}]", "toFloat64(request_bytes + response_bytes)"
    calls = f"[{weighted.WHOLE}]"
    return [
        f"{weighted.count_if('slow')} AS tail__slow_calls",
        "countIf(slow) AS tail__slow_stored",  # the evidence: what confidence counts
        f"{weighted.quantiles('0.5, 0.99', 'total_us')} AS tail__total_q",
        f"{weighted.average_if('total_us', 'slow')} AS tail__slow_mean",
        f"[{slow_means}] AS tail__slow_means",
        f"[{medians}] AS tail__medians",
        f"sumMapIf({instance}, {calls}, slow) AS tail__slow_by_instance",
        f"sumMap({instance}, {calls}) AS tail__by_instance",
        f"sumMapIf([bucket], {calls}, slow) AS tail__slow_by_time",
        f"sumMap([bucket], {calls}) AS tail__by_time",
        f"{weighted.quantile('0.5', bytes_, 'slow')} AS tail__slow_bytes_p50",
        f"{weighted.quantile('0.5', bytes_)} AS tail__bytes_p50",
    ]


def held_p99_query(phase: str) -> Query:
    """Per method: total's p99 with ``phase`` held to its p50 in every call where it took
    longer (``total - greatest(0, phase - p50)``), the other phases as they were: the p99
    if that phase never took longer than it typically does. Holding it in the slow calls
    alone (the top 5 %) would leave a cause that slows 10 % of the calls in the p99."""
    value = f"coalesce({phase}_us, 0)"
    held = weighted.quantile("0.99", f"total_us - greatest(0, {value} - phase_p50)")

    def build(relation: str) -> str:
        return (
            f"SELECT rpc_service, rpc_method, {held} AS held_p99\n"
            f"FROM (SELECT *, {weighted.quantile('0.5', value)} OVER method AS phase_p50\n"
            f"    FROM {relation} WHERE {UNARY} AND total_us IS NOT NULL\n"
            "    WINDOW method AS (PARTITION BY rpc_service, rpc_method))\n"
            "GROUP BY rpc_service, rpc_method"
        )

    return build


def _held_p99s(reader: Reader, phases: set[str]) -> dict[tuple[str, str, str], float]:
    """``held_p99_query`` for each phase a finding names: (phase, service, method) -> p99."""
    found = {}
    for phase in sorted(phases):
        for row in reader.query(held_p99_query(phase)).itertuples(index=False):
            found[(phase, row.rpc_service, row.rpc_method)] = float(row.held_p99)
    return found


def _with_held_p99(finding: Finding, held: dict[tuple[str, str, str], float]) -> Finding:
    """The finding with its p99 saving: p99 now minus ``held_p99_query``'s."""
    p99_held = held[(finding.phases[0], finding.service, finding.method)]
    evidence = {**finding.evidence, "total_p99_held_us": p99_held}
    saving = max(0.0, finding.evidence["total_p99_us"] - p99_held)
    return replace(finding, evidence=evidence, saving_p99_us=saving)


def find_tail(reader: Reader, rows: pd.DataFrame) -> tuple[list[Finding], list[Checked]]:
    """The tail in the rows of ``per_method(tail_aggregates() + ...)``."""
    build = per_method(tail_aggregates())
    findings = []
    best: tuple[float, str] | None = None
    for method_row in rows.itertuples(index=False):
        row = Columns(method_row, "tail")
        p50, p99 = float(row.total_q[0]), float(row.total_q[1])
        slow_calls = int(row.slow_calls)
        name = method_name(row.rpc_service, row.rpc_method)
        if best is None or p99 / max(p50, 1e-9) > best[0]:
            best = (
                p99 / max(p50, 1e-9),
                f"p99 {fmt_us(p99)} is {p99 / max(p50, 1e-9):.1f} x p50 {fmt_us(p50)} ({name})",
            )
        means = zip(TAIL_PHASES, row.slow_means, row.medians, strict=True)
        parts = {p: float(mean) - float(median) for p, mean, median in means}
        phase = max(parts, key=lambda p: parts[p])
        # Of the phases that grew in the slow calls (others may shrink a little).
        grown = sum(value for value in parts.values() if value > 0)
        part = parts[phase] / grown if grown > 0 else 0.0
        if p99 < TAIL_RATIO * p50 or p99 - p50 < MIN_TAIL_US or part < TAIL_PART or not slow_calls:
            continue
        correlates, instance = _correlates(row)
        stored = int(row.slow_stored)
        level = next((lvl for lvl, least in SLOW_CALLS if stored >= least), LOW)
        evidence: dict[str, Any] = {
            "total_p50_us": p50,
            "total_p99_us": p99,
            "slow_calls": slow_calls,
            "slow_mean_us": float(row.slow_mean),
            "phase_parts_us": {p: v for p, v in parts.items() if v > 0},
            "phase_share_of_tail": part,
            "correlates_with": correlates,
        }
        findings.append(
            Finding(
                kind="tail",
                service=row.rpc_service,
                method=row.rpc_method,
                instance=instance,
                phases=(phase,),
                calls=int(row.calls),
                evidence=evidence,
                saving_p50_us=0.0,
                saving_p99_us=0.0,  # below, from the calls with the phase held
                saving_basis=(
                    f"p99 only: p99 now minus p99 with {phase} held to its p50 wherever it "
                    f"took longer ({phase} makes {part:.0%} of the slow calls' excess over the "
                    "median); the median call is not slow"
                ),
                confidence=level,
                action=ACTIONS["tail"],
                verify=VERIFY["tail"],
                **reader.shown(build, row.rpc_service, row.rpc_method),
            )
        )
    if findings:
        held = _held_p99s(reader, {finding.phases[0] for finding in findings})
        return [_with_held_p99(finding, held) for finding in findings], []
    if best is None:
        return [], [Checked("tail", "tail: 0 unary calls with a total")]
    return [], [Checked("tail", f"tail: {best[1]}, under {TAIL_RATIO:g} x or no one phase's")]


def _correlates(row: Any) -> tuple[dict[str, Any], str | None]:
    """What the slow calls share with each other more than with all calls."""
    found: dict[str, Any] = {}
    instance = None
    slow = int(row.slow_calls)
    all_calls = int(row.calls)
    for dimension, (slow_map, all_map) in {
        "instance": (row.slow_by_instance, row.by_instance),
        "time": (row.slow_by_time, row.by_time),
    }.items():
        totals = dict(zip(*tuple_items(all_map), strict=True))
        for key, count in zip(*tuple_items(slow_map), strict=True):
            share, base = count / slow, totals.get(key, 0) / all_calls
            if share >= CORRELATED_SHARE and share >= OVER_REPRESENTED * base:
                found[dimension] = {
                    "value": _key(key),
                    "share_of_slow": share,
                    "share_of_all": base,
                }
                if dimension == "instance":
                    instance = str(key)
    if float(row.slow_bytes_p50) >= OVER_REPRESENTED * max(float(row.bytes_p50), 1.0):
        found["size"] = {
            "slow_bytes_p50": float(row.slow_bytes_p50),
            "bytes_p50": float(row.bytes_p50),
        }
    return found, instance


def _key(key: Any) -> Any:
    return str(key) if isinstance(key, str) else f"tenth {int(key) + 1} of the time range"
