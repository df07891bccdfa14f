"""The Findings page's answer as one DataFrame: a row per finding, then a row per kind checked.

``findings.findings`` returns dataclasses (the JSON contract's shape); a page
caches and reads DataFrames, so this flattens them: ranked findings first
(``found``), then the kinds that were looked for and not found, each with its
``why_not``. The page draws each finding's evidence with the insight its kind
points to (``EVIDENCE_VIEW``) and links to the page that shows the rest.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from grpc_overhead.analyzer.clock_offsets import ClockOptions
from grpc_overhead.analyzer.findings import findings, waits
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.store.base import Store

CARD_COLUMNS: tuple[str, ...] = (
    "found",
    "kind",
    "service",
    "method",
    "instance",
    "phases",
    "calls",
    "saving_p50_us",
    "saving_p99_us",
    "saving_basis",
    "confidence",
    "action",
    "verify",
    "evidence",
    "sql",
    "parameters",
    "why_not",
)

#: Per kind: the chart that proves it ("phases": the phases' distribution for the method;
#: "instances": each instance's calls and latency; "sizes": message size against the
#: path's time) and the page that shows the rest (its url path).
EVIDENCE_VIEW: dict[str, tuple[str, str]] = {
    "load_imbalance": ("instances", "instances"),
    "slow_upload": ("sizes", "payload"),
    "slow_download": ("sizes", "payload"),
    "compression_would_help": ("sizes", "payload"),
    "compression_costs_more": ("sizes", "payload"),
    "clock_uncertain": ("phases", "clock-offsets"),
}
DEFAULT_VIEW = ("phases", "phases")

#: Kinds whose evidence holds their own phase's p5/p50/p99 and the total's p50/p99.
_WAIT_KINDS = frozenset(kind.kind for kind in waits.KINDS)
#: ``evidence_bars``' one series for the tail: what each phase's bar measures.
TAIL_SERIES = "slow calls' mean - all calls' median"


def cards(
    store: Store,
    filters: CallFilters | None = None,
    clock: ClockOptions | None = None,
    *,
    options: CallsOptions | None = None,
) -> pd.DataFrame:
    """``CARD_COLUMNS``: the findings ranked (``found`` true), then the kinds checked.

    ``evidence`` and ``parameters`` are JSON text (a cached frame must pickle and
    compare); ``phases`` is a comma-separated list."""
    answer = findings(store, filters, clock, options=options)
    rows: list[dict[str, Any]] = []
    for finding in answer.findings:
        contract = finding.to_json()
        rows.append(
            {
                "found": True,
                "kind": finding.kind,
                "service": finding.service,
                "method": finding.method,
                "instance": finding.instance,
                "phases": ", ".join(finding.phases),
                "calls": int(finding.calls),
                "saving_p50_us": contract["saving_us"]["p50"],
                "saving_p99_us": contract["saving_us"]["p99"],
                "saving_basis": finding.saving_basis,
                "confidence": finding.confidence,
                "action": finding.action,
                "verify": finding.verify,
                "evidence": json.dumps(contract["evidence"]),
                "sql": finding.sql,
                "parameters": json.dumps(finding.parameters, default=str),
                "why_not": "",
            }
        )
    for checked in answer.checked:
        rows.append({"found": False, "kind": checked.kind, "why_not": checked.why_not})
    frame = pd.DataFrame.from_records(rows, columns=list(CARD_COLUMNS))
    frame["found"] = frame["found"].astype(bool)
    return frame


def evidence_view(kind: str) -> tuple[str, str]:
    """(chart, url path of the page that shows the rest) for a finding of ``kind``."""
    return EVIDENCE_VIEW.get(kind, DEFAULT_VIEW)


def evidence_bars(kind: str, evidence: str, phases: str) -> pd.DataFrame | None:
    """The numbers a finding rests on as bars (``bar``, ``series``, ``us``), for the kinds
    whose evidence holds them; None for the others, whose chart asks the store.

    A wait (``findings.waits``): its phase's p5/p50/p99 beside the total's p50/p99, the
    share the saving is taken from. The tail: each phase's excess in the slow calls over
    the median call, the part that names the phase. Drawn from the card itself, a chart
    costs no query (the phases' distribution per card took 0.3-0.6 s at 1 M calls)."""
    found = json.loads(evidence)
    if kind in _WAIT_KINDS and {"p5_us", "p50_us", "p99_us"} <= found.keys():
        label = phases.replace(", ", " + ") or kind
        rows = [(label, quantile, found[f"{quantile}_us"]) for quantile in ("p5", "p50", "p99")]
        rows += [
            ("total", quantile, found.get(f"total_{quantile}_us")) for quantile in ("p50", "p99")
        ]
    elif kind == "tail" and found.get("phase_parts_us"):
        parts = sorted(found["phase_parts_us"].items(), key=lambda item: -item[1])
        rows = [(phase, TAIL_SERIES, value) for phase, value in parts]
    else:
        return None
    frame = pd.DataFrame.from_records(rows, columns=["bar", "series", "us"])
    return frame.dropna(subset=["us"]).reset_index(drop=True)
