"""Overview: how many calls, how slow, and where the time goes per method and over time."""

from __future__ import annotations

import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from grpc_overhead.analyzer import status, store_size
from grpc_overhead.analyzer.insights import overview
from grpc_overhead.analyzer.insights import streams as stream_insights
from grpc_overhead.analyzer.insights.rows import STACKED_PHASES
from grpc_overhead.app import cached, charts, empty_states, formatting, sidebar

st.title("Overview")
filters = sidebar.filters()
empty_states.require_calls(filters)

statistic = st.session_state.get("overview_statistic", "mean")
answer = cached.load(overview.overview, filters, statistic)
empty_states.note_unavailable_phases(filters, overview.source_mix(answer))
summary = overview.summary(answer).iloc[0]
statuses = overview.statuses(answer)
failed = statuses[~statuses["status_code"].isin([0, status.NOT_RECORDED])]
columns = st.columns(6)
stored = int(summary["stored_calls"])
columns[0].metric(
    "Calls",
    formatting.count(summary["calls"]),
    help=None
    if stored == int(summary["calls"])
    else f"Estimated from {formatting.count(stored)} stored calls: the services sample "
    "(GRPC_OVERHEAD_SAMPLING), and each stored call stands for the calls its weight says.",
)
columns[1].metric(
    "Calls/s",
    formatting.rate(summary["calls_per_s"]),
    help="Arrival rate between the first and the last call in the selection.",
)
columns[2].metric("p50 total", formatting.duration(summary["total_p50_us"]))
columns[3].metric("p99 total", formatting.duration(summary["total_p99_us"]))
columns[4].metric(
    "Not processing",
    formatting.share(summary["not_processing_share"]),
    help=(
        "1 - Σ processing / Σ total over the calls that record every event: the share of "
        "the time callers wait that is serialization, network, queuing and the rest, "
        f"not the handler. The wire alone (request + response network) is "
        f"{formatting.share(summary['network_share'])}."
    ),
)
columns[5].metric(
    "Errors",
    formatting.share(failed["calls"].sum() / summary["calls"] if summary["calls"] else None),
    help="Calls whose gRPC status is not OK (the client's code; the server's where the "
    "client's half is missing). Calls with no recorded code count as unknown, not as errors.",
)
server_only, client_only = int(summary["server_only_calls"]), int(summary["client_only_calls"])
empty_states.one_side_caption(summary)
streams = int(summary["stream_calls"])
without_events = (
    int(summary["calls"]) - int(summary["calls_with_events"]) - server_only - client_only - streams
)
if without_events:
    calls_carry = "call carries" if without_events == 1 else "calls carry"
    st.caption(
        f"{formatting.count(without_events)} {calls_carry} no transport events (e.g. spans "
        "from plain OpenTelemetry gRPC instrumentation): they count in calls and total, "
        "not in the phase split."
    )

st.subheader("Where the time goes, per method")
statistic = st.radio(
    "Statistic",
    overview.STATISTICS,
    horizontal=True,
    key="overview_statistic",
    help="Means add up to the mean total; medians of phases do not add up to anything.",
)
by_method = overview.phases_by_method(answer)
stackable = by_method.dropna(subset=["value_us"])
if stackable.empty:
    st.info(
        "No call in the selection records transport events, so total cannot be split into "
        "phases. Instrument client and server with `grpc_overhead.instrumentation`."
    )
else:
    stackable = stackable.assign(
        label=stackable["service"] + "/" + stackable["method"],
        shown=stackable["value_us"].map(formatting.duration),
        part=stackable["share"].map(formatting.share),
    )
    figure = px.bar(
        stackable,
        x="value_us",
        y="label",
        color="phase",
        orientation="h",
        category_orders={"phase": list(STACKED_PHASES)},
        custom_data=["shown", "part", "calls_with_events"],
        labels={"value_us": f"{statistic} (µs)", "label": ""},
    )
    figure.update_traces(
        hovertemplate="%{y}<br>%{fullData.name}: %{customdata[0]} (%{customdata[1]})"
        "<br>%{customdata[2]} calls<extra></extra>"
    )
    figure.update_layout(barmode="stack")
    charts.legend_on_top(figure, 80 + 50 * stackable["label"].nunique(), title="phase")
    st.plotly_chart(figure, width="stretch", key="overview_phases_by_method")
    totals = stackable.drop_duplicates("label")[["label", "calls", "calls_with_events", "total_us"]]
    st.dataframe(
        totals.rename(columns={"label": "method", "total_us": f"{statistic} total (µs)"}),
        hide_index=True,
        width="stretch",
        height=charts.ALL_ROWS,
        column_config={
            f"{statistic} total (µs)": st.column_config.NumberColumn(format="%.1f"),
        },
    )

