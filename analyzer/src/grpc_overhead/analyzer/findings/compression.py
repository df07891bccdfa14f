"""compression_would_help / compression_costs_more: bytes against CPU, both measured.

Compression trades CPU for bytes. Both sides of the trade are measured, never
assumed: the price of a MB on the call's path is fitted from the calls' own
sizes with ``transfer``'s fit (path µs = latency + µs/MB x MB, the same path
time per direction), run apart over uncompressed and compressed calls; the
ratio and the CPU per MB come from messages our instrumentation sampled
(``compressibility.by_method``: zlib at gRPC core's parameters, the sender's
CPU clock, ``GRPC_OVERHEAD_COMPRESSIBILITY_INTERVAL_S``).

Per MB of message, compressing saves ``rate x (1 - ratio)`` µs on the path and
costs ``cpu`` µs: compress on the sender plus decompress on the receiver (no
decompression where the ratio is >= 1: gRPC core then sends the message as
it is, after paying for the attempt).

* ``compression_would_help``: uncompressed calls; ``rate`` is the fitted slope
  over them. The saving per call is ``(rate x (1 - ratio) - cpu) x MB`` at the
  calls' MB p50 and p99, for gzip (``SUGGESTED``).
* ``compression_costs_more``: compressed calls. Their fitted slope per MB of
  *uncompressed* message already holds both effects (``ratio`` MB on the wire
  plus the CPU: gRPC core compresses after the serializer returned and
  decompresses before the deserializer starts, inside the path phases), so
  the path's own price is ``rate = (slope - cpu) / ratio``, and turning
  compression off saves ``(cpu - rate x (1 - ratio)) x MB``, never more than
  the slope itself (what the path costs per MB now).

A finding needs ``MIN_SAMPLES`` sampled messages of its method and direction,
calls of at least ``MIN_BYTES`` at p50, sizes that explain the path's time
(r² >= ``transfer.MIN_R2`` where sizes vary) and a saving at p50 of at least
``MIN_SHARE`` of total and ``MIN_SAVING_US`` (transfer's rule). Confidence is
the model's (calls and the spread of the saving over the subsets' slopes), at
most ``medium`` below ``HIGH_SAMPLES`` samples or where the least favourable
ratio sampled would leave the saving under the threshold, and ``low`` where
sizes do not vary (no slope: latency counts as bytes, as in ``transfer``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from grpc_overhead.analyzer import weighted
from grpc_overhead.analyzer.findings import transfer, waits
from grpc_overhead.analyzer.findings.advice import (
    ACTIONS,
    BYTES_PER_ENTITY,
    COMPARE,
    experiment_file,
    run_experiment,
)
from grpc_overhead.analyzer.findings.compression_samples import (
    Sample,
    Samples,
    sample_aggregates,
)
from grpc_overhead.analyzer.findings.model import (
    LOW,
    MEDIUM,
    Checked,
    Finding,
    Spread,
    confidence,
    fmt_us,
    method_name,
)
from grpc_overhead.analyzer.findings.source import Columns, Reader, per_method
from grpc_overhead.analyzer.sample_columns import ALGORITHMS

HELP, COSTS = "compression_would_help", "compression_costs_more"
KIND_NAMES: tuple[str, ...] = (HELP, COSTS)
#: gRPC's ``compression`` of a call that was sent as it is ('' = none recorded).
UNCOMPRESSED = "compression IN ('', 'identity', 'none')"
#: Which calls each kind reads.
CALLS = {HELP: UNCOMPRESSED, COSTS: f"NOT ({UNCOMPRESSED})"}
#: direction -> the transfer kind whose path (phases, time per call) carries its bytes.
PATHS = {"request": "slow_upload", "response": "slow_download"}
#: gRPC core compresses a request before its headers leave, so the compressed requests'
#: request_network per MB is at least core's compression CPU. Core's gzip cost 1.4 x the
#: sampled zlib's per MB in the findings ground truth (its own zlib build): the residual
#: read as wire time the compression saved, and the saving of turning it off came out at
#: 13 ms of a measured 100. The CPU of compression_costs_more is at least this floor.
CORE_CPU_FLOOR = f"{COSTS}__request__before_headers_us_per_mb"
#: What compression_would_help prices: the algorithm grpcio, grpc-java and grpc-go all
#: offer out of the box (grpc-go registers only gzip).
SUGGESTED = "gzip"
#: Sampled messages a finding needs; below ``HIGH_SAMPLES`` it is ``medium`` at most.
MIN_SAMPLES = 3
HIGH_SAMPLES = 10
MIN_BYTES = transfer.MIN_BYTES
MIN_SHARE, MIN_SAVING_US = transfer.MIN_SHARE, transfer.MIN_SAVING_US
NO_SAMPLES = (
    "set GRPC_OVERHEAD_COMPRESSIBILITY_INTERVAL_S (default 5 s; 0 = off) on the sending "
    "services and run our instrumentation there: it samples a message per method now and "
    "then and measures what gzip/deflate make of it"
)


def aggregates() -> list[str]:
    """Per method, for each kind and direction, transfer's fit over that kind's calls only
    (columns ``{kind}__{direction}__...``), and the compressed calls' algorithm."""
    out = [
        aggregate
        for kind in KIND_NAMES
        for direction in PATHS
        for aggregate in _fit_aggregates(kind, direction)
    ]
    _, _, size, _ = transfer.DIRECTIONS[PATHS["request"]]
    among = f"{CALLS[COSTS]} AND {size} > 0 AND request_network_us IS NOT NULL"
    floor = weighted.quantile("0.5", f"request_network_us / ({size} / 1e6)", among)
    algorithm = f"topKWeightedIf(1)(compression, {weighted.WHOLE}, {CALLS[COSTS]})"
    return [*out, f"{algorithm} AS {COSTS}__algorithm", f"{floor} AS {CORE_CPU_FLOOR}"]


