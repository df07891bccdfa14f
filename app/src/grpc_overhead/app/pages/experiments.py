"""Experiments: the cells of an experiment side by side, who wins, and which phase explains it.

Cells come from ``grpc_runs`` (``grpc-overhead experiment FILE``), with the
verdict of each against its baseline as the experiment took it (interleaved
rounds, intervals from ``analyzer.verdicts``); the two-run compare at the
bottom is ``grpc-overhead compare`` with its interval and verdict. The
experiment and the compared runs live in the URL's query parameters
(``experiment``, ``a``, ``b``), so a view can be shared.
"""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import streamlit as st

from grpc_overhead.analyzer import compare, runs
from grpc_overhead.analyzer.insights import experiments as insights
from grpc_overhead.analyzer.result_columns import CONSECUTIVE_PHASES
from grpc_overhead.app import cached, charts, formatting

st.title("Experiments")
names = cached.load(runs.experiments)
if names.empty:
    st.info(
        "No experiments in this store yet. Run one, e.g. "
        "`grpc-overhead experiment experiments/tls.yaml --store DIR`, then open the app on "
        "that store (`grpc-overhead app --store DIR`)."
    )
    st.stop()

choices = list(names["experiment"])
wanted = st.query_params.get("experiment")
experiment = st.selectbox(
    "Experiment",
    choices,
    index=choices.index(wanted) if wanted in choices else 0,
    format_func=lambda name: f"{name} ({int(names.set_index('experiment').at[name, 'runs'])} runs)",
    key="experiment_name",
)
st.query_params["experiment"] = experiment
rows = cached.load(runs.list_runs, experiment)
invocations = list(dict.fromkeys(rows["invocation"]))[::-1]  # latest first
if len(invocations) > 1:
    wanted = st.query_params.get("invocation")
    invocation = st.selectbox(
        "Run of the experiment",
        invocations,
        index=invocations.index(wanted) if wanted in invocations else 0,
        key="experiment_invocation",
    )
    st.query_params["invocation"] = invocation
    rows = rows[rows["invocation"] == invocation]
cells = insights.cells(rows)
busy = cells[cells["under_load"]]
if len(busy):
    st.warning(
        f"{len(busy)} of {len(cells)} cells ran on a busy machine (other processes' CPU, steal "
        "or a high load average; `grpc_runs.machine` says which): rerun the experiment on a "
        "quiet machine (`grpc-overhead experiment FILE --require-quiet`) before trusting "
        "small differences."
    )

columns = st.columns(4)
columns[0].metric("Cells", formatting.count(len(cells)))
columns[1].metric("Calls", formatting.count(int(cells["calls"].sum())))
columns[2].metric("Errors", formatting.count(int(cells["errors"].sum())))
columns[3].metric("Best throughput", formatting.rate(cells["calls_per_s"].max()))

st.subheader("Winners")
for winner in insights.winners(cells):
    st.markdown(f"- {winner.sentence()}")
st.info(insights.explain(cells))


def interval_texts(frame: pd.DataFrame) -> list[str]:
    """``ci_low_us`` .. ``ci_high_us`` of each row, signed µs."""
    return [
        f"{low:+,.0f} .. {high:+,.0f}"
        for low, high in zip(frame["ci_low_us"], frame["ci_high_us"], strict=True)
    ]


verdicts = insights.verdicts(cells)
if len(verdicts):
    st.subheader("Against the baseline")
    chart = verdicts.assign(
        error_plus=verdicts["ci_high_us"] - verdicts["diff_us"],
        error_minus=verdicts["diff_us"] - verdicts["ci_low_us"],
        against=verdicts["label"] + "  vs  " + verdicts["baseline"],
    )
    colors = {"faster": "#2ca02c", "slower": "#d62728", "no measurable difference": "#7f7f7f"}
    axes = {"diff_us": "p50 difference (µs), interval", "against": ""}
    figure = px.scatter(
        chart,
        x="diff_us",
        y="against",
        color="verdict",
        error_x="error_plus",
        error_x_minus="error_minus",
        color_discrete_map=colors,
        labels=axes,
    )
    figure.add_vline(x=0, line_dash="dot")
    st.plotly_chart(figure, width="stretch", key="experiments_verdicts")
    st.dataframe(
        pd.DataFrame(
            {
                "cell": verdicts["label"],
                "baseline": verdicts["baseline"],
                "verdict": verdicts["verdict"],
                "difference (µs)": verdicts["diff_us"].round(1),
                "interval (µs)": interval_texts(verdicts),
                "phase that moved": verdicts["explained_by"],
            }
        ),
        hide_index=True,
        width="stretch",
        height=charts.ALL_ROWS,
    )
    chosen = st.selectbox("Phases of", list(verdicts["label"]), key="experiments_verdict_cell")
    phases_of = insights.verdict_phases(cells, chosen)
    st.dataframe(
        pd.DataFrame(
            {
                "phase": phases_of["phase"],
                "baseline p50": phases_of["baseline_p50_us"].map(formatting.duration),
                "p50": phases_of["p50_us"].map(formatting.duration),
                "difference (µs)": phases_of["diff_us"].round(1),
                "interval (µs)": interval_texts(phases_of),
                "verdict": phases_of["verdict"],
            }
        ),
        hide_index=True,
        width="stretch",
        height=charts.ALL_ROWS,
    )
    st.caption(
        "Interval of the difference of the p50s (cell minus baseline): the rounds and their "
        "calls resampled, paired round by round, and at least the rounds' t interval; "
        "simultaneous 95 % over a comparison's phases. A verdict needs the interval to exclude "
        "0 and a move of at least 2 µs and 1 % of the baseline."
    )

