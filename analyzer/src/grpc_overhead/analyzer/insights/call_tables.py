"""The explorer's tables of one call, built from what ``explorer`` already queried (no query).

``explorer`` re-exports every name here.
"""

from __future__ import annotations

import pandas as pd

from grpc_overhead.analyzer.result_columns import CONSECUTIVE_PHASES

# -- tables for one call (no query) ------------------------------------------------------------

#: The coarser phases every source with message events defines (A72, semconv, ours).
COARSE_PHASES = (
    "client_pre_send",
    "server_receive",
    "server_handler",
    "server_tail",
    "request_receive",
    "response_receive",
    "network_round_trip",
)
#: Phases whose value depends on the clock offset (their corrected twin exists).
ONE_WAY = ("request_network", "response_network")


def phase_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The call's phases (``call_summary``) as rows: phase, raw_us, corrected_us.

    Only the one-way network phases differ between the two; their sum is the
    same in both, whatever the clocks do.
    """
    if summary.empty:
        return pd.DataFrame({"phase": [], "raw_us": [], "corrected_us": []})
    call = summary.iloc[0]
    names = (
        *CONSECUTIVE_PHASES,
        "unattributed",
        "total",
        "server_residence",
        "pool_wait",
        *COARSE_PHASES,
    )
    records = []
    for name in names:
        corrected = call[f"{name}_us"]
        raw = call[f"{name}_raw_us"] if name in ONE_WAY else corrected
        records.append((name, raw, corrected))
    frame = pd.DataFrame.from_records(records, columns=["phase", "raw_us", "corrected_us"])
    for column in ("raw_us", "corrected_us"):
        frame[column] = frame[column].astype("float64")
    return frame


def event_table(waterfall: pd.DataFrame) -> pd.DataFrame:
    """The call's events (``call_waterfall``) in time order: lane, event, raw_us,
    corrected_us (µs since the client span's start) and detail."""
    events = waterfall[waterfall["kind"] == "event"]
    raw = events[events["view"] == "raw"].reset_index(drop=True)
    corrected = events[events["view"] == "corrected"].reset_index(drop=True)
    frame = pd.DataFrame(
        {
            "lane": raw["lane"],
            "event": raw["name"],
            "raw_us": raw["start_us"].astype("float64"),
            "corrected_us": corrected["start_us"].astype("float64"),
            "detail": raw["detail"],
        }
    )
    return frame.sort_values(["corrected_us", "raw_us"], kind="stable").reset_index(drop=True)
