"""What a user's own statement may be, and what it may take: the SQL page, ``sql`` and the
HTTP interface run it through here.

A user's statement runs read-only (``readonly=1``: the engine refuses writes and every
setting change) under ``QueryLimits`` the engine enforces; what ``readonly`` lets through
(``KILL QUERY``, ``INTO OUTFILE``) is refused before it runs by ``check_user_statement``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import pandas as pd

from grpc_overhead.analyzer.errors import READONLY_ERROR_CODE, BadInput, QueryError


class Queries(Protocol):
    """What the check needs of a store: its ``query`` (``base.Store`` has it)."""

    def query(
        self, sql: str, parameters: Mapping[str, Any] | None = None, *, readonly: bool = False
    ) -> pd.DataFrame: ...


@dataclass(frozen=True)
class QueryLimits:
    """What one user query (``sql``, the SQL page) may take; the engine enforces each.

    The defaults are the ceiling: ``lowered`` makes a stricter copy and refuses
    to raise any of them. The query also runs with ``readonly=1``, under which
    ClickHouse refuses every write, every ``SET``/``SETTINGS`` change (so no
    query can raise a limit itself) and ``SYSTEM``; ``KILL`` and ``INTO OUTFILE``
    are refused before the query runs (``check_user_statement``).
    """

    #: Wall-clock seconds (ClickHouse ``max_execution_time``).
    max_execution_time_s: float = 60.0
    #: Bytes of memory for the query (``max_memory_usage``).
    max_memory_bytes: int = 4 << 30
    #: Rows in the result (``max_result_rows``, overflow is an error, not a silent cut).
    max_result_rows: int = 1_000_000

    def lowered(self, **limits: float | int | None) -> QueryLimits:
        """A copy with the given limits (None: unchanged); BadInput if one would rise."""
        changes = {name: value for name, value in limits.items() if value is not None}
        for name, value in changes.items():
            ceiling = getattr(self, name)  # AttributeError for an unknown name: a bug
            if not 0 < value <= ceiling:
                raise BadInput(f"{name} must be above 0 and at most {ceiling:g}, not {value:g}")
        return replace(self, **changes)

    def settings(self) -> dict[str, Any]:
        """ClickHouse settings, ``readonly`` last (once it is 1, no setting can change)."""
        return {
            "max_execution_time": self.max_execution_time_s,
            "max_memory_usage": int(self.max_memory_bytes),
            "max_result_rows": int(self.max_result_rows),
            "result_overflow_mode": "throw",
            "readonly": 1,
        }

    def describe(self, rows: str | None = None) -> str:
        """'60 s, 4 GiB, 1,000,000 rows': the limits as a page caption shows them; ``rows``
        in place of the row ceiling where something else cuts first (a page's row limit)."""
        memory = self.max_memory_bytes / (1 << 30)
        memory_text = f"{memory:g} GiB" if memory >= 1 else f"{self.max_memory_bytes >> 20} MiB"
        rows = rows or f"{self.max_result_rows:,} rows"
        return f"{self.max_execution_time_s:g} s, {memory_text}, {rows}"


#: Statement kinds a user query may be (the first word of the engine's formatting).
USER_STATEMENTS = ("SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXPLAIN", "EXISTS")
#: Polled while a user query runs: True when its caller went away (the query is killed).
Abandoned = Callable[[], bool]

_SCOPE_SUFFIX = re.compile(r"\s*:?\s*In scope SELECT formatQuery\(.*$", re.DOTALL)
_OUTFILE = re.compile(r"\sINTO\s+OUTFILE\s", re.IGNORECASE)
_FORMAT_CLAUSE = re.compile(r"\sFORMAT\s+(\w+)\s*$")


def output_format(formatted: str) -> str | None:
    """The statement's own ``FORMAT`` clause (from ``check_user_statement``), if any."""
    match = _FORMAT_CLAUSE.search(formatted)
    return match.group(1) if match else None


def check_user_statement(store: Queries, sql: str) -> str:
    """The statement as the engine formats it; QueryError unless it only reads.

    The engine parses it (one statement, no multi-statements); ``readonly=1``
    refuses writes, but not ``KILL QUERY``, which would cancel the intake's
    inserts, nor ``INTO OUTFILE``: only the kinds in ``USER_STATEMENTS``
    pass, without an output file.
    """
    try:
        found = store.query(
            "SELECT formatQuery({statement:String}) AS formatted",
            {"statement": sql},
            readonly=True,
        )
    except QueryError as error:  # about the user's text, not our wrapper around it
        message = _SCOPE_SUFFIX.sub("", error.message).rstrip()
        raise QueryError(message, sql=sql, code=error.code) from error
    formatted = str(found["formatted"].iloc[0])
    kind = formatted.lstrip("( \n").split(None, 1)[0].upper() if formatted.strip() else ""
    if kind not in USER_STATEMENTS:
        raise QueryError(
            f"{kind or 'this'} statements are refused: only "
            f"{', '.join(USER_STATEMENTS)} run here (read-only)",
            sql=sql,
            code=READONLY_ERROR_CODE,
        )
    if _OUTFILE.search(formatted):  # the engine writes it even under readonly=1
        raise QueryError(
            "INTO OUTFILE is refused: a read-only query writes no files "
            "(redirect the output instead)",
            sql=sql,
            code=READONLY_ERROR_CODE,
        )
    return formatted