streams_by_method = cached.load(stream_insights.stream_methods, filters)
if not streams_by_method.empty:
    st.subheader("Streams, per message")
    st.caption(
        "A stream has no one-message-each-way split, so it is not in the bars above. Per "
        "method: the median over its calls of each call's median message serialize, "
        "transfer (the wire plus the receiver's wait to read it) and deserialize, and the "
        "handler's time per response."
    )
    parts = streams_by_method[
        streams_by_method["phase"].isin(stream_insights.MESSAGE_PHASES)
    ].dropna(subset=["p50_us"])
    parts = parts.assign(
        label=parts["service"] + "/" + parts["method"] + " (" + parts["shape"] + ")",
        shown=parts["p50_us"].map(formatting.duration),
    )
    figure = px.bar(
        parts,
        x="p50_us",
        y="phase",
        color="phase",
        facet_row="label",
        orientation="h",
        category_orders={"phase": list(stream_insights.MESSAGE_PHASES)},
        custom_data=["shown", "phase_calls"],
        labels={"p50_us": "p50 of per-call medians (µs)", "phase": ""},
    )
    figure.update_traces(
        hovertemplate="%{y}: %{customdata[0]}<br>%{customdata[1]} calls<extra></extra>"
    )
    figure.for_each_annotation(lambda a: a.update(text=a.text.split("=", 1)[-1]))
    figure.update_layout(showlegend=False, height=120 + 200 * parts["label"].nunique())
    st.plotly_chart(figure, width="stretch", key="overview_streams")
    per_call = streams_by_method.pivot_table(
        index=["service", "method", "shape", "calls", "request_messages", "response_messages"],
        columns="phase",
        values="p50_us",
    ).reset_index()
    kept = [
        column
        for column in ("time_to_first_response", "stream_duration")
        if column in per_call.columns
    ]
    st.dataframe(
        per_call[
            ["service", "method", "shape", "calls", "request_messages", "response_messages", *kept]
        ].rename(columns={name: f"{name} p50 (µs)" for name in kept}),
        hide_index=True,
        width="stretch",
        height=charts.ALL_ROWS,
        column_config={
            "request_messages": st.column_config.NumberColumn("requests/call", format="%.1f"),
            "response_messages": st.column_config.NumberColumn("responses/call", format="%.1f"),
        },
    )

st.subheader("Network over time, and all that is not processing")
timeline = overview.network_over_time(answer)
if timeline.empty:
    st.info("No call starts in the selected range.")
else:
    figure = go.Figure()
    for column, name, dash in (
        ("overhead_mean_us", "overhead (total - processing), mean", "solid"),
        ("network_mean_us", "network (request + response), mean", "solid"),
        ("network_p99_us", "network (request + response), p99", "dot"),
    ):
        figure.add_trace(
            go.Scatter(
                x=timeline["bucket_start"],
                y=timeline[column],
                name=name,
                mode="lines+markers",
                line={"dash": dash},
            )
        )
    figure.update_layout(
        yaxis_title="µs",
        xaxis_title=f"call start (UTC, {int(timeline['bucket_s'].iloc[0])} s buckets)",
    )
    charts.legend_on_top(figure, 320)
    st.plotly_chart(figure, width="stretch", key="overview_network_over_time")
    rate = px.bar(
        timeline,
        x="bucket_start",
        y="calls_per_s",
        labels={"bucket_start": "", "calls_per_s": "calls/s"},
    )
    rate.update_layout(height=220)
    st.plotly_chart(rate, width="stretch", key="overview_rate")
    st.caption(
        "request_network + response_network needs no clock agreement: it is exact even "
        "when client and server clocks disagree (see Clock offsets for each direction)."
    )

st.subheader("Calls by status code")
if statuses.empty:
    st.info("No call in the selection.")
else:
    by_code = status.overall(statuses)
    labelled = statuses.assign(
        label=statuses["service"] + "/" + statuses["method"],
        shown=statuses["share"].map(formatting.share),
    )
    codes = px.bar(
        labelled,
        x="calls",
        y="label",
        color="status",
        orientation="h",
        custom_data=["shown", "status_code"],
        category_orders={"status": list(by_code["status"])},
        labels={"label": "", "calls": "calls"},
    )
    codes.update_traces(
        hovertemplate="%{y}<br>%{fullData.name} (%{customdata[1]}): %{x} calls "
        "(%{customdata[0]})<extra></extra>"
    )
    codes.update_layout(barmode="stack")
    charts.legend_on_top(codes, 40 + 40 * labelled["label"].nunique(), title="status")
    st.plotly_chart(codes, width="stretch", key="overview_status_codes")
    st.dataframe(
        labelled[["label", "status_code", "status", "calls", "share"]].rename(
            columns={"label": "method", "status_code": "code"}
        ),
        hide_index=True,
        width="stretch",
        height=charts.ALL_ROWS,
        column_config={"share": st.column_config.NumberColumn("share", format="percent")},
        key="overview_status_table",
    )

# What keeping these calls costs, in the sidebar where it stays in view: the whole store,
# whatever the filters. Cached longer than the charts: sizes move slowly, and counting
# every call stored is a pass over all of them.
sizes = cached.load_slowly_changing(store_size.store_size)
whole = store_size.total_row(sizes)
st.sidebar.caption(
    f"**Store: {formatting.size(whole['bytes_on_disk'])}** on disk, "
    f"{formatting.size(whole['bytes_per_call'])} per call "
    f"({formatting.count(whole['calls'])} calls)"
)
with st.sidebar.expander("Store size per table"):
    st.table(
        sizes.assign(
            on_disk=sizes["bytes_on_disk"].map(formatting.size),
            uncompressed=sizes["uncompressed_bytes"].map(formatting.size),
            per_call=sizes["bytes_per_call"].map(formatting.size),
            rows=sizes["rows"].map(formatting.count),
        )[["table", "rows", "on_disk", "uncompressed", "per_call"]].set_index("table")
    )
    st.caption(
        "Active parts of every table of the store's database, compressed as stored; per "
        "call: bytes on disk over every call stored (settled and live)."
    )
