"""Phases: each phase's quantiles and distribution, and what the slowest calls spend time on."""

from __future__ import annotations

import math

import plotly.express as px
import streamlit as st

from grpc_overhead.analyzer.insights import phases, rows
from grpc_overhead.analyzer.insights.rows import STACKED_PHASES
from grpc_overhead.app import cached, charts, empty_states, formatting, sidebar

st.title("Phases")
filters = sidebar.filters()
empty_states.require_calls(filters)
empty_states.note_unavailable_phases(filters)

quantiles = cached.load(phases.phase_quantiles, filters)
sides = cached.load(rows.sides, filters).iloc[0]
empty_states.one_side_caption(sides)
table = phases.statistics(quantiles)
recorded = table[table["calls"] > 0]

st.subheader("Per phase")
st.dataframe(
    table,
    hide_index=True,
    width="stretch",
    height=charts.ALL_ROWS,
    column_config={
        "phase": "phase",
        "calls": st.column_config.NumberColumn("calls", help="Calls that record this phase."),
        **{
            column: st.column_config.NumberColumn(column.replace("_us", " (µs)"), format="%.1f")
            for column in ("p50_us", "p90_us", "p99_us", "mean_us")
        },
    },
)
st.caption(
    "Quantiles are t-digest estimates (as in `grpc-overhead report`); one-way network phases "
    "are raw: their sum is exact whatever the clocks do, each direction is corrected on the "
    "Clock offsets page. unattributed = total - the consecutive phases, shown, never hidden."
)

st.subheader("Distributions")
default = [name for name in (*STACKED_PHASES[:-1], "total") if name in set(recorded["phase"])]
chosen = st.multiselect(
    "Phases", list(phases.SHOWN_PHASES), default=default, key="phases_ecdf_phases"
)
curves = quantiles[quantiles["phase"].isin(chosen) & (quantiles["calls"] > 0)]
if curves.empty:
    st.info("None of the chosen phases is recorded by the selected calls.")
else:
    log_x = bool((curves["value_us"] > 0).all())
    ecdf = px.line(
        curves,
        x="value_us",
        y="level",
        color="phase",
        log_x=log_x,
        category_orders={"phase": list(phases.SHOWN_PHASES)},
        labels={"value_us": "µs" + (" (log)" if log_x else ""), "level": "share of calls ≤ x"},
    )
    st.plotly_chart(ecdf, width="stretch", key="phases_ecdf")

histogram_phase = st.selectbox(
    "Histogram of",
    list(recorded["phase"]) or ["total"],
    index=list(recorded["phase"]).index("total") if "total" in set(recorded["phase"]) else 0,
    key="phases_histogram_phase",
)
levels = quantiles[quantiles["phase"] == histogram_phase].set_index("level")["value_us"]
low = levels.get(0.001, math.nan)
high = levels.get(0.999, math.nan)
if math.isfinite(low) and math.isfinite(high):
    low = max(low, 1.0)  # log bins start above zero; smaller values land in the first bin
    high = max(high * 1.001, low * 10)
    bins = cached.load(phases.phase_histogram, filters, histogram_phase, low, high, 40)
    bins = bins.assign(
        bin_label=[
            f"{formatting.duration(a)} to {formatting.duration(b)}"
            for a, b in zip(bins["lower_us"], bins["upper_us"], strict=True)
        ]
    )
    histogram = px.bar(
        bins,
        x="bin_label",
        y="calls",
        hover_data={"share": ":.2%"},
        labels={"bin_label": f"{histogram_phase} (log-spaced bins)", "calls": "calls"},
    )
    histogram.update_layout(bargap=0.05)
    st.plotly_chart(histogram, width="stretch", key="phases_histogram")

st.subheader("The tail: the slowest 1 % next to the median call")
tail = cached.load(phases.tail, filters)
if tail.empty:
    st.info(
        "The tail comparison needs calls that record every event (the phases then add up "
        "to total); none in the selection does."
    )
else:
    total = tail[tail["phase"] == "total"].iloc[0]
    parts = tail[tail["phase"] != "total"]
    top = parts.sort_values("extra_us", ascending=False).iloc[0]
    st.markdown(
        f"The slowest 1 % ({formatting.count(total['slowest_calls'])} calls, total ≥ "
        f"{formatting.duration(total['slowest_from_us'])}) take "
        f"**{formatting.duration(total['slowest_us'])}** on average, against "
        f"**{formatting.duration(total['median_us'])}** for the "
        f"{formatting.count(total['median_calls'])} calls around the median: "
        f"{formatting.duration(total['extra_us'])} more, of which "
        f"**{formatting.share(top['extra_share'])} is {top['phase']}**."
    )
    long = parts.melt(
        id_vars="phase",
        value_vars=["median_us", "slowest_us"],
        var_name="calls",
        value_name="mean_us",
    ).replace({"calls": {"median_us": "around the median", "slowest_us": "slowest 1 %"}})
    comparison = px.bar(
        long,
        x="mean_us",
        y="calls",
        color="phase",
        orientation="h",
        category_orders={"phase": list(STACKED_PHASES)},
        labels={"mean_us": "mean (µs)", "calls": ""},
    )
    comparison.update_layout(barmode="stack")
    charts.legend_on_top(comparison, 180, title="phase")
    st.plotly_chart(comparison, width="stretch", key="phases_tail")
    st.dataframe(
        tail[["phase", "median_us", "slowest_us", "extra_us", "extra_share"]],
        hide_index=True,
        width="stretch",
        height=charts.ALL_ROWS,
        column_config={
            "median_us": st.column_config.NumberColumn("median calls (µs)", format="%.1f"),
            "slowest_us": st.column_config.NumberColumn("slowest 1 % (µs)", format="%.1f"),
            "extra_us": st.column_config.NumberColumn("extra (µs)", format="%.1f"),
            "extra_share": st.column_config.NumberColumn("share of the extra", format="percent"),
        },
    )