def _fit_aggregates(kind: str, direction: str) -> list[str]:
    return transfer.aggregates(PATHS[direction], among=CALLS[kind], prefix=f"{kind}__{direction}__")


@dataclass
class _Why:
    """What a kind saw where it found nothing, for its ``checked`` line."""

    small_bytes: float | None = None
    unsampled: tuple[int, str] | None = None  # (fewest samples, method) among priced methods
    best: tuple[float, str] | None = None  # (saving p50, line) of the best non-finding


def find(
    reader: Reader, rows: pd.DataFrame, load: Callable[[], Samples]
) -> tuple[list[Finding], list[Checked]]:
    """Both kinds, per method and direction, in the rows of ``per_method(aggregates() + ...)``.
    ``load`` reads the sampled messages (a query of its own, ~0.4 s here): called once, and
    only where some method has calls large enough to price."""
    samples = functools.cache(load)
    found: list[Finding] = []
    checked: list[Checked] = []
    for kind in KIND_NAMES:
        why = _Why()
        kind_found = [
            finding
            for method_row in rows.itertuples(index=False)
            for direction in PATHS
            if (finding := _one(reader, kind, direction, method_row, samples, why)) is not None
        ]
        found += kind_found
        if not kind_found:
            checked.append(Checked(kind, _why_not(kind, why, rows)))
    return found, checked


def supersede(found: list[Finding], checked: list[Checked]) -> tuple[list[Finding], list[Checked]]:
    """Drop a slow_upload / slow_download that compression_costs_more explains: on a path
    whose compressed calls pay the CPU inside it, transfer's fit reads that CPU as a
    narrow path, and its advice (fewer bytes, a faster path) would not help."""
    costly = {
        (f.service, f.method, PATHS[f.evidence["direction"]]) for f in found if f.kind == COSTS
    }
    dropped = [f for f in found if (f.service, f.method, f.kind) in costly]
    kept = [f for f in found if f not in dropped]
    for finding in dropped:
        if not any(f.kind == finding.kind for f in kept + dropped if f is not finding):
            checked = [
                *checked,
                Checked(
                    finding.kind,
                    (
                        f"{transfer.DIRECTIONS[finding.kind][3]} "
                        f"{finding.evidence['us_per_mb']:,.0f} µs/MB "
                        f"({method_name(finding.service, finding.method)}) is compression CPU: "
                        "see compression_costs_more"
                    ),
                ),
            ]
    return kept, checked


