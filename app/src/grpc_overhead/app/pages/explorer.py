"""Call explorer: find calls, then see one as a waterfall of its events, raw and corrected.

The selected call lives in the URL (``?trace=<id>&span=<client span id>``),
so a view of one call can be shared as a link.
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from grpc_overhead.analyzer.insights import explorer, sources, streams
from grpc_overhead.analyzer.stream_phases import STREAM_CALL_TYPES
from grpc_overhead.app import cached, charts, empty_states, formatting, sidebar

ORDER_LABELS = {"slowest": "Slowest first", "recent": "Most recent first"}
#: Lanes bottom-up (plotly draws the first category at the bottom): client on top.
LANE_ORDER = ["server", "network", "client"]

st.title("Call explorer")
filters = sidebar.filters()
empty_states.require_calls(filters)
params = st.query_params

# -- find ---------------------------------------------------------------------------------------
with st.expander("Search", expanded=True):
    left, middle, right = st.columns(3)
    min_ms = left.number_input("Total at least (ms)", min_value=0.0, value=0.0, step=1.0)
    max_ms = middle.number_input(
        "Total at most (ms, 0 = no limit)", min_value=0.0, value=0.0, step=1.0
    )
    order = right.radio(
        "Order", list(ORDER_LABELS), format_func=ORDER_LABELS.__getitem__, horizontal=True
    )
    limit = st.select_slider("Calls listed", options=[20, 50, 100, 200, 500, 1000], value=100)

found = cached.load(
    explorer.find_calls,
    filters,
    min_total_us=min_ms * 1000 if min_ms > 0 else None,
    max_total_us=max_ms * 1000 if max_ms > 0 else None,
    order=order,
    limit=limit,
)
if found.empty:
    st.info("No call matches these latency bounds. Lower 'at least' or raise 'at most'.")
else:
    st.caption(f"{len(found)} calls, {ORDER_LABELS[order].lower()}. Select a row to see the call.")
picked = st.dataframe(
    found,
    hide_index=True,
    width="stretch",
    on_select="rerun",
    selection_mode="single-row",
    key="explorer_calls",
    column_config={
        f"{name}_us": st.column_config.NumberColumn(f"{name} (µs)", format="%.0f")
        for name in explorer.FOUND_PHASES
    },
)

# -- select: a picked row, a pasted id, or the URL ---------------------------------------------
trace = params.get("trace", "")
span = params.get("span", "")
rows = list(getattr(getattr(picked, "selection", None), "rows", None) or [])
if rows and rows[0] < len(found):
    row = found.iloc[rows[0]]
    choice = f"{row['trace_id']}/{row['client_span_id']}"
    if choice != st.session_state.get("explorer_last_pick"):
        st.session_state["explorer_last_pick"] = choice
        trace, span = str(row["trace_id"]), str(row["client_span_id"])
typed = st.text_input("Trace id", value=trace, placeholder="32 hexadecimal digits")
if typed.strip().lower() != trace:
    trace, span = typed.strip().lower(), ""
if trace:
    params["trace"] = trace
    if span:
        params["span"] = span
    elif "span" in params:
        del params["span"]
else:
    for key in ("trace", "span"):
        if key in params:
            del params[key]
    st.info("Pick a call in the table (or paste a trace id) to see its waterfall.")
    st.stop()

# -- one call -----------------------------------------------------------------------------------
summary = cached.load(explorer.call_summary, trace, span)
if summary.empty:
    st.warning(
        f"No gRPC call with trace id {trace} is stored. Check the id (the lookup covers "
        "the whole store, whatever the sidebar filters say)."
    )
    st.stop()
call = summary.iloc[0]
offset = call["clock_offset_us"]
offset = None if pd.isna(offset) else float(offset)

st.subheader(f"{call['service']}/{call['method']}")
st.caption(
    f"trace {call['trace_id']} · client span {call['client_span_id']} · "
    f"{call['client_host']} → {call['server_host'] or call['server_instance'] or '?'} · "
    f"started {call['start']}"
)


def _side(side: str) -> str:
    language = call[f"{side}_language"] or "?"
    if not call[f"{side}_source"]:
        return f"{side}: no span"
    return f"{side}: {language}, {call[f'{side}_source']} (scope {call[f'{side}_scope'] or '?'})"


attempts = int(call["client_attempts"] or 0)
st.caption(
    " · ".join([_side("client"), _side("server")])
    + (f" · {attempts} attempts (retries or hedges of this one call)" if attempts > 1 else "")
)
stream = call["call_type"] in STREAM_CALL_TYPES or pd.notna(call["stream_duration_us"])
metrics = st.columns(6)
metrics[0].metric("Total", formatting.duration(call["total_us"]))
if stream:
    metrics[1].metric(
        "Time to first response",
        formatting.duration(call["time_to_first_response_us"]),
        help="Client span start -> the first response deserialized by the client.",
    )
    metrics[2].metric(
        "Stream duration",
        formatting.duration(call["stream_duration_us"]),
        help="The client's first message event -> its last.",
    )
else:
    metrics[1].metric("Processing", formatting.duration(call["processing_us"]))
    # The wire is the two network phases; total - processing (the seed's "network
    # overhead") also holds queuing, (de)serialization and dispatch, so it is labelled
    # as what it is.
    metrics[2].metric(
        "Network",
        formatting.duration(call["request_network_us"] + call["response_network_us"]),
        help="request_network + response_network: the time on the wire both ways, exact "
        "whatever the clocks do (each direction alone needs the clock offset).",
    )
    metrics[3].metric(
        "Not processing",
        formatting.duration(call["network_overhead_us"]),
        help="total - processing (the phase network_overhead, the seed article's "
        "definition): network, but also queuing, (de)serialization and dispatch waits; "
        "the phases below say which.",
    )
metrics[4].metric("Server residence", formatting.duration(call["server_residence_us"]))
uncertainty = call["clock_uncertainty_us"]
metrics[5].metric(
    "Clock offset",
    formatting.duration(offset),
    help=(
        f"Server clock ahead of the client's by this much, ± "
        f"{formatting.duration(uncertainty)} (estimate: {call['clock_estimate']}). "
        "The corrected view subtracts it from every server time."
    ),
)
jaeger = cached.source().jaeger_url
if jaeger:
    st.link_button("Open the trace in Jaeger", f"{jaeger.rstrip('/')}/trace/{call['trace_id']}")

waterfall = cached.load(
    explorer.call_waterfall, trace, str(call["client_span_id"]), offset, call["server_dispatch_us"]
)

#: By name, so a phase added to the consecutive phases needs only its own line here
#: (one without a colour is drawn in plotly's default).
PHASE_COLORS = {
    "client_serialize": "#4c78a8",
    "client_connect": "#bab0ac",
    "request_network": "#f58518",
    "server_dispatch": "#9d755d",
    "server_queue": "#e45756",
    "request_deserialize": "#72b7b2",
    "server_interceptors": "#8c6d31",
    "processing": "#54a24b",
    "post_processing": "#88d27a",
    "response_serialize": "#eeca3b",
    "response_network": "#b279a2",
    "client_dispatch": "#d37295",
    "client_deserialize": "#ff9da6",
}


MESSAGE_COLORS = {"serialize": "#4c78a8", "transfer": "#f58518", "deserialize": "#54a24b"}


def message_figure(frame: pd.DataFrame) -> go.Figure:
    """A stream's messages, one row each (requests first), their parts as bars in time."""
    figure = go.Figure()
    for part, color in MESSAGE_COLORS.items():
        rows = frame[frame["part"] == part]
        figure.add_trace(
            go.Bar(
                y=rows["message"],
                x=rows["duration_us"],
                base=rows["start_us"],
                orientation="h",
                name=part,
                marker_color=color,
                customdata=rows[["duration_us"]],
                hovertemplate=f"%{{y}} {part}: %{{customdata[0]:.1f}} µs"
                " from %{base:.1f} µs<extra></extra>",
            )
        )
    order = list(dict.fromkeys(frame["message"]))
    figure.update_yaxes(categoryorder="array", categoryarray=order[::-1])
    figure.update_xaxes(title_text="µs since the client span started")
    figure.update_layout(barmode="overlay", height=120 + 22 * len(order), margin={"t": 30, "b": 10})
    return figure


