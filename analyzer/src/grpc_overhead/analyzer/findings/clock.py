"""clock_uncertain: one-way phases the clocks cannot split.

Across hosts the one-way phases (request_network, response_network) rest on a
clock offset estimated the NTP way, whose error is bounded by half the best
round trip (``clock_uncertainty_us``). Where that bound is at least
``UNCERTAIN_SHARE`` of the smaller one-way phase at p50, that direction may be
off by half its own size or more: the split is not to be trusted (their sum
stays exact). Found per (method, client host, server host). The corrected
one-way phases are each about half the round trip, so the bound, half the
best round trip, comes close to them on any path without a shared clock:
across hosts this is found unless the best round trip is far below the
typical one. It saves no time (``saving_us`` 0): it says which numbers not to
act on. Confidence from the calls alone.
"""

from __future__ import annotations

from grpc_overhead.analyzer import weighted
from grpc_overhead.analyzer.findings.advice import ACTIONS, VERIFY
from grpc_overhead.analyzer.findings.model import Checked, Finding, confidence, fmt_us
from grpc_overhead.analyzer.findings.source import UNARY, Reader, Source

KIND = "clock_uncertain"
#: The bound must be at least this share of the smaller one-way phase (p50).
UNCERTAIN_SHARE = 0.5


def query(relation: str) -> str:
    return (
        "SELECT rpc_service, rpc_method, client_host, server_host,"
        f" {weighted.count()} AS calls, count() AS stored_calls,\n"
        f"    {weighted.quantile('0.5', 'clock_uncertainty_us')} AS uncertainty_p50,\n"
        f"    {weighted.quantile('0.5', 'request_network_us')} AS request_p50,\n"
        f"    {weighted.quantile('0.5', 'response_network_us')} AS response_p50\n"
        f"FROM {relation}\n"
        f"WHERE {UNARY} AND client_host != server_host AND client_host != ''"
        " AND server_host != '' AND clock_uncertainty_us IS NOT NULL"
        " AND request_network_us IS NOT NULL AND response_network_us IS NOT NULL\n"
        "GROUP BY rpc_service, rpc_method, client_host, server_host\n"
        "ORDER BY rpc_service, rpc_method, client_host, server_host"
    )


def find(reader: Reader, source: Source) -> tuple[list[Finding], list[Checked]]:
    findings = []
    best: tuple[float, str] | None = None
    for row in reader.query(query, source).itertuples(index=False):
        bound = float(row.uncertainty_p50)
        one_way = min(float(row.request_p50), float(row.response_p50))
        ratio = bound / one_way if one_way > 0 else float("inf")
        pair = f"{row.client_host} -> {row.server_host}"
        if best is None or ratio > best[0]:
            best = (
                ratio,
                f"offset uncertainty {fmt_us(bound)} against one-way p50 "
                f"{fmt_us(one_way)} ({pair})",
            )
        if bound < UNCERTAIN_SHARE * one_way:
            continue
        findings.append(
            Finding(
                kind=KIND,
                service=row.rpc_service,
                method=row.rpc_method,
                instance=str(row.server_host),
                phases=("request_network", "response_network"),
                calls=int(row.calls),
                evidence={
                    "client_host": str(row.client_host),
                    "server_host": str(row.server_host),
                    "uncertainty_p50_us": bound,
                    "request_network_p50_us": float(row.request_p50),
                    "response_network_p50_us": float(row.response_p50),
                },
                saving_p50_us=0.0,
                saving_p99_us=0.0,
                saving_basis="none: the clocks' offset is a limit of the measurement, not time "
                "the calls spend",
                confidence=confidence(int(row.stored_calls), None),
                action=ACTIONS[KIND],
                verify=VERIFY[KIND],
                **reader.shown(query, row.rpc_service, row.rpc_method),
            )
        )
    if findings:
        return findings, []
    return [], [Checked(KIND, f"clocks: {best[1]}" if best else one_host(0))]


def one_host(calls: int) -> str:
    """Why not, where no call crosses hosts."""
    return f"clocks: 0 of {calls:,} calls cross hosts: one-way phases are exact"