def _one(
    reader: Reader,
    kind: str,
    direction: str,
    method_row: Any,
    samples: Callable[[], Samples],
    why: _Why,
) -> Finding | None:
    row = Columns(method_row, f"{kind}__{direction}")
    calls = int(row.calls)
    if not calls:
        return None
    p10, p50, p90, p99 = (float(q) for q in row.mb_q)
    if p50 * 1e6 < MIN_BYTES:
        why.small_bytes = max(why.small_bytes or 0.0, p50 * 1e6)
        return None
    service, method = method_row.rpc_service, method_row.rpc_method
    name = f"{method_name(service, method)} {direction}s"
    algorithm = SUGGESTED if kind == HELP else _algorithm(method_row)
    sample = samples().get((service, method, direction, algorithm))
    count = sample.samples if sample else 0
    if sample is None or count < MIN_SAMPLES:
        if why.unsampled is None or count < why.unsampled[0]:
            why.unsampled = (count, name)
        return None
    fitted = p10 > 0 and p90 >= transfer.MIN_SIZE_RATIO * p10
    fitted_slope, _, _, r = weighted.line(row.moments)
    r2 = r**2 if fitted and r == r else None
    path_p50 = float(row.path_q[0])
    slope = fitted_slope if fitted else (path_p50 / p50 if p50 > 0 else 0.0)
    floor = _cpu_floor(kind, direction, method_row)
    rate, per_mb = _priced(kind, slope, sample, floor)
    saving = (max(0.0, per_mb * p50), max(0.0, per_mb * p99))
    total = (float(row.total_q[0]), float(row.total_q[1]))
    if fitted and (r2 is None or r2 < transfer.MIN_R2):
        line = f"{name}: their path time does not follow their size (r² {r2 or 0:.2f})"
        _note(why, -1.0, line)
        return None
    threshold = max(MIN_SHARE * total[0], MIN_SAVING_US)
    if saving[0] < threshold:
        change = algorithm if kind == HELP else f"turning {algorithm} off"
        line = (
            f"{name}: {change} would {'save' if per_mb >= 0 else 'add'} "
            f"{fmt_us(abs(per_mb) * p50)} per call at p50 ({p50 * 1e6:,.0f} bytes, ratio "
            f"{sample.ratio:.2f}, CPU {sample.cpu_us_per_mb:,.0f} µs/MB against a path of "
            f"{rate:,.0f} µs/MB), "
            + (
                f"under {fmt_us(threshold)} ({MIN_SHARE:.0%} of total or {MIN_SAVING_US:,.0f} µs)"
                if per_mb >= 0
                else "a loss, not a saving"
            )
        )
        _note(why, per_mb * p50, line)
        return None
    level = LOW
    spread = None
    if fitted:
        subsets = [
            _priced(kind, weighted.line(moments)[0], sample, floor)[1] * p50
            for moments in row.moments_by_subset
        ]
        spread = Spread(saving[0], [max(0.0, value) for value in subsets])
        level = confidence(int(row.stored_calls), spread)
    # The samples' spread: the saving at the least favourable ratio sampled.
    worst = replace(sample, ratio=sample.ratio_max if kind == HELP else sample.ratio_min)
    worst_saving = _priced(kind, slope, worst, floor)[1] * p50
    if level != LOW and (count < HIGH_SAMPLES or worst_saving < threshold):
        level = MEDIUM
    phases, _, size, label = transfer.DIRECTIONS[PATHS[direction]]
    evidence: dict[str, Any] = {
        "direction": direction,
        "algorithm": algorithm,
        "samples": count,
        "ratio_p50": sample.ratio,
        "ratio_min": sample.ratio_min,
        "ratio_max": sample.ratio_max,
        "compress_ns_per_mb": sample.compress_ns_per_mb,
        "decompress_ns_per_mb": sample.decompress_ns_per_mb,
        "cpu_us_per_mb": sample.cpu_us_per_mb,
        "core_cpu_floor_us_per_mb": floor,
        "path_us_per_mb": rate,
        "fitted_us_per_mb": slope,
        "fitted": fitted,
        "r2": r2,
        "saving_us_per_mb": per_mb,
        "message_bytes_p50": p50 * 1e6,
        "message_bytes_p99": p99 * 1e6,
        "sample_bytes_p50": sample.bytes_p50,
        "total_p50_us": total[0],
        "total_p99_us": total[1],
        "share_of_total_p50": saving[0] / total[0] if total[0] else None,
        "saving_ci95_us": _interval(spread),
        "saving_p50_us_at_worst_ratio": worst_saving,
    }
    shown = per_method(_fit_aggregates(kind, direction) + sample_aggregates(direction, algorithm))
    return Finding(
        kind=kind,
        service=service,
        method=method,
        instance=None,
        phases=phases,
        calls=calls,
        evidence=evidence,
        saving_p50_us=saving[0],
        saving_p99_us=saving[1],
        saving_basis=_basis(kind, algorithm, size, label, count, calls, fitted),
        confidence=level,
        action=ACTIONS[kind],
        verify=_verify(kind, direction, p50 * 1e6, rate, saving[0]),
        **reader.shown(shown, service, method),
    )


def _cpu_floor(kind: str, direction: str, method_row: Any) -> float:
    """compression_costs_more on requests: ``CORE_CPU_FLOOR`` plus the receiver's
    decompression (0 elsewhere, or where no compressed request measured it)."""
    if kind != COSTS or direction != "request":
        return 0.0
    value = float(getattr(method_row, CORE_CPU_FLOOR, float("nan")))
    return value if math.isfinite(value) else 0.0


