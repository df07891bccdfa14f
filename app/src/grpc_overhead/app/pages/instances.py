"""Instances: calls and latency per server instance over time. Does the load spread evenly?"""

from __future__ import annotations

import math

import plotly.express as px
import streamlit as st

from grpc_overhead.analyzer.insights import instances
from grpc_overhead.app import cached, charts, empty_states, formatting, sidebar

#: Above this max/mean ratio the page points at connection reuse.
UNEVEN = 1.5

st.title("Instances")
filters = sidebar.filters()
empty_states.require_calls(filters)

load = cached.load(instances.instance_load, filters)
summary = instances.summary(load)
timeline = instances.timeline(load)
imbalance = instances.imbalance(load)
together = instances.concurrent(load)
worst = together.iloc[0] if len(together) else None

columns = st.columns(5)
columns[0].metric("Server instances", formatting.count(len(summary)))
columns[1].metric("Calls", formatting.count(summary["calls"].sum()))
columns[2].metric(
    "Imbalance (max / mean)",
    formatting.MISSING if math.isnan(imbalance) else f"{imbalance:.2f}",
    help="Calls of the busiest instance against the mean per instance over the whole range "
    "(instances that ran one after another count too): 1.00 is perfectly even.",
)
columns[3].metric(
    "Imbalance serving together",
    formatting.MISSING if worst is None else f"{worst['imbalance']:.2f}",
    help="The same ratio among instances of one service, reached through the same address, "
    "over the time they served side by side; n/a when no two of them did.",
)
columns[4].metric("Busiest instance", formatting.share(summary["share"].max()))
if worst is not None and worst["imbalance"] >= UNEVEN:
    dialled = f" through {worst['dialled']}" if worst["dialled"] else ""
    st.warning(
        f"Load is uneven: while {worst['instances']} instances of {worst['server_service']} "
        f"served side by side{dialled} ({formatting.duration(worst['shared_s'] * 1e6)}), "
        f"{worst['busiest']} took {formatting.share(worst['busiest_share'])} of their calls, "
        f"{worst['imbalance']:.2f} times the mean. gRPC keeps each channel on one HTTP/2 "
        "connection, so clients that connected before a deploy or a scale-out stay on the "
        "old instances; recycle connections (server option `grpc.max_connection_age_ms`) or "
        "balance per call (`round_robin`)."
    )
elif len(summary) > 1 and imbalance >= UNEVEN:
    st.caption(
        "Calls differ between instances, but not among instances serving the same clients at "
        "the same time (they ran one after another, or the clients dialled each instance "
        "itself): no connection-balancing problem."
    )

if not timeline.empty:
    bucket = formatting.duration(int(timeline["bucket_s"].iloc[0]) * 1e6)
    st.subheader(f"Share of calls per instance ({bucket} buckets)")
    share = px.area(
        timeline,
        x="bucket_start",
        y="share",
        color="instance",
        labels={"bucket_start": "", "share": "share of calls"},
        custom_data=["calls"],
    )
    share.update_traces(hovertemplate="%{fullData.name}: %{y:.1%} (%{customdata[0]} calls)")
    share.update_yaxes(tickformat=".0%", range=[0, 1])
    charts.legend_on_top(share, 320)
    st.plotly_chart(share, width="stretch", key="instances_share")

    left, right = st.columns(2)
    with left:
        st.markdown("**p99 total per instance**")
        latency = px.line(
            timeline.dropna(subset=["p99_total_us"]),
            x="bucket_start",
            y="p99_total_us",
            color="instance",
            markers=True,
            labels={"bucket_start": "", "p99_total_us": "p99 total (µs)"},
        )
        charts.legend_on_top(latency, 320)
        st.plotly_chart(latency, width="stretch", key="instances_p99")
    with right:
        st.markdown("**Imbalance over time (max / mean calls)**")
        per_bucket = timeline.drop_duplicates("bucket_start")
        spread = px.line(
            per_bucket,
            x="bucket_start",
            y="imbalance",
            markers=True,
            labels={"bucket_start": "", "imbalance": "max / mean"},
        )
        spread.add_hline(y=1, line_dash="dot", annotation_text="even")
        st.plotly_chart(spread, width="stretch", key="instances_imbalance")

st.subheader("Per instance")
st.dataframe(
    summary,
    hide_index=True,
    width="stretch",
    height=charts.ALL_ROWS,
    column_config={
        "share": st.column_config.NumberColumn("share", format="percent"),
        "load_ratio": st.column_config.NumberColumn(
            "load / mean", format="%.2f", help="1.00 = a fair share"
        ),
        "calls_per_s": st.column_config.NumberColumn("calls/s", format="%.1f"),
        "p50_total_us": st.column_config.NumberColumn("p50 total (µs)", format="%.0f"),
        "p99_total_us": st.column_config.NumberColumn("p99 total (µs)", format="%.0f"),
        "p50_server_duration_us": st.column_config.NumberColumn("p50 server (µs)", format="%.0f"),
        "p99_server_duration_us": st.column_config.NumberColumn("p99 server (µs)", format="%.0f"),
    },
)
st.caption(
    "An instance is the server span's `service.instance.id` (else its `host.name`); calls "
    "whose server span never arrived are listed under the address the client dialled."
)
