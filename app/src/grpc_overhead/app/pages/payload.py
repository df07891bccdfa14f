"""Payload and compression: what each megabyte costs per phase, and the algorithms side by side."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from grpc_overhead.analyzer.insights import payload
from grpc_overhead.analyzer.insights.rows import STACKED_PHASES
from grpc_overhead.app import cached, charts, empty_states, formatting, sidebar

SAMPLE = 2_000

st.title("Payload & compression")
filters = sidebar.filters()
empty_states.require_calls(filters)

answer = cached.load(payload.by_algorithm, filters)
fits = payload.method_fits(answer)

st.subheader("Cost per MB, per phase")
phase = st.selectbox(
    "Phase",
    list(payload.FITTED_PHASES),
    index=list(payload.FITTED_PHASES).index("total"),
    key="payload_phase",
)
basis = payload.SIZE_BASIS[phase]
# Fits per method and run (calls of one kind), then per method across its runs (where
# each run has one size, only the runs together show a size effect); the headline is
# the busiest finding, within one run first (payload.headline).
within = fits[(fits["phase"] == phase) & (fits["algorithm"] == payload.ALL)]
within = within.sort_values("calls", ascending=False, kind="stable")
across_runs = payload.across_runs_fits(answer)
across_runs = across_runs[
    (across_runs["phase"] == phase) & (across_runs["algorithm"] == payload.ALL)
].sort_values("calls", ascending=False, kind="stable")
fit, is_across = payload.headline(within, across_runs)
chosen = pd.concat([within, across_runs]) if len(across_runs) else within
found = fit is not None and bool(fit["finding"])
columns = st.columns(3)
columns[0].metric(
    "Cost per MB",
    formatting.duration(fit["slope_us_per_mb"]) if found else "no size effect",
    help=f"Least-squares slope of {phase} against the {basis} bytes (1 MB = 1,000,000 "
    f"bytes) over one method's calls in one run (across its runs where no run alone "
    f"shows an effect; the caption says which); shown when R² is at least "
    f"{payload.MIN_R2:g} and the slope is positive.",
)
columns[1].metric(
    "Fixed cost",
    formatting.duration(fit["intercept_us"]) if found else formatting.MISSING,
    help="The fitted line at zero bytes.",
)
columns[2].metric(
    "R²",
    f"{fit['r2']:.2f}" if fit is not None and np.isfinite(fit["r2"]) else formatting.MISSING,
    help="How much of the phase's spread the payload size explains.",
)
if fit is not None:
    method = f"{fit['service']}/{fit['method']}"
    if is_across:
        scope = f"{method} across {fit['run_id'].strip('()')}"
    else:
        scope = method + (f" in run {fit['run_id']}" if fit["run_id"] else "")
    others = len(chosen) - 1
    more = (
        f"; {others} other fit(s) below (pick a method and run in the sidebar to headline another)"
        if others
        else ""
    )
    if is_across:
        st.caption(
            f"{scope}, {formatting.count(fit['calls'])} calls: {fit['verdict']}. No run "
            "alone shows a size effect (each has one payload size, or too little spread), "
            f"so this fit is across the runs: whatever else differs between them (rate, "
            f"load, settings) is in it too{more}."
        )
    elif found:
        st.caption(f"{scope}, {formatting.count(fit['calls'])} calls: {fit['verdict']}{more}.")
    else:
        st.info(f"{scope}: {fit['verdict']}{more}.")

sample = cached.load(payload.payload_sample, filters, SAMPLE)
size_column = {"request": "request_bytes", "response": "response_bytes"}.get(basis)
points = sample.assign(
    mb=(sample[size_column] if size_column else sample["request_bytes"] + sample["response_bytes"])
    / payload.BYTES_PER_MB
).dropna(subset=[f"{phase}_us"])
if points.empty:
    st.info(f"No call in the selection records {phase}.")
else:
    scatter = px.scatter(
        points,
        x="mb",
        y=f"{phase}_us",
        color="algorithm",
        hover_data=["method"],
        opacity=0.6,
        labels={"mb": f"{basis} payload (MB)", f"{phase}_us": f"{phase} (µs)"},
    )
    if found:
        xs = np.array([fit["min_bytes"], fit["max_bytes"]]) / payload.BYTES_PER_MB
        scatter.add_trace(
            go.Scatter(
                x=xs,
                y=fit["intercept_us"] + fit["slope_us_per_mb"] * xs,
                mode="lines",
                name=f"fit: {formatting.duration(fit['slope_us_per_mb'])} per MB",
                line={"color": "black", "dash": "dash"},
            )
        )
    charts.legend_on_top(scatter, 360)
    st.plotly_chart(scatter, width="stretch", key="payload_scatter")
    st.caption(
        f"{formatting.count(len(points))} calls drawn (a fixed hash sample); fits use every "
        "call. Sizes are message bytes as serialized: after an application-level codec, "
        "before gRPC compression."
    )

st.dataframe(
    chosen[
        [
            "service",
            "method",
            "run_id",
            "calls",
            "slope_us_per_mb",
            "intercept_us",
            "r2",
            "verdict",
            "min_bytes",
            "max_bytes",
        ]
    ].assign(
        slope_us_per_mb=chosen["slope_us_per_mb"].where(chosen["finding"]),
        intercept_us=chosen["intercept_us"].where(chosen["finding"]),
    ),
    hide_index=True,
    width="stretch",
    height=charts.ALL_ROWS,
    column_config={
        "run_id": "run",
        "slope_us_per_mb": st.column_config.NumberColumn("µs per MB", format="%.1f"),
        "intercept_us": st.column_config.NumberColumn("fixed (µs)", format="%.1f"),
        "r2": st.column_config.NumberColumn("R²", format="%.2f"),
        "min_bytes": st.column_config.NumberColumn("min bytes", format="%d"),
        "max_bytes": st.column_config.NumberColumn("max bytes", format="%d"),
    },
    key="payload_costs",
)

st.subheader("Algorithms side by side")
st.caption(
    "A fair comparison needs the same calls with each algorithm: select one run in the "
    "sidebar (the demo's `demo-compression` plays the same 38 KB requests with each), or "
    "one method, so payload size and load do not differ between algorithms."
)
algorithms = payload.algorithms(answer)
summary = algorithms.drop_duplicates("algorithm")
end_to_end = summary.melt(
    id_vars="algorithm",
    value_vars=["total_p50_us", "total_p99_us"],
    var_name="statistic",
    value_name="us",
).replace({"statistic": {"total_p50_us": "p50 total", "total_p99_us": "p99 total"}})
latency = px.bar(
    end_to_end,
    x="algorithm",
    y="us",
    color="statistic",
    barmode="group",
    labels={"us": "µs", "algorithm": ""},
)
charts.legend_on_top(latency, 320)
st.plotly_chart(latency, width="stretch", key="payload_algorithms_total")

stacked = algorithms.dropna(subset=["value_us"])
if stacked.empty:
    st.info("No call in the selection records transport events: no per-phase split.")
else:
    per_phase = px.bar(
        stacked,
        x="value_us",
        y="algorithm",
        color="phase",
        orientation="h",
        category_orders={"phase": list(STACKED_PHASES)},
        labels={"value_us": "mean (µs)", "algorithm": ""},
    )
    per_phase.update_layout(barmode="stack")
    charts.legend_on_top(per_phase, 80 + 50 * stacked["algorithm"].nunique(), title="phase")
    st.plotly_chart(per_phase, width="stretch", key="payload_algorithms_phases")

table = summary[
    [
        "algorithm",
        "calls",
        "request_bytes_mean",
        "response_bytes_mean",
        "request_compressed_ratio",
        "total_p50_us",
        "total_p99_us",
        "total_mean_us",
    ]
]
st.dataframe(
    pd.DataFrame(table),
    hide_index=True,
    width="stretch",
    height=charts.ALL_ROWS,
    column_config={
        "request_bytes_mean": st.column_config.NumberColumn("request bytes (mean)", format="%.0f"),
        "response_bytes_mean": st.column_config.NumberColumn(
            "response bytes (mean)", format="%.0f"
        ),
        "request_compressed_ratio": st.column_config.NumberColumn(
            "gRPC compressed / message",
            format="%.2f",
            help="Where the compressed size was recorded (gzip/deflate, sampled).",
        ),
        "total_p50_us": st.column_config.NumberColumn("p50 total (µs)", format="%.1f"),
        "total_p99_us": st.column_config.NumberColumn("p99 total (µs)", format="%.1f"),
        "total_mean_us": st.column_config.NumberColumn("mean total (µs)", format="%.1f"),
    },
    key="payload_algorithms",
)
st.caption(
    "Algorithm: gRPC's own compression (`grpc.compression`: gzip, deflate) or the prediction "
    "service's payload codec (`grpc_overhead.payload.codec`: zstd, lz4, snappy); both at once "
    "read e.g. gzip+zstd. Compare algorithms at similar payloads: the scatter above shows "
    "where each one's calls lie."
)

per_algorithm = fits[(fits["phase"] == phase) & (fits["algorithm"] != payload.ALL)]
if len(per_algorithm):
    st.markdown(f"**{phase}: cost per MB per algorithm, within each method and run**")
    st.dataframe(
        per_algorithm[["service", "method", "run_id", "algorithm", "calls", "r2", "verdict"]],
        hide_index=True,
        width="stretch",
        height=charts.ALL_ROWS,
        column_config={
            "run_id": "run",
            "r2": st.column_config.NumberColumn("R²", format="%.2f"),
        },
        key="payload_algorithm_costs",
    )