st.subheader("Cells side by side")
table = pd.DataFrame(
    {
        "cell": cells["label"],
        "calls/s": cells["calls_per_s"].round(1),
        "predictions/s": cells["predictions_per_s"].round(1),
        "p50": cells["p50_us"].map(formatting.duration),
        "p99": cells["p99_us"].map(formatting.duration),
        "p50 from the spans, interval (µs)": [
            "-" if pd.isna(low) else f"{low:,.0f} .. {high:,.0f}"
            for low, high in zip(cells["total_ci_low_us"], cells["total_ci_high_us"], strict=True)
        ],
        "rounds": cells["rounds_run"],
        "busy machine": cells["under_load"].map({True: "yes", False: ""}),
        "calls": cells["calls"],
        "errors": cells["errors"],
        "run id": cells["run_id"],
    }
)
st.dataframe(table, hide_index=True, width="stretch", height=charts.ALL_ROWS)

left, right = st.columns(2)
with left:
    st.markdown("**Throughput**")
    throughput = px.bar(
        cells,
        x="calls_per_s",
        y="label",
        orientation="h",
        labels={"calls_per_s": "calls/s", "label": ""},
    )
    st.plotly_chart(throughput, width="stretch", key="experiments_throughput")
with right:
    st.markdown("**Latency (load generator's clock)**")
    latency = cells.melt(
        id_vars="label", value_vars=["p50_us", "p99_us"], var_name="quantile", value_name="µs"
    )
    latency["quantile"] = latency["quantile"].str.replace("_us", "")
    bars = px.bar(
        latency,
        x="µs",
        y="label",
        color="quantile",
        barmode="group",
        orientation="h",
        labels={"label": ""},
    )
    st.plotly_chart(bars, width="stretch", key="experiments_latency")

st.markdown("**Phases, stacked (p50 µs of each phase, from the spans)**")
present = [phase for phase in CONSECUTIVE_PHASES if f"{phase}_p50_us" in cells]
if present:
    stacked = cells.melt(
        id_vars="label",
        value_vars=[f"{phase}_p50_us" for phase in present],
        var_name="phase",
        value_name="µs",
    ).dropna()
    stacked["phase"] = stacked["phase"].str.removesuffix("_p50_us")
    phases = px.bar(
        stacked,
        x="µs",
        y="label",
        color="phase",
        orientation="h",
        category_orders={"phase": present},
        labels={"label": ""},
    )
    st.plotly_chart(phases, width="stretch", key="experiments_phases")
    st.caption(
        "Each phase's own p50: they need not add up to the total's p50 exactly "
        "(unattributed time and per-phase medians)."
    )

st.subheader("Compare two runs")
labels = dict(zip(cells["run_id"], cells["label"], strict=True))
run_ids = list(labels)
if len(run_ids) < 2:
    st.caption("One cell only: nothing to compare.")
    st.stop()


def _pick(label: str, key: str, default: int) -> str:
    wanted = st.query_params.get(key)
    index = run_ids.index(wanted) if wanted in run_ids else default
    chosen = st.selectbox(
        label, run_ids, index=index, format_func=lambda r: labels[r], key=f"experiments_{key}"
    )
    st.query_params[key] = chosen
    return chosen


left, right = st.columns(2)
with left:
    baseline = _pick("Baseline", "a", 0)
with right:
    other = _pick("Other", "b", 1)
if baseline == other:
    st.caption("Pick two different runs.")
    st.stop()
deltas = cached.load(compare.compare_stored, baseline, other)
if deltas.empty:
    st.warning("One of the runs has no traced calls in this store.")
    st.stop()
st.info(str(deltas["summary"].iloc[0]))
shown = deltas.dropna(subset=["diff_us"])
view = pd.DataFrame(
    {
        "phase": shown["phase"],
        "baseline p50": shown["baseline_p50_us"].map(formatting.duration),
        "other p50": shown["other_p50_us"].map(formatting.duration),
        "difference (µs)": shown["diff_us"].round(1),
        "interval (µs)": interval_texts(shown),
        "ratio": shown["ratio"].map(lambda r: "-" if pd.isna(r) else f"{r:.2f}x"),
        "verdict": shown["verdict"],
    }
)
st.dataframe(view, hide_index=True, width="stretch", height=charts.ALL_ROWS)
st.caption(
    "Interval of the difference of the p50s: for cells of one experiment, their rounds and "
    "calls resampled, paired round by round; for other runs, the calls within each run. "
    "Simultaneous 95 % over the phases; 'no measurable difference' when it holds 0 or the "
    "move is under 2 µs and 1 % of the baseline."
)
