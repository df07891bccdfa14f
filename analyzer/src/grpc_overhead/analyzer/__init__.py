"""The analyzer: a library that turns stored spans into calls, phases and answers.

``store`` (the one small contract over chDB and ClickHouse server), ``schema``
and ``intake`` (spans in), ``calls``/``phases``/``rollup``/``clock_offsets``
(the per-call query and its aggregates), ``insights`` (one module per app
page, each answer a DataFrame) and ``report``. It imports neither the app nor
Streamlit nor the commands: ``grpc_overhead.cli`` composes it with the rest.
"""
