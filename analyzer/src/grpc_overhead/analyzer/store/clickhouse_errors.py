"""The engine's error text, made readable: its code apart, its version and nesting gone.

ClickHouse says ``Code: 62. DB::Exception: Syntax error ... (version 25.8.1.1)``; chDB
rethrows it nested, once per level. Every backend turns what it caught into a
``QueryError`` with the code and the message a user can act on, and the store lock reads
the code of "already in use" the same way.
"""

from __future__ import annotations

import re

_CLICKHOUSE_ERROR = re.compile(r"\s*Code:\s*(\d+)\.\s*(?:DB::Exception:\s*)?(.*)", re.DOTALL)
_ANY_VERSION = re.compile(r"\s*\(version [\d.]+(?: \([^)]*\))?\)\.?")
_VERSION_SUFFIX = re.compile(
    r"(?:\s*\(version [\d.]+(?: \([^)]*\))?\)\.?)+(?=\s*(?:\([A-Z_]+\))?\s*$)"
)


def split_clickhouse_error(text: str) -> tuple[int | None, str]:
    """'Code: 62. DB::Exception: Syntax error ...' -> (62, 'Syntax error ...')."""
    match = _CLICKHOUSE_ERROR.search(text)
    if not match:
        return None, text.strip()
    code = int(match.group(1))
    message = match.group(2).strip()
    while match := _CLICKHOUSE_ERROR.match(message):  # chDB nests the engine's text
        message = match.group(2).strip()
    # The engine appends its version (once per nesting level, as chDB rethrows); it says
    # nothing about the query. Then "(NAME) (NAME)" left by the nesting is said once.
    message = _VERSION_SUFFIX.sub("", message)
    message = _ANY_VERSION.sub("", message)
    message = re.sub(r"(\([A-Z_]+\))(?:[\s.]*\1)+", r"\1", message)
    return code, message
