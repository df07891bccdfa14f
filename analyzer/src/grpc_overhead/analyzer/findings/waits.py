"""Kinds that are one phase (or a sum of phases) a call could do without.

Each ``PhaseKind`` reads one per-call value in ``grpc_call_phases``' columns
and asks, per method, how much of the call it takes. Its saving is what the
calls would no longer pay if the cause went: the value's p50 and p99 above its
``floor`` (what the phase still costs when nothing is wrong). A kind is found
when that saving is material (``material``): at least ``min_share`` of total at
p50 and ``MIN_SAVING_US``, or at p99 at least ``TAIL_SHARE`` of total's p99 and
``MIN_TAIL_SAVING_US`` (a pool that saturates in bursts waits at the tail only).

One query per kind, over every method at once; the spread of the p50 over the
calls' subsets gives the confidence (``model``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from grpc_overhead.analyzer import weighted
from grpc_overhead.analyzer.findings.advice import ACTIONS, VERIFY
from grpc_overhead.analyzer.findings.model import (
    SUBSETS,
    Checked,
    Finding,
    Spread,
    confidence,
    fmt_share,
    fmt_us,
    method_name,
)
from grpc_overhead.analyzer.findings.source import Columns, Reader, per_method

#: A saving at p50 must be at least this (µs), and ``min_share`` of total.
MIN_SAVING_US = 50.0
#: ... or at p99 at least this share of total's p99, and this many µs.
TAIL_SHARE = 0.10
MIN_TAIL_SAVING_US = 1000.0
#: A p99 needs this many resolutions: the slowest 1 % of calls carry the largest errors
#: (a healthy server's server_dispatch read 2,354 µs at p99 over 600 calls).
TAIL_RESOLUTIONS = 3
#: A finding made at p99 alone counts 1 call in this many for its confidence: medium then
#: needs 1,000 calls (10 beyond the p99), high 4,000. At 10, a healthy service on a machine
#: at load 7 showed a 1.5 ms p99 pool wait over 600 calls with medium confidence.
TAIL_ONLY_CALLS = 20
#: server_dispatch comes from deadlines gRPC core keeps in whole milliseconds: each call's
#: value is within about +-1.5 ms, unbiased, clamped at 0 (docs/reference.md).
DEADLINE_RESOLUTION_US = 1000.0
#: client_dispatch is the lag of a probe thread's wake-ups: on a machine busy with other
#: processes an idle client reads hundreds of µs (203 at p50 in the findings ground
#: truth's healthy run); a GIL held by the client's own work costs milliseconds.
WAKE_UP_RESOLUTION_US = 500.0
#: A same-zone round trip: what network_latency leaves when client and server are close.
NEAR_ROUND_TRIP_US = 200.0
#: What a call waits for a free worker's thread handoff (grpcio: tens of µs): the pool's
#: floor is its p5, at most this.
HANDOFF_US = 100.0
#: Calls carrying at most this many bytes (request + response, p50) are "small": their
#: network time is latency, not bytes (those are slow_upload / slow_download).
SMALL_CALL_BYTES = 64 * 1024


@dataclass(frozen=True)
class PhaseKind:
    """One kind read from one per-call value."""

    kind: str
    label: str  # in the user's words, for ``checked``
    phases: tuple[str, ...]
    value: str  # per call, over the view's columns; NULL where not measured
    basis: str
    min_share: float = 0.05
    floor_us: float = 0.0  # a constant floor
    floor_from_p5: bool = False  # the floor is the value's p5, at most ``floor_us``
    small_calls_only: bool = False
    tail_too: bool = True  # a material p99 alone makes a finding
    #: The per-call value's precision (µs): a saving below it at p50, or below
    #: ``TAIL_RESOLUTIONS`` times it at p99, is the measurement's noise, not a wait.
    resolution_us: float = 0.0


KINDS: tuple[PhaseKind, ...] = (
    PhaseKind(
        "post_processing",
        "post-processing",
        ("post_processing",),
        "post_processing_us",
        "post_processing's own p50/p99: the work after mark_predictions_made() leaves the "
        "response path entirely",
    ),
    PhaseKind(
        "server_interceptors",
        "server interceptors",
        ("server_interceptors",),
        "server_interceptors_us",
        "server_interceptors' own p50/p99: the user's interceptors' work (logging, auth, "
        "metrics) leaves the call's path",
    ),
    PhaseKind(
        "server_pool_saturated",
        "server pool",
        ("pool_wait",),
        "pool_wait_us",
        "pool_wait's p50/p99 above a free worker's handoff (its p5, at most 100 µs): with a "
        "worker free for every call in flight the wait vanishes",
        floor_us=HANDOFF_US,
        floor_from_p5=True,
    ),
    PhaseKind(
        "server_cpu_saturated",
        "server dispatch",
        ("server_dispatch",),
        "server_dispatch_us",
        "server_dispatch's own p50/p99: a server process with CPU to spare starts each call "
        "as it arrives",
        resolution_us=DEADLINE_RESOLUTION_US,
    ),
    PhaseKind(
        "client_busy",
        "client dispatch",
        ("client_dispatch",),
        "client_dispatch_us",
        "client_dispatch's own p50/p99: a client process with CPU to spare reads each "
        "response as it arrives",
        resolution_us=WAKE_UP_RESOLUTION_US,
    ),
    PhaseKind(
        "connection_setup",
        "connection setup",
        ("client_connect",),
        "client_connect_us",
        "client_connect's own p50/p99: on a reused, ready channel a call waits for no connection",
    ),
    PhaseKind(
        "serialization_cost",
        "(de)serialization",
        ("client_serialize", "request_deserialize", "response_serialize", "client_deserialize"),
        "client_serialize_us + request_deserialize_us + response_serialize_us"
        " + client_deserialize_us",
        "the four (de)serialization phases' sum at p50/p99: an upper bound, what messages that "
        "cost nothing to encode would save (packed encodings recover most of it)",
        min_share=0.10,
        floor_us=0.0,
        tail_too=False,
    ),
    PhaseKind(
        "network_latency",
        "network round trip",
        ("request_network", "response_network"),
        "request_network_us + response_network_us",
        "the network both ways at p50/p99 (exact on any clocks) above a same-zone round trip "
        "(200 µs): what moving the client next to the server would save",
        min_share=0.5,
        floor_us=NEAR_ROUND_TRIP_US,
        small_calls_only=True,
        tail_too=False,
    ),
)


def aggregates(kind: PhaseKind) -> list[str]:
    """Per method (``source.per_method``), over the calls measuring the value: how many,
    its p5/p50/p99, total's p50/p99 and the bytes' p50 over those calls, and the value's
    p50 and p99 per subset. Columns ``{kind}__...``."""
    x, p = f"({kind.value})", f"{kind.kind}__"
    over = f"if({x} IS NULL, NULL, {{}})"
    size = over.format("toFloat64(request_bytes + response_bytes)")
    return [  # weighted: every call made, estimated under sampling (``weighted``)
        f"{weighted.count(x)} AS {p}calls",
        f"count({x}) AS {p}stored_calls",  # the evidence: what confidence counts
        f"{weighted.quantiles('0.05, 0.5, 0.99', x)} AS {p}value_q",
        f"{weighted.quantiles('0.5, 0.99', over.format('total_us'))} AS {p}total_q",
        f"{weighted.quantile('0.5', size)} AS {p}bytes_p50",
        f"{weighted.quantile_by_subset('0.5', x, SUBSETS)} AS {p}p50_by_subset",
        f"{weighted.quantile_by_subset('0.99', x, SUBSETS)} AS {p}p99_by_subset",
    ]


def material(
    kind: PhaseKind, saving: tuple[float, float], total: tuple[float, float]
) -> tuple[bool, bool]:
    """(at p50, at p99): whether the saving is worth a finding at that quantile."""
    at_p50 = saving[0] >= kind.min_share * total[0] and saving[0] >= max(
        MIN_SAVING_US, kind.resolution_us
    )
    at_p99 = (
        kind.tail_too
        and saving[1] >= TAIL_SHARE * total[1]
        and saving[1] >= max(MIN_TAIL_SAVING_US, TAIL_RESOLUTIONS * kind.resolution_us)
    )
    return at_p50, at_p99


def material_sql(
    kind: PhaseKind, saving: tuple[str, str], total: tuple[str, str], size: str
) -> str:
    """``material`` (and the small-calls rule ``find`` adds) as a SQL condition over
    columns: the Grafana findings panel's rule, so that it finds what ``find`` does."""
    least_p99 = max(MIN_TAIL_SAVING_US, TAIL_RESOLUTIONS * kind.resolution_us)
    at_p50 = material_at_p50_sql(kind, saving[0], total[0])
    at_p99 = (
        f"({saving[1]} >= {TAIL_SHARE} * {total[1]} AND {saving[1]} >= {least_p99})"
        if kind.tail_too
        else "0"
    )
    small = f" AND {size} <= {SMALL_CALL_BYTES}" if kind.small_calls_only else ""
    return f"(({at_p50} OR {at_p99}){small})"


