"""A phase breakdown as one row per (service, method, phase), in µs: what pages and
``report`` read. Kept apart from ``phases`` (which builds the SQL) because it is only
pandas: the wide result of ``phases.breakdown_sql`` turned long.
"""

from __future__ import annotations

import pandas as pd

from grpc_overhead.analyzer.result_columns import ALL_PHASES

BREAKDOWN_COLUMNS = (
    "service",
    "method",
    "calls",
    "phase",
    "phase_calls",
    "p50_us",
    "p90_us",
    "p99_us",
    "mean_us",
)
#: After ``BREAKDOWN_COLUMNS``: the method's calls stored (``calls`` estimates the calls
#: made: weighted by what each stands for under sampling, the same where none is).
STORED_CALLS = "stored_calls"


def long_breakdown(wide: pd.DataFrame) -> pd.DataFrame:
    """The wide result of ``breakdown_sql`` (ns) as ``BREAKDOWN_COLUMNS`` rows (µs)."""
    records = []
    for row in wide.itertuples(index=False):
        values = row._asdict()
        for name in ALL_PHASES:
            count = int(values[f"{name}_defined"])
            quantiles = values[f"{name}_quantiles"]
            defined = count > 0 and quantiles is not None and len(quantiles) == 3
            p50, p90, p99 = (q / 1000 for q in quantiles) if defined else (None,) * 3
            mean = values[f"{name}_mean"]
            records.append(
                (
                    values["service"],
                    values["method"],
                    int(values["calls"]),
                    name,
                    count,
                    p50,
                    p90,
                    p99,
                    mean / 1000 if defined and mean is not None else None,
                    int(values.get("stored_calls", values["calls"])),
                )
            )
    frame = pd.DataFrame.from_records(records, columns=[*BREAKDOWN_COLUMNS, STORED_CALLS])
    for column in ("p50_us", "p90_us", "p99_us", "mean_us"):
        frame[column] = frame[column].astype("float64")
    return frame