def waterfall_figure(frame: pd.DataFrame, offset_us: float | None) -> go.Figure:
    """Two timelines side by side, lanes client/network/server: spans as pale bars,
    phases as coloured segments, events as markers."""
    corrected_title = (
        "Clock-corrected (no estimate)"
        if offset_us is None
        else f"Clock-corrected (server minus {formatting.duration(offset_us)})"
    )
    figure = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        horizontal_spacing=0.04,
        subplot_titles=("Raw clocks", corrected_title),
    )
    for column, view in enumerate(("raw", "corrected"), start=1):
        part = frame[frame["view"] == view]
        spans = part[part["kind"] == "span"]
        figure.add_trace(
            go.Bar(
                y=spans["lane"],
                x=spans["end_us"] - spans["start_us"],
                base=spans["start_us"],
                orientation="h",
                marker_color="rgba(150,150,150,0.25)",
                width=0.9,
                name="span",
                showlegend=False,
                hovertemplate="%{y} span: %{base:.1f} µs, %{x:.1f} µs long<extra></extra>",
            ),
            row=1,
            col=column,
        )
        phases = part[part["kind"] == "phase"]
        for phase in phases.itertuples(index=False):
            figure.add_trace(
                go.Bar(
                    y=[phase.lane],
                    x=[phase.end_us - phase.start_us],
                    base=[phase.start_us],
                    orientation="h",
                    width=0.5,
                    name=phase.name,
                    legendgroup=phase.name,
                    showlegend=column == 1,
                    marker_color=PHASE_COLORS.get(phase.name),
                    hovertemplate=f"{phase.name}: %{{x:.1f}} µs<extra></extra>",
                ),
                row=1,
                col=column,
            )
        events = part[part["kind"] == "event"]
        figure.add_trace(
            go.Scatter(
                y=events["lane"],
                x=events["start_us"],
                mode="markers",
                marker={"symbol": "line-ns-open", "size": 18, "color": "black"},
                name="event",
                showlegend=column == 1,
                customdata=events[["name", "detail"]],
                hovertemplate="%{customdata[0]} at %{x:.1f} µs %{customdata[1]}<extra></extra>",
            ),
            row=1,
            col=column,
        )
        figure.update_xaxes(title_text="µs since the client span started", row=1, col=column)
    figure.update_yaxes(categoryorder="array", categoryarray=LANE_ORDER)
    figure.update_layout(barmode="overlay", height=360, margin={"t": 40, "b": 10})
    return figure


