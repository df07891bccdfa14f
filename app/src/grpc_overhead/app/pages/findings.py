"""Findings: what to change to make these calls faster, ranked by the time it would save."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import plotly.express as px
import streamlit as st

from grpc_overhead.analyzer.insights import findings_cards, instances, payload, phases, rows
from grpc_overhead.app import cached, charts, empty_states, formatting, navigation, sidebar

#: Findings drawn as cards with their evidence chart; the rest are a table below them.
CARDS = 3

st.title("Findings")
st.caption(
    "What to change to make these calls faster, ranked by the time it would save at p50. "
    "Every kind is checked; the ones not found say why at the bottom."
)
filters = sidebar.filters()
empty_states.require_calls(filters)
# Kinds that read a side's phases cannot see calls traced from the other side only.
sides = cached.load(rows.sides, filters).iloc[0]
empty_states.one_side_caption(sides)
answer = cached.load(findings_cards.cards, filters)
found = answer[answer["found"]].reset_index(drop=True)
checked = answer[~answer["found"]]


def _phases_chart(card: pd.Series, scoped) -> None:
    quantiles = cached.load(phases.phase_quantiles, scoped)
    table = phases.statistics(quantiles)
    wanted = [name for name in card["phases"].split(", ") if name] + ["total"]
    table = table[table["phase"].isin(wanted) & (table["calls"] > 0)]
    long = table.melt(id_vars="phase", value_vars=["p50_us", "p90_us", "p99_us"])
    long["variable"] = long["variable"].str.removesuffix("_us")
    _grouped_bars(long, ("phase", "value", "variable"), f"finding_phases_{card.name}")


def _grouped_bars(frame: pd.DataFrame, axes: tuple[str, str, str], key: str) -> None:
    """Bars of µs: ``axes`` = (category, value, series)."""
    x, y, color = axes
    figure = px.bar(
        frame, x=x, y=y, color=color, barmode="group", labels={y: "µs", x: "", color: ""}
    )
    charts.legend_on_top(figure, 300)
    st.plotly_chart(figure, width="stretch", key=key)


def _instances_chart(card: pd.Series, scoped) -> None:
    load = instances.summary(cached.load(instances.instance_load, scoped))
    figure = px.bar(
        load,
        x="instance",
        y="calls",
        color="p50_total_us",
        labels={"calls": "calls", "instance": "", "p50_total_us": "p50 total µs"},
    )
    charts.legend_on_top(figure, 300)
    st.plotly_chart(figure, width="stretch", key=f"finding_instances_{card.name}")


def _sizes_chart(card: pd.Series, scoped) -> None:
    sample = cached.load(payload.payload_sample, scoped)
    upload = card["kind"] in ("slow_upload", "compression_would_help", "compression_costs_more")
    size, phase = (
        ("request_bytes", "request_network_us")
        if upload
        else ("response_bytes", "response_network_us")
    )
    figure = px.scatter(
        sample,
        x=size,
        y=phase,
        color="algorithm",
        labels={size: f"{size.split('_')[0]} bytes", phase: f"{phase[:-3]} µs"},
    )
    charts.legend_on_top(figure, 300)
    st.plotly_chart(figure, width="stretch", key=f"finding_sizes_{card.name}")


_CHARTS = {"phases": _phases_chart, "instances": _instances_chart, "sizes": _sizes_chart}


def _evidence_chart(card: pd.Series, scoped) -> None:
    """The card's own numbers where its evidence holds them (no query), else its view's."""
    bars = findings_cards.evidence_bars(card["kind"], card["evidence"], card["phases"])
    if bars is None or bars.empty:
        _CHARTS[findings_cards.evidence_view(card["kind"])[0]](card, scoped)
        return
    _grouped_bars(bars, ("bar", "us", "series"), f"finding_evidence_{card.name}")


def _card(rank: int, card: pd.Series) -> None:
    where = f"{card['service']}/{card['method']}"
    if isinstance(card["instance"], str) and card["instance"]:
        where += f" on {card['instance']}"
    with st.container(border=True):
        st.subheader(f"{rank}. {card['kind'].replace('_', ' ')}: {where}")
        columns = st.columns(4)
        columns[0].metric("Saving at p50", formatting.duration(card["saving_p50_us"]))
        columns[1].metric("Saving at p99", formatting.duration(card["saving_p99_us"]))
        columns[2].metric("Confidence", card["confidence"])
        columns[3].metric("Calls", formatting.count(int(card["calls"])))
        st.caption(card["saving_basis"])
        st.markdown(f"**What to change.** {card['action']}")
        st.markdown("**How to verify it.**")
        st.code(card["verify"], language="text")
        page = findings_cards.evidence_view(card["kind"])[1]
        _evidence_chart(card, replace(filters, service=card["service"], method=card["method"]))
        with st.expander("Evidence and the query behind it"):
            evidence = json.loads(card["evidence"])
            st.dataframe(
                pd.DataFrame(
                    {"value": [json.dumps(v) for v in evidence.values()]}, index=list(evidence)
                ),
                width="stretch",
            )
            st.code(card["sql"] or "-- no query for this kind", language="sql")
            st.caption(f"Parameters: {card['parameters']}")
        st.page_link(
            f"pages/{navigation.script(page)}",
            label=f"The rest on {navigation.title(page)}",
            query_params={
                "method": f"{card['service']}/{card['method']}",
                **({"run": filters.run_id} if filters.run_id else {}),
            },
        )


if found.empty:
    st.success(
        "No finding: every kind below was checked on these calls and none would save time. "
        "Try a longer time range or another method if that is unexpected."
    )
else:
    saving = found[(found["saving_p50_us"] > 0) | (found["saving_p99_us"] > 0)]
    labels = saving["kind"].str.replace("_", " ") + " · " + saving["method"]
    bars = pd.DataFrame(
        {"finding": labels, "p50": saving["saving_p50_us"], "p99": saving["saving_p99_us"]}
    ).iloc[::-1]
    figure = px.bar(
        bars,
        x=["p50", "p99"],
        y="finding",
        orientation="h",
        barmode="group",
        labels={"value": "time it would save, µs", "finding": "", "variable": ""},
    )
    if len(bars):
        charts.legend_on_top(figure, 80 + 40 * len(bars))
        st.plotly_chart(figure, width="stretch", key="findings_savings")
    for index, card in found.head(CARDS).iterrows():
        _card(int(index) + 1, card)
    if len(found) > CARDS:
        st.subheader("More findings")
        st.dataframe(
            found.iloc[CARDS:][
                [
                    "kind",
                    "service",
                    "method",
                    "instance",
                    "saving_p50_us",
                    "saving_p99_us",
                    "confidence",
                    "action",
                ]
            ],
            width="stretch",
            hide_index=True,
            height=charts.ALL_ROWS,
        )

st.subheader("Checked, not found")
st.dataframe(checked[["kind", "why_not"]], width="stretch", hide_index=True, height=charts.ALL_ROWS)