def material_at_p50_sql(kind: PhaseKind, saving: str, total: str) -> str:
    """``material``'s p50 half as SQL: where a finding made at p99 alone saves 0 at p50."""
    least = max(MIN_SAVING_US, kind.resolution_us)
    return f"({saving} >= {kind.min_share} * {total} AND {saving} >= {least})"


def find(
    reader: Reader, kind: PhaseKind, rows: pd.DataFrame
) -> tuple[list[Finding], list[Checked]]:
    """``kind`` in the rows of ``per_method(aggregates(kind) + ...)``, one per method."""
    build = per_method(aggregates(kind))
    findings: list[Finding] = []
    best: tuple[float, str] | None = None  # (share at p50, method) of the largest non-finding
    calls = int(rows["calls"].sum()) if len(rows) else 0
    for method_row in rows.itertuples(index=False):
        row = Columns(method_row, kind.kind)
        if not row.calls:
            continue
        p5, p50, p99 = (float(q) for q in row.value_q)
        total = (float(row.total_q[0]), float(row.total_q[1]))
        floor = min(p5, kind.floor_us) if kind.floor_from_p5 else kind.floor_us
        saving = (max(0.0, p50 - floor), max(0.0, p99 - floor))
        at_p50, at_p99 = material(kind, saving, total)
        if at_p99 and not at_p50:  # a tail finding: nothing material to win at p50, so it
            saving = (0.0, saving[1])  # ranks among the tails, by p99 (evidence keeps p50)
        small = float(row.bytes_p50) <= SMALL_CALL_BYTES
        name = method_name(row.rpc_service, row.rpc_method)
        if (at_p50 or at_p99) and (small or not kind.small_calls_only):
            subsets = row.p50_by_subset if at_p50 else row.p99_by_subset
            spread = Spread(
                saving[0] if at_p50 else saving[1], [max(0.0, float(v) - floor) for v in subsets]
            )
            evidence: dict[str, Any] = {
                "p50_us": p50,
                "p99_us": p99,
                "p5_us": p5,
                "floor_us": floor,
                "total_p50_us": total[0],
                "total_p99_us": total[1],
                "share_of_total_p50": p50 / total[0] if total[0] else None,
                "share_of_total_p99": p99 / total[1] if total[1] else None,
                "bytes_p50": float(row.bytes_p50),
                "found_at": "p50" if at_p50 else "p99",
                "saving_ci95_us": interval(spread),
            }
            findings.append(
                Finding(
                    kind=kind.kind,
                    service=row.rpc_service,
                    method=row.rpc_method,
                    instance=None,
                    phases=kind.phases,
                    calls=int(row.calls),
                    evidence=evidence,
                    saving_p50_us=saving[0],
                    saving_p99_us=saving[1],
                    saving_basis=kind.basis,
                    # A p99 rests on the slowest 1 % of the calls: a tail-only finding
                    # needs TAIL_ONLY_CALLS times the calls for the same confidence.
                    confidence=confidence(
                        int(row.stored_calls) // (1 if at_p50 else TAIL_ONLY_CALLS), spread
                    ),
                    action=ACTIONS[kind.kind],
                    verify=VERIFY[kind.kind],
                    **reader.shown(build, row.rpc_service, row.rpc_method),
                )
            )
            continue
        share = p50 / total[0] if total[0] else 0.0
        if best is None or share > best[0]:
            line = (
                f"{fmt_share(p50, total[0])} of total at p50 ({fmt_us(p50)} of "
                f"{fmt_us(total[0])}, {name}, {int(row.calls):,} calls), "
            )
            if at_p50 or at_p99:  # material, but the calls are large: bytes, not latency
                line += (
                    f"but the calls carry {float(row.bytes_p50):,.0f} bytes at p50: "
                    "slow_upload / slow_download judge them"
                )
            elif kind.resolution_us and share >= kind.min_share:
                line += f"within the {fmt_us(kind.resolution_us)} the value is known to per call"
            else:
                line += f"below the {kind.min_share:.0%} threshold"
                line += " for calls under 64 KiB" if kind.small_calls_only else ""
            best = (share, line)
    checked = []
    if not findings:
        checked.append(Checked(kind.kind, _why_not(kind, best, calls)))
    return findings, checked


def _why_not(kind: PhaseKind, best: tuple[float, str] | None, calls: int) -> str:
    if best is None:
        return f"{kind.label}: not measured: 0 of {calls:,} calls record {' + '.join(kind.phases)}"
    return f"{kind.label}: {best[1]}"


def interval(spread: Spread) -> list[float] | None:
    """The 95 % interval of the saving from the subsets' spread (None: too few subsets)."""
    error = spread.standard_error
    if not math.isfinite(error):
        return None
    return [max(0.0, spread.estimate - 1.96 * error), spread.estimate + 1.96 * error]
