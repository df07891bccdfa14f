"""The analyzer's public exceptions, one tree for every store backend.

Backends translate their driver's exceptions (chDB's ``ChdbError`` /
``RuntimeError``, clickhouse-driver's ``errors.Error`` and socket errors) at
the edge into the most specific class below, chaining the original with
``raise ... from exc``. Nothing above the store catches a driver exception.

    AnalyzerError
    ├── StoreUnavailable        the store cannot be opened or reached
    │   └── StoreLocked         a chDB data directory owned by another process
    ├── QueryError              the store rejected a statement (carries sql + parameters)
    └── BadInput                the caller passed something unusable (URL, name, value)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


class AnalyzerError(Exception):
    """Base class: catch this to handle every analyzer failure."""


class StoreUnavailable(AnalyzerError):
    """The store cannot be opened (chDB) or reached (ClickHouse server).

    Retrying later may succeed; the intake answers UNAVAILABLE on it.
    """

    def __init__(self, message: str, *, location: str = "") -> None:
        super().__init__(message)
        self.location = location


class StoreLocked(StoreUnavailable):
    """A chDB data directory is held by another process (one owner at a time)."""

    def __init__(self, message: str, *, location: str = "", holder_pid: int | None = None) -> None:
        super().__init__(message, location=location)
        self.holder_pid = holder_pid


class QueryError(AnalyzerError):
    """The store rejected a statement: syntax, unknown table, read-only refusal...

    ``code`` is ClickHouse's numeric error code when known (62 = syntax error,
    164 = READONLY), ``sql`` and ``parameters`` are what was sent.
    """

    def __init__(
        self,
        message: str,
        *,
        sql: str,
        parameters: Mapping[str, Any] | None = None,
        code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.sql = sql
        self.parameters = dict(parameters or {})
        self.code = code

    @property
    def is_readonly_refusal(self) -> bool:
        return self.code == READONLY_ERROR_CODE

    @property
    def is_syntax_error(self) -> bool:
        return self.code == SYNTAX_ERROR_CODE


class BadInput(AnalyzerError):
    """The caller passed a value the analyzer cannot use (bad URL, bad name)."""


SYNTAX_ERROR_CODE = 62
READONLY_ERROR_CODE = 164


#: Longest text ``brief`` returns: a gRPC status detail travels in a header, and a
#: sender logs it, so it says what is wrong in one line and nothing more.
BRIEF_LIMIT = 300
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:/[\w.@+-]+){2,}/?")
_STACK = re.compile(r"(?:Stack trace|Traceback \(most recent call last\)).*", re.DOTALL)


def brief(error: object, limit: int = BRIEF_LIMIT) -> str:
    """One short line for a client: no traceback, no file paths, at most ``limit`` characters.

    Engine and driver errors can carry a Python traceback (a failing UDF) or a
    server-side path; neither helps the sender and both leak details.
    """
    text = _STACK.sub("", str(error))
    text = _PATH.sub("<path>", text)
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 3].rstrip() + "..."
    return text
