"""The app's SQL console: the user's own SQL, read-only, with a row limit.

Read-only is enforced by the engine (``store.query(..., readonly=True)``:
chDB's read-only connection, the server's ``readonly=1``), as for
``grpc-overhead sql``; nothing here inspects the text to decide what is
allowed. The text is first parsed alone (``formatQuery``, the SQL passed as
a bound value), so a syntax error points at the user's own line and
column. A SELECT is then run as a subquery under ``LIMIT``, which bounds
what crosses into Python however many rows it would return; other
statements (SHOW, DESCRIBE, EXPLAIN) return a handful of rows and run as
typed. Every failure becomes one ``BadInput`` line that says what to do.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from grpc_overhead.analyzer.errors import BadInput, QueryError
from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.sql_examples import examples_for
from grpc_overhead.analyzer.store.base import Store
from grpc_overhead.analyzer.store.user_statements import Abandoned, QueryLimits

#: Seconds a query of the SQL page may run: a web page answers within half a minute or
#: says why not (``sql`` and serve's HTTP interface allow ``QueryLimits``' 60 s). The one
#: place this number lives: the page's caption, its refusals, the README and
#: docs/reliability.md say it (tests/test_readme.py holds the docs to it).
PAGE_TIME_LIMIT_S = 30.0
#: The page's limits: ``QueryLimits`` with ``PAGE_TIME_LIMIT_S``.
PAGE_LIMITS = QueryLimits().lowered(max_execution_time_s=PAGE_TIME_LIMIT_S)

DEFAULT_LIMIT = 1000
MAX_LIMIT = 100_000


def page_limits() -> str:
    """'30 s, 4 GiB, the row limit (at most 100,000 rows)': what the page enforces, in words.
    (The engine's 1,000,000-row ceiling never binds here: the row limit cuts first.)"""
    return PAGE_LIMITS.describe(rows=f"the row limit (at most {MAX_LIMIT:,} rows)")


#: ``frame.attrs`` key: True when the statement returned more rows than the limit.
TRUNCATED = "truncated"

READ_ONLY_REFUSAL = (
    "refused: the SQL page is read-only; run statements that change data or schema "
    "with `grpc-overhead sql --write` instead"
)

_SCOPE_SUFFIX = re.compile(r"\s*:?\s*In scope SELECT formatQuery\(.*$", re.DOTALL)


def run(
    store: Store,
    sql: str,
    *,
    limit: int = DEFAULT_LIMIT,
    options: CallsOptions | None = None,
    limits: QueryLimits = PAGE_LIMITS,
    abandoned: Abandoned | None = None,
) -> pd.DataFrame:
    """Run ``sql`` read-only under ``limits``; at most ``limit`` rows
    (``frame.attrs[TRUNCATED]`` says if there were more); killed once ``abandoned()``.
    ``options`` is accepted for the app's uniform call convention: the user's SQL
    names its tables itself."""
    del options
    if not 1 <= limit <= MAX_LIMIT:
        raise BadInput(f"row limit must be between 1 and {MAX_LIMIT}, not {limit}")
    text = sql.strip().rstrip(";").strip()
    if not text:
        raise BadInput("empty statement: type a SELECT, or pick one of the example queries")
    formatted = _parse(store, text)
    if formatted.startswith(("SELECT", "WITH")):
        try:
            frame = store.user_query(
                f"SELECT * FROM (\n{text}\n) LIMIT {{row_limit:UInt64}}",
                limits,
                parameters={"row_limit": limit + 1},
                abandoned=abandoned,
            )
        except QueryError as error:
            if error.is_syntax_error:  # parsed alone, not as a subquery
                raise BadInput(
                    "this statement cannot run under the page's row limit (a FORMAT or "
                    "INTO OUTFILE clause?); remove that clause: the page shows and "
                    "downloads the rows itself"
                ) from error
            raise _explained(error) from error
    else:
        try:
            frame = store.user_query(text, limits, abandoned=abandoned)
        except QueryError as error:
            raise _explained(error) from error
    truncated = len(frame) > limit
    frame = frame.head(limit).reset_index(drop=True)
    frame.attrs[TRUNCATED] = truncated
    return frame


def _parse(store: Store, text: str) -> str:
    """The statement as ClickHouse formats it, or BadInput with its syntax error."""
    try:
        formatted = store.check_user_statement(text)
    except QueryError as error:
        if error.is_readonly_refusal:
            raise BadInput(READ_ONLY_REFUSAL) from error
        message = _SCOPE_SUFFIX.sub("", error.message).rstrip(". ")
        raise BadInput(f"{message}. Fix the SQL and run it again") from error
    return formatted.lstrip("(").lstrip()


def _explained(error: QueryError) -> BadInput:
    if error.is_readonly_refusal and "setting" in error.message:
        return BadInput(
            "refused: a query cannot change settings here (the engine runs it read-only, "
            f"with {page_limits()}); lower the row limit above instead"
        )
    if error.is_readonly_refusal:
        return BadInput(READ_ONLY_REFUSAL)
    return BadInput(f"{error.message.rstrip('. ')}. Fix the SQL and run it again")


def examples(options: CallsOptions | None = None) -> dict[str, str]:
    """Example statements by title, written against this store's tables.

    The questions of ``sql_examples`` over ``grpc_call_phases`` (one merged row
    per call, every phase in µs: no ``FINAL`` needed), then ``otel_traces`` as
    the collector's exporter writes it.
    """
    options = options or CallsOptions()
    traces = options.traces
    return {
        **examples_for(options),
        "Span events of recent traces": (
            "SELECT Timestamp, TraceId, SpanKind, ServiceName, SpanName,\n"
            "    Duration / 1e3 AS duration_us, Events.Name AS events\n"
            f"FROM {traces}\nWHERE SpanAttributes['rpc.system'] = 'grpc'\n"
            "ORDER BY Timestamp DESC\nLIMIT 50"
        ),
        "Spans per service and kind": (
            "SELECT ServiceName, SpanKind, count() AS spans,\n"
            "    round(avg(Duration) / 1e3, 1) AS mean_duration_us\n"
            f"FROM {traces}\nGROUP BY ServiceName, SpanKind\nORDER BY spans DESC"
        ),
        "Tables in the store": "SHOW TABLES",
    }


def displayable(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with nested values (maps, arrays: ``Events.Attributes``) as text, which
    a table widget and a CSV file can show, and ``Float32`` columns as the decimals the
    engine prints (``decimal_floats``); other flat columns stay as they are."""
    shown = decimal_floats(frame)
    for column in shown.columns:
        values = shown[column]
        if values.dtype == object and values.map(_nested).any():
            shown[column] = values.map(_as_text)
    return shown


def decimal_floats(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` whose ``Float32`` columns are the ``float64`` of their shortest
    decimal: ``quantileTDigest`` answers in Float32 (``round()`` of it too), whose 28210.9
    is 28210.900390625 in double precision, which a table prints as 28210.900391 where
    ClickHouse's own clients print 28210.9."""
    shown = frame.copy()
    for column in shown.columns:
        if str(shown[column].dtype) in ("float32", "Float32"):
            single = shown[column].to_numpy(dtype=np.float32, na_value=np.nan)
            shown[column] = pd.Series(
                single.astype(str).astype(np.float64), index=shown.index, name=column
            )
    return shown


def _nested(value: object) -> bool:
    return isinstance(value, dict | list | tuple) or hasattr(value, "tolist")


def _as_text(value: object) -> str:
    if hasattr(value, "tolist"):
        value = value.tolist()
    return str(value)
