"""Clock offsets: per (client host, server host) pair over time, with the uncertainty that
bounds them, and which calls they corrected."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st
from plotly.colors import hex_to_rgb

from grpc_overhead.analyzer.clock_offsets import ClockOptions
from grpc_overhead.analyzer.insights import clock_offsets
from grpc_overhead.app import cached, charts, empty_states, formatting, sidebar

#: Estimation window lengths offered; 60 s is the default the rollups keep.
WINDOWS_S = {10: "10 s", 60: "1 min", 300: "5 min", 900: "15 min"}
PALETTE = px.colors.qualitative.Plotly


def translucent(color: str) -> str:
    """A palette colour as the pale fill of its error band."""
    red, green, blue = hex_to_rgb(color)
    return f"rgba({red},{green},{blue},0.2)"


def band_edge(part: pd.DataFrame, column: str, pair: str, **fill: str) -> go.Scatter:
    """One edge of a pair's ± band: a line-less trace; the low edge fills up to the high one."""
    return go.Scatter(
        x=part["window_start"],
        y=part[column],
        mode="lines",
        line={"width": 0},
        legendgroup=pair,
        showlegend=False,
        hoverinfo="skip",
        **fill,
    )


st.title("Clock offsets")
filters = sidebar.filters()
empty_states.require_calls(filters)

window_s = st.selectbox(
    "Estimation window",
    list(WINDOWS_S),
    index=1,
    format_func=WINDOWS_S.__getitem__,
    help="Each window's estimate is its tightest call (smallest round trip). Longer windows "
    "find tighter calls; shorter ones follow drift. 1 min reads settled minutes from rollups.",
)
options = ClockOptions(window=timedelta(seconds=window_s))
timeline = cached.load(clock_offsets.offset_timeline, filters, options)

if timeline.empty:
    st.info(
        "No call in the selection has both its client and server span yet, so no clock "
        "offset can be estimated. Instrument both sides and send both to the intake."
    )
    st.stop()

# Pairs of two clocks: calls with both halves (one-sided calls have no pair).
counts = cached.load(clock_offsets.window_calls, filters, options)
pairs = clock_offsets.pairs(timeline, counts)

cross = pairs[pairs["client_host"] != pairs["server_host"]]
columns = st.columns(4)
columns[0].metric("Host pairs", formatting.count(len(pairs)))
columns[1].metric("Cross-host pairs", formatting.count(len(cross)))
columns[2].metric("Calls corrected", formatting.count(pairs["corrected"].sum()))
columns[3].metric(
    "Largest |offset|",
    formatting.duration(cross["offset_us"].abs().max() if len(cross) else 0.0),
    help="Of the pairs' best estimates. Within one host the clock is shared: exactly 0.",
)
st.caption(
    "offset = how far the server's clock is ahead of the client's, estimated the NTP way from "
    "the call with the smallest round trip. The band is ± half that round trip: the true "
    "offset is guaranteed inside it, because path asymmetry and clock offset cannot be told "
    "apart without a shared clock. request_network + response_network is exact regardless."
)

st.subheader("Offset over time")
show_same = st.toggle("Include same-host pairs (always 0 ± 0)", value=cross.empty)
shown = timeline if show_same else timeline[timeline["client_host"] != timeline["server_host"]]
figure = go.Figure()
for index, (pair, part) in enumerate(shown.groupby("pair", sort=True)):
    color = PALETTE[index % len(PALETTE)]
    figure.add_trace(band_edge(part, "high_us", pair))
    figure.add_trace(band_edge(part, "low_us", pair, fill="tonexty", fillcolor=translucent(color)))
    figure.add_trace(
        go.Scatter(
            x=part["window_start"],
            y=part["offset_us"],
            mode="lines+markers",
            name=pair,
            legendgroup=pair,
            line={"color": color},
            customdata=part[["uncertainty_us", "calls"]],
            hovertemplate=f"{pair}<br>%{{x}}<br>offset %{{y:.1f}} µs ± %{{customdata[0]:.1f}} µs"
            "<br>%{customdata[1]} complete calls<extra></extra>",
        )
    )
figure.update_layout(yaxis_title="server clock ahead by (µs)", height=380, margin={"t": 20})
st.plotly_chart(figure, width="stretch", key="clock_offsets_timeline")

st.subheader("Per pair")
st.dataframe(
    pairs,
    hide_index=True,
    width="stretch",
    height=charts.ALL_ROWS,
    column_config={
        "offset_us": st.column_config.NumberColumn("offset (µs)", format="%.1f"),
        "uncertainty_us": st.column_config.NumberColumn("± (µs)", format="%.1f"),
        "offset_min_us": st.column_config.NumberColumn("min window (µs)", format="%.1f"),
        "offset_max_us": st.column_config.NumberColumn("max window (µs)", format="%.1f"),
        "from_own_window": st.column_config.NumberColumn(
            "own window", help="corrected with their own window's estimate"
        ),
        "from_pair": st.column_config.NumberColumn(
            "pair best", help="their window had no estimate: the pair's best window was used"
        ),
        "uncorrected": st.column_config.NumberColumn(
            "uncorrected", help="no estimate for the pair at all: shown raw only"
        ),
    },
)

st.subheader("Which calls were corrected")
if cross.empty:
    st.info(
        "Every call stayed within one clock domain (same host): raw timestamps are exact and "
        "nothing needed correcting."
    )
    st.stop()
corrections = cross[["pair", "from_own_window", "from_pair", "uncorrected"]].melt(
    id_vars=["pair"],
    value_vars=["from_own_window", "from_pair", "uncorrected"],
    var_name="how",
    value_name="calls",
)
bars = px.bar(
    corrections,
    x="calls",
    y="pair",
    color="how",
    orientation="h",
    labels={"pair": "", "how": ""},
)
charts.legend_on_top(bars, 60 + 40 * len(cross))
st.plotly_chart(bars, width="stretch", key="clock_offsets_corrected")

window_start = clock_offsets.latest_corrected_window(counts)
if window_start is not None:
    sample = cached.load(clock_offsets.corrected_calls, filters, options, window_start=window_start)
    st.markdown(
        f"**Corrected calls of the most recent window ({window_start:%Y-%m-%d %H:%M:%S} UTC)**"
    )
    sample = sample.assign(explore="explorer?trace=" + sample["trace_id"])
    st.dataframe(
        sample,
        hide_index=True,
        width="stretch",
        height=charts.ALL_ROWS,
        column_config={
            "explore": st.column_config.LinkColumn("waterfall", display_text="open"),
            **{
                column: st.column_config.NumberColumn(
                    column.removesuffix("_us") + " (µs)", format="%.1f"
                )
                for column in sample.columns
                if column.endswith("_us")
            },
        },
    )
