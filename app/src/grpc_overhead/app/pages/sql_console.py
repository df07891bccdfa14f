"""SQL: a read-only console over the store, with example queries and CSV download.

The text typed here goes unchanged to the analyzer (``sql_console.run``), which
runs it read-only under a row limit; the page builds no SQL.
"""

from __future__ import annotations

import streamlit as st

from grpc_overhead.analyzer.insights import sql_console
from grpc_overhead.app import cached, formatting

st.title("SQL")
served = cached.source()
examples = sql_console.examples(served.options)
CHOOSE = "(pick an example)"


def use_example() -> None:
    """Copy the chosen example into the editor (a callback runs before the rerun draws it)."""
    choice = st.session_state["sql_example"]
    if choice in examples:
        st.session_state["sql_text"] = examples[choice]


st.caption(
    "ClickHouse SQL over `grpc_call_phases` (one row per call, every phase as `<phase>_us` in "
    "µs, NULL where undefined; no `FINAL` needed), `otel_traces` (spans as the collector's "
    "exporter writes them) and `grpc_calls` (the raw call halves, merged only with `FINAL`). "
    "Read-only, enforced by the "
    f"engine, with limits ({sql_console.page_limits()}): statements that change data, "
    "settings or other queries are refused, and a query stops when you leave the page."
)
st.selectbox("Examples", [CHOOSE, *examples], key="sql_example", on_change=use_example)
st.session_state.setdefault("sql_text", next(iter(examples.values())))
with st.form("sql_form"):
    text = st.text_area("Query", key="sql_text", height=180)
    limit = st.number_input(
        "Row limit", min_value=1, max_value=sql_console.MAX_LIMIT, value=sql_console.DEFAULT_LIMIT
    )
    submitted = st.form_submit_button("Run", type="primary")
if submitted:
    st.session_state["sql_ran"] = (text, int(limit))

ran = st.session_state.get("sql_ran")
if ran is None:
    st.info("Write a query or pick an example, then Run.")
    st.stop()
statement, row_limit = ran
result = cached.load(
    sql_console.run, statement, limit=row_limit, **{cached.OWNER: cached.session_id()}
)
rows = formatting.count(len(result))
if result.attrs.get(sql_console.TRUNCATED):
    st.warning(f"Showing the first {rows} rows: the query returned more. Raise the row limit.")
else:
    st.caption(f"{rows} rows")
shown = sql_console.displayable(result)
st.dataframe(shown, hide_index=True, width="stretch")
st.download_button(
    "Download CSV",
    shown.to_csv(index=False),
    file_name="grpc-overhead-query.csv",
    mime="text/csv",
    on_click="ignore",
)
