"""slow_upload / slow_download: bytes crossing a narrow path, priced from the calls' own sizes.

Each direction's path time is fitted against its bytes across the calls (least
squares, weighted by the calls each stands for under sampling: ``weighted.line``;
path µs = latency + µs/MB x MB). The slope is the
path's price per MB; above ``SLOW_US_PER_MB`` (slower than about 1 Gbit/s)
the path is narrow. The saving is what the bytes would cost on a good path
instead: (slope - ``REFERENCE_US_PER_MB``) x the calls' MB at p50 and p99.

Which time is the request's bytes: grpcio starts a server call when the
request's headers arrive and shows the body's arrival only as the
deserializer starting, so the request path is request_network plus the part
of server_queue that is not waiting for a worker (server_queue - pool_wait).
That is what tells an upload apart from a saturated pool, which server_queue
alone cannot (docs/benchmarks.md, the bandwidth ground truth). The response
path is response_network.

Where the sizes hardly vary (p90 < 1.5 x p10) no slope can be fitted: the
rate is then the path's p50 over the MB's p50, which counts the latency as
bytes too, so such a finding is never more than ``low`` confidence.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from grpc_overhead.analyzer import weighted
from grpc_overhead.analyzer.findings.advice import ACTIONS, VERIFY, upload_experiment
from grpc_overhead.analyzer.findings.model import (
    LOW,
    SUBSETS,
    Checked,
    Finding,
    Spread,
    confidence,
    method_name,
)
from grpc_overhead.analyzer.findings.source import Columns, Reader, per_method

#: A path slower than this (µs per MB; 1 Gbit/s is 8,000) is narrow.
SLOW_US_PER_MB = 8_000.0
#: What a MB costs on a good path (10 Gbit/s plus grpcio's own copying): what stays.
REFERENCE_US_PER_MB = 1_000.0
#: Calls must carry at least this (bytes, p50) for their path to be priced by size.
MIN_BYTES = 16 * 1024
#: The saving must be at least this share of total at p50, and ``MIN_SAVING_US``.
MIN_SHARE = 0.05
MIN_SAVING_US = 100.0
#: A fitted slope counts only where the sizes explain the time this well (r²).
MIN_R2 = 0.3
#: Sizes vary enough to fit a slope when their p90 is this many times their p10.
MIN_SIZE_RATIO = 1.5

#: kind -> (phases, path time per call, bytes column, label)
DIRECTIONS: dict[str, tuple[tuple[str, ...], str, str, str]] = {
    "slow_upload": (
        ("request_network", "server_queue"),
        "request_network_us + server_queue_us - coalesce(pool_wait_us, 0)",
        "request_bytes",
        "request path",
    ),
    "slow_download": (
        ("response_network",),
        "response_network_us",
        "response_bytes",
        "response path",
    ),
}
KIND_NAMES = tuple(DIRECTIONS)


def aggregates(kind: str, *, among: str = "1", prefix: str = "") -> list[str]:
    """Per method (``source.per_method``), over calls with the path's phases and bytes: the
    moments of path µs against MB (whole and per subset: ``weighted.sums``, read with
    ``weighted.line``) and the fit's slope, the MB's and the path's quantiles and total's.
    Columns ``{kind}__...``. ``among`` (SQL) keeps only some calls, columns
    then ``{prefix}...``: the compression kinds fit compressed and uncompressed calls apart
    with this same fit."""
    _, path, size, _ = DIRECTIONS[kind]
    p = prefix or f"{kind}__"
    known = f"({path}) IS NOT NULL AND {size} > 0 AND ({among})"
    mb, path_us = f"if({known}, {size} / 1e6, NULL)", f"if({known}, {path}, NULL)"
    return [  # weighted: every call made, estimated under sampling (``weighted``)
        f"{weighted.count(path_us)} AS {p}calls",
        f"count({path_us}) AS {p}stored_calls",  # the evidence: what confidence counts
        f"{weighted.sums(f'{size} / 1e6', path, known)} AS {p}moments",
        f"{weighted.slope(f'{p}moments')} AS {p}us_per_mb",  # what a shown query reads
        f"{weighted.quantiles('0.1, 0.5, 0.9, 0.99', mb)} AS {p}mb_q",
        f"{weighted.quantiles('0.5, 0.99', path_us)} AS {p}path_q",
        f"{weighted.quantiles('0.5, 0.99', f'if({known}, total_us, NULL)')} AS {p}total_q",
        f"{weighted.sums_by_subset(f'{size} / 1e6', path, known, SUBSETS)} AS {p}moments_by_subset",
    ]


def find(reader: Reader, rows: pd.DataFrame) -> tuple[list[Finding], list[Checked]]:
    """Both directions in the rows of ``per_method(aggregates(kind) + ...)``."""
    findings: list[Finding] = []
    checked: list[Checked] = []
    for kind in DIRECTIONS:
        found, why_not = _direction(reader, kind, rows)
        findings += found
        if not found:
            checked.append(Checked(kind, why_not))
    return findings, checked


def _direction(reader: Reader, kind: str, rows: pd.DataFrame) -> tuple[list[Finding], str]:
    phases, _, size, label = DIRECTIONS[kind]
    build = per_method(aggregates(kind))
    findings = []
    best: tuple[float, str] | None = None
    small: float | None = None  # the largest p50 size among calls too small to price
    for method_row in rows.itertuples(index=False):
        row = Columns(method_row, kind)
        if not row.calls:
            continue
        p10, p50, p90, p99 = (float(q) for q in row.mb_q)
        if p50 * 1e6 < MIN_BYTES:
            small = max(small or 0.0, p50 * 1e6)
            continue
        total = (float(row.total_q[0]), float(row.total_q[1]))
        path = (float(row.path_q[0]), float(row.path_q[1]))
        fitted = p10 > 0 and p90 >= MIN_SIZE_RATIO * p10
        slope, intercept, _, r = weighted.line(row.moments)
        r2 = r**2 if fitted and r == r else None
        rate = slope if fitted else (path[0] / p50 if p50 > 0 else 0.0)
        excess = max(0.0, rate - REFERENCE_US_PER_MB)
        saving = (excess * p50, excess * p99)
        name = method_name(row.rpc_service, row.rpc_method)
        if best is None or rate > best[0]:
            best = (rate, f"{label} {rate:,.0f} µs/MB ({name}, {p50 * 1e6:,.0f} bytes at p50)")
        if (
            rate < SLOW_US_PER_MB
            or saving[0] < max(MIN_SHARE * total[0], MIN_SAVING_US)
            or (fitted and (r2 is None or r2 < MIN_R2))
        ):
            continue
        spread = None
        if fitted:
            slopes = [weighted.line(moments)[0] for moments in row.moments_by_subset]
            spread = Spread(saving[0], [max(0.0, s - REFERENCE_US_PER_MB) * p50 for s in slopes])
        level = confidence(int(row.stored_calls), spread) if fitted else LOW
        evidence: dict[str, Any] = {
            "us_per_mb": rate,
            "mb_per_s": 1e6 / rate if rate else None,
            "latency_us": intercept if fitted else None,
            "r2": r2,
            "fitted": fitted,
            "bytes_p10": p10 * 1e6,
            "bytes_p50": p50 * 1e6,
            "bytes_p90": p90 * 1e6,
            "bytes_p99": p99 * 1e6,
            "path_p50_us": path[0],
            "path_p99_us": path[1],
            "total_p50_us": total[0],
            "total_p99_us": total[1],
            "share_of_total_p50": saving[0] / total[0] if total[0] else None,
        }
        basis = (
            f"(fitted {rate:,.0f} µs/MB - {REFERENCE_US_PER_MB:,.0f} µs/MB on a good path) x "
            f"the calls' {size} at p50/p99, from a fit of the {label} time against size over "
            f"{int(row.calls):,} calls"
            if fitted
            else f"({rate:,.0f} µs/MB, the {label}'s p50 over the bytes' p50: sizes do not "
            f"vary, so latency counts as bytes too) - {REFERENCE_US_PER_MB:,.0f} µs/MB, x the "
            f"calls' {size} at p50/p99"
        )
        findings.append(
            Finding(
                kind=kind,
                service=row.rpc_service,
                method=row.rpc_method,
                instance=None,
                phases=phases,
                calls=int(row.calls),
                evidence=evidence,
                saving_p50_us=saving[0],
                saving_p99_us=saving[1],
                saving_basis=basis,
                confidence=level,
                action=ACTIONS[kind],
                verify=(
                    upload_experiment(p50 * 1e6, rate, saving[0])
                    if kind == "slow_upload"
                    else VERIFY[kind]
                ),
                **reader.shown(build, row.rpc_service, row.rpc_method),
            )
        )
    if best is None and small is not None:
        return findings, (
            f"{label}: calls carry {small:,.0f} bytes at p50, under {MIN_BYTES // 1024} KiB: "
            "their time is latency, not bytes"
        )
    if best is None:
        return findings, f"{label}: no unary call with its bytes and phases recorded"
    return findings, (
        f"{best[1]}: below {SLOW_US_PER_MB:,.0f} µs/MB (1 Gbit/s) or a saving under "
        f"{MIN_SHARE:.0%} of total"
    )


#: Findings that explain a network_latency of the same method, and how.
EXPLAIN_NETWORK = {
    "slow_upload": "bytes on a narrow path, not distance",
    "slow_download": "bytes on a narrow path, not distance",
    "client_busy": "partly the busy client's own wait, which spills into response_network",
}


def supersede(found: list[Finding], checked: list[Checked]) -> tuple[list[Finding], list[Checked]]:
    """Drop a network_latency that another finding of the same method explains, since
    moving the client closer would not save that time: calls under 64 KiB on a narrow path
    spend it on bytes (a 500 KB/s path with 52 KB requests read as both, with the same
    saving); a busy client's GIL wait lands partly in response_network (its network
    "latency" ranked above client_busy in 1 run of 8 of the findings ground truth).

    Only a finding made at p50 explains it: one made at p99 alone (saving 0 at p50) says
    nothing of the typical call, whose network time network_latency is about (a loaded
    machine's tail-only client_busy hid 6 ms of injected latency each way)."""
    explained = {
        (f.service, f.method): f.kind
        for f in found
        if f.kind in EXPLAIN_NETWORK and f.saving_p50_us > 0
    }
    dropped = [
        f for f in found if f.kind == "network_latency" and (f.service, f.method) in explained
    ]
    kept = [f for f in found if f not in dropped]
    if dropped and not any(f.kind == "network_latency" for f in kept):
        first = dropped[0]
        by = explained[(first.service, first.method)]
        checked = [
            *checked,
            Checked(
                "network_latency",
                (
                    f"network round trip ({method_name(first.service, first.method)}): its time is "
                    f"{EXPLAIN_NETWORK[by]}: see {by}"
                ),
            ),
        ]
    return kept, checked
