"""``grpc-overhead sql``: run ClickHouse SQL against the store, read-only unless ``--write``.

    grpc-overhead sql "SELECT SpanKind, count() FROM otel_traces GROUP BY 1"
    grpc-overhead sql - --format csv < query.sql
    grpc-overhead sql "TRUNCATE TABLE otel_traces" --write

Read-only is enforced by the engine (the ``readonly=1`` setting, on chDB a
read-only connection), not by inspecting the text, so no statement can slip
through.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import pandas as pd

from grpc_overhead.analyzer.errors import AnalyzerError, QueryError
from grpc_overhead.analyzer.store import DEFAULT_STORE_DIR, open_store

EXIT_QUERY = 1
EXIT_USAGE = 2
FORMATS = ("table", "csv", "json")


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(
        prog="grpc-overhead sql", description="Run ClickHouse SQL against the store."
    )
    result.add_argument("sql", help="the statement ('-' reads it from standard input)")
    where = result.add_mutually_exclusive_group()
    where.add_argument(
        "--store", metavar="DIR", help=f"chDB directory (default {DEFAULT_STORE_DIR})"
    )
    where.add_argument("--clickhouse", metavar="URL", help="clickhouse://user:pass@host:9000/db")
    result.add_argument("--format", choices=FORMATS, default="table", help="output (default table)")
    result.add_argument(
        "--write", action="store_true", help="allow statements that change data or schema"
    )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    sql = sys.stdin.read() if args.sql == "-" else args.sql
    if not sql.strip():
        print("grpc-overhead sql: empty statement", file=sys.stderr)
        return EXIT_USAGE
    try:
        store = open_store(
            None if args.clickhouse else (args.store or DEFAULT_STORE_DIR), args.clickhouse
        )
    except AnalyzerError as error:
        print(f"grpc-overhead sql: {error}", file=sys.stderr)
        return EXIT_USAGE
    with store:
        try:
            frame = store.query(sql, readonly=not args.write)
        except QueryError as error:
            print(explain(error), file=sys.stderr)
            return EXIT_QUERY
        except AnalyzerError as error:
            print(f"grpc-overhead sql: {error}", file=sys.stderr)
            return EXIT_USAGE
    sys.stdout.write(render(frame, args.format))
    return 0


def explain(error: QueryError) -> str:
    if error.is_readonly_refusal:
        headline = (
            "refused: the store is opened read-only for `grpc-overhead sql`; "
            "pass --write to run statements that change data or schema"
        )
    else:
        headline = error.message
    return f"grpc-overhead sql: {headline}\n  SQL: {error.sql.strip()}"


def render(frame: pd.DataFrame, output: str) -> str:
    if output == "csv":
        return frame.to_csv(index=False)
    if output == "json":
        records = [
            {column: _jsonable(value) for column, value in row.items()}
            for row in frame.to_dict(orient="records")
        ]
        return json.dumps(records, indent=2, ensure_ascii=False) + "\n"
    if frame.empty and not len(frame.columns):
        return ""
    with pd.option_context("display.max_colwidth", 80, "display.width", 200):
        return frame.to_string(index=False) + "\n"


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if value is None or isinstance(value, bool | int | float | str):
        if isinstance(value, float) and value != value:  # NaN
            return None
        return value
    return str(value)