def _priced(kind: str, slope: float, sample: Sample, cpu_floor: float = 0.0) -> tuple[float, float]:
    """(the path's µs per MB sent, µs saved per MB of message) by the module's rules; the
    CPU is the samples' or ``cpu_floor`` plus their decompression, whichever is more."""
    cpu, kept = sample.cpu_us_per_mb, sample.kept
    if cpu_floor:
        decompress = sample.decompress_ns_per_mb / 1000 if sample.ratio < 1 else 0.0
        cpu = max(cpu, cpu_floor + decompress)
    if kind == HELP:
        return slope, slope * (1 - kept) - cpu
    rate = max(0.0, slope - cpu) / kept
    return rate, min(slope, cpu - rate * (1 - kept))


def _basis(
    kind: str, algorithm: str, size: str, label: str, samples: int, calls: int, fitted: bool
) -> str:
    how = (
        f"the {label}'s µs/MB fitted against {size} over {calls:,} "
        f"{'uncompressed' if kind == HELP else 'compressed'} calls"
        if fitted
        else f"the {label}'s p50 over the bytes' p50 (sizes do not vary: latency counts as bytes)"
    )
    measured = f"{algorithm}'s ratio and CPU ns/MB measured on {samples:,} sampled messages"
    if kind == HELP:
        return (
            f"(path µs/MB x (1 - ratio) - CPU µs/MB to compress and decompress) x the calls' "
            f"{size} at p50/p99; {how}; {measured}"
        )
    return (
        f"(CPU µs/MB to compress and decompress - path µs/MB x (1 - ratio)) x the calls' "
        f"{size} at p50/p99, the path's µs/MB being (fitted slope - CPU) / ratio; {how}; "
        f"{measured}; for requests the CPU is at least their request_network per MB plus the "
        "sampled decompression (gRPC core compresses before the headers leave)"
    )


def _verify(kind: str, direction: str, message_bytes: float, rate: float, saving_us: float) -> str:
    """Requests: an experiment with the prediction service's request near these messages'
    size and, for a narrow path, toxiproxy at its rate (``bandwidth_kb_s``), the cell as it
    is now the baseline and the saving expected of the other (``expect:``: the experiment
    says whether it materialized). Responses: the service's are a few bytes per entity and
    its load compresses requests only, so it cannot stand in: two runs of the user's
    service, before and after."""
    if direction == "response":
        return COMPARE.format(phase="response_network")
    entities = max(1, round(message_bytes / BYTES_PER_ENTITY))
    narrow = rate >= transfer.SLOW_US_PER_MB
    path = f"bandwidth_kb_s: {max(1, round(1e9 / rate))}\n" if narrow else ""
    top = f"concurrency: 16\nentities: {entities}\n{path}"
    cell, now = ("gzip", "none") if kind == HELP else ("none", "gzip")
    text = experiment_file(
        EXPERIMENT, top, MATRIX, baseline=f"compression: {now}", saving_us=saving_us
    )
    return (
        f"{run_experiment(EXPERIMENT, text)}: the {cell} cell must be faster than the {now} "
        "one by about the saving (its expectation says whether it materialized)"
    )


#: The verify experiment's name and matrix.
EXPERIMENT, MATRIX = "compression", "  compression: [none, gzip]\n"


def _algorithm(method_row: Any) -> str:
    """The algorithm the method's compressed calls use; gzip where gRPC did not name it
    (A72 and semconv events say only that a message was compressed)."""
    top = list(getattr(method_row, f"{COSTS}__algorithm"))
    return top[0] if top and top[0] in ALGORITHMS else SUGGESTED


def _note(why: _Why, saving: float, line: str) -> None:
    if why.best is None or saving > why.best[0]:
        why.best = (saving, line)


def _why_not(kind: str, why: _Why, rows: pd.DataFrame) -> str:
    """One line with its number: the best case looked at, else why none was priced."""
    if why.best is not None:
        return why.best[1]
    if why.unsampled is not None:
        samples, name = why.unsampled
        return f"{samples:,} sampled messages ({name}; {MIN_SAMPLES} needed): {NO_SAMPLES}"
    if why.small_bytes is not None:
        return (
            f"{_which(kind)} calls carry {why.small_bytes:,.0f} bytes at p50, under "
            f"{MIN_BYTES // 1024} KiB: their time is latency, not bytes"
        )
    calls = int(rows["calls"].sum()) if len(rows) else 0
    return f"0 of {calls:,} calls are {_which(kind)} and record their bytes and path phases"


def _which(kind: str) -> str:
    return "uncompressed" if kind == HELP else "compressed"


def _interval(spread: Spread | None) -> list[float] | None:
    """The saving's 95 % interval, as the waits give theirs (None: no fit)."""
    return None if spread is None else waits.interval(spread)