st.plotly_chart(waterfall_figure(waterfall, offset), width="stretch", key="explorer_waterfall")
if stream:
    st.caption(
        "A stream: the phases that assume one message each way are undefined for it, so the "
        "waterfall shows its spans and events only; its messages are below."
    )
    st.markdown("**Messages**")
    timeline = cached.load(streams.message_timeline, trace, str(call["client_span_id"]))
    if timeline.empty:
        st.info("No message events are stored for this call.")
    else:
        st.plotly_chart(message_figure(timeline), width="stretch", key="explorer_message_timeline")
        st.caption(
            "Each message, paired across client and server by its message id, on the client's "
            "clock (server times less the clock offset): serialize on the sender, transfer "
            "(the wire plus the receiver's wait to read it), deserialize on the receiver."
        )
if not (waterfall["kind"] == "event").any():
    st.caption(
        "No span events are stored for this call (spans from plain OpenTelemetry "
        "instrumentation, or expired from otel_traces): spans and phases only."
    )
    if offset is not None and call["client_domain"] != call["server_domain"]:
        st.caption(
            "Raw: each side's own clock. Corrected: the server's times minus the estimated "
            f"offset ({formatting.duration(offset)} ± {formatting.duration(uncertainty)}). "
            "Only request_network and response_network change; their sum is exact either way."
        )

RAW_AND_CORRECTED = {
    "raw_us": st.column_config.NumberColumn("raw (µs)", format="%.1f"),
    "corrected_us": st.column_config.NumberColumn("corrected (µs)", format="%.1f"),
}
left, right = st.columns(2)
with left:
    st.markdown("**Phases**")
    st.dataframe(
        explorer.phase_table(summary),
        hide_index=True,
        width="stretch",
        height=charts.ALL_ROWS,
        column_config=RAW_AND_CORRECTED,
    )
with right:
    st.markdown("**Events**")
    st.dataframe(
        explorer.event_table(waterfall),
        hide_index=True,
        width="stretch",
        height=charts.ALL_ROWS,
        column_config=RAW_AND_CORRECTED,
    )
with st.expander(
    "Where each phase comes from",
    expanded=call["client_source"] != call["server_source"]
    or call["client_source"] != "grpc-overhead",
):
    origins = sources.call_sources(call)
    st.dataframe(
        origins,
        hide_index=True,
        width="stretch",
        height=charts.ALL_ROWS,
        column_config={"value_us": st.column_config.NumberColumn("value (µs)", format="%.1f")},
    )
    st.caption(
        "Each side's events decide which phases a call has: gRPC's own tracing (A72) and "
        "semconv message events mark one moment per message (after serialization when sent; "
        "after deserialization when read, except grpc-java's, before it), so the finer "
        "phases of our instrumentation are empty for them and the coarser ones are shown. "
        "A network phase is never shown negative: where a call's events cannot bound it "
        "(e.g. a grpc-go or grpc-java client sends the headers before serializing), it is "
        "empty and the reason is given."
    )
if not math.isnan(call["unattributed_us"]) and call["call_type"] not in ("", "unary_unary"):
    st.caption(
        "A streaming call: phases are those of the first message each way; the time between "
        "messages is in unattributed."
    )
