"""Findings: what to change to make the calls faster, ranked by the time it would save.

``findings(store, filters, clock, options=...)`` runs one query per kind over
the calls the filters keep and returns ``Findings``: the kinds found, ranked by
their saving at p50 (ties by p99), each with its evidence, the basis of its
estimate, a confidence, the action (grpcio / grpc-java / grpc-go option or
code) and how to verify it; and one ``Checked`` line per kind looked for and
not found, with the number that says why. ``Findings.to_json()`` is the JSON
contract of ``grpc-overhead findings --format json`` (docs/reference.md,
"Findings").

The kinds live in small modules: ``waits`` (a phase a call could do without),
``transfer`` (bytes over a narrow path), ``spread`` (instances and the tail),
``clock`` (one-way phases the clocks cannot split), ``compression`` (bytes against
CPU, from sampled messages). ``KIND_NAMES`` is the vocabulary, a contract.
"""

from __future__ import annotations

from grpc_overhead.analyzer import compressibility, weighted
from grpc_overhead.analyzer.clock_offsets import ClockOptions
from grpc_overhead.analyzer.findings import clock as clock_kind
from grpc_overhead.analyzer.findings import (
    compression,
    compression_samples,
    spread,
    transfer,
    waits,
)
from grpc_overhead.analyzer.findings.model import Checked, Finding, Findings, ranked
from grpc_overhead.analyzer.findings.source import Reader, Source, per_method
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.snapshot import snapshot_ns
from grpc_overhead.analyzer.store.base import Store

__all__ = ["KIND_NAMES", "Checked", "Finding", "Findings", "findings"]

#: The vocabulary (a contract: names never change).
KIND_NAMES: tuple[str, ...] = (
    *(kind.kind for kind in waits.KINDS),
    *transfer.KIND_NAMES,
    *spread.KIND_NAMES,
    clock_kind.KIND,
    *compression.KIND_NAMES,
)


#: Calls whose halves ran on two hosts: only they need the clock kind's second query.
CROSS_HOST = weighted.count_if(
    "client_host != server_host AND client_host != '' AND server_host != ''"
)


def findings(
    store: Store,
    filters: CallFilters | None = None,
    clock: ClockOptions | None = None,
    *,
    options: CallsOptions | None = None,
) -> Findings:
    """Every kind over the calls ``filters`` keep, ranked; one snapshot for all queries.

    The per-method kinds (waits, transfer, tail, compression's fits) run as one query,
    the instances' as a second, and the clock's as a third only where calls cross hosts:
    each query pays for merging and computing every call, which dominates its cost. The
    sampled messages (compression) are a fourth that merges only the sampled calls.
    """
    filters = filters or CallFilters()
    options = options or CallsOptions()
    if filters.as_of_ns is None:  # every kind reads the same calls
        filters = filters.snapshot(snapshot_ns(store))
    reader = Reader(store, Source.run(store, filters, clock, options))
    parts = [aggregate for kind in waits.KINDS for aggregate in waits.aggregates(kind)]
    parts += [aggregate for kind in transfer.KIND_NAMES for aggregate in transfer.aggregates(kind)]
    parts += compression.aggregates()
    parts += [*spread.tail_aggregates(), f"{CROSS_HOST} AS cross_host_calls"]
    rows = reader.query(per_method(parts))
    results = [waits.find(reader, kind, rows) for kind in waits.KINDS]
    results += [transfer.find(reader, rows), spread.find_imbalance(reader)]
    results.append(spread.find_tail(reader, rows))

    def sampled() -> compression_samples.Samples:  # read only where some call is large enough
        frame = compressibility.by_method(store, filters, clock, options=options)
        return compression_samples.samples_by_key(frame)

    results.append(compression.find(reader, rows, sampled))
    if len(rows) and int(rows["cross_host_calls"].sum()):
        estimated = Source.with_uncertainty(store, filters, clock, options)
        results.append(clock_kind.find(reader, estimated))
    else:
        calls = int(rows["calls"].sum()) if len(rows) else 0
        results.append(([], [Checked(clock_kind.KIND, clock_kind.one_host(calls))]))
    found: list[Finding] = []
    checked: list[Checked] = []
    for kind_findings, kind_checked in results:
        found += kind_findings
        checked += kind_checked
    found, checked = transfer.supersede(*compression.supersede(found, checked))
    return Findings(ranked(found), checked)
