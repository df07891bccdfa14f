"""``grpc-overhead sql``: run ClickHouse SQL against the store, read-only unless ``--write``.

    grpc-overhead sql "SELECT rpc_method, avg(total_us) FROM grpc_call_phases GROUP BY 1"
    grpc-overhead sql - --format csv < query.sql
    grpc-overhead sql "SELECT * FROM grpc_call_phases LIMIT 3 FORMAT Vertical"
    grpc-overhead sql "TRUNCATE TABLE otel_traces" --write

Read-only is enforced by the engine (the ``readonly=1`` setting, on chDB a
read-only connection), not by inspecting the text, so no statement can slip
through; ``KILL`` (which ``readonly=1`` allows) is refused after the engine
parsed the statement. Without ``--write`` the query runs under ``QueryLimits``
(time, memory, result rows; lower them with ``--max-seconds``,
``--max-memory``, ``--max-rows``), and Ctrl-C or SIGTERM kills it in the
engine. A statement's own ``FORMAT`` clause (``FORMAT Vertical``) is honoured:
the engine's text is printed as it is.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from grpc_overhead.analyzer.errors import AnalyzerError, QueryError
from grpc_overhead.analyzer.insights.sql_console import decimal_floats
from grpc_overhead.analyzer.messages import MESSAGES_VIEW
from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.phase_view import PHASES_VIEW, ensure_phase_view, view_columns
from grpc_overhead.analyzer.schema import SchemaOptions
from grpc_overhead.analyzer.sql_examples import EXAMPLES
from grpc_overhead.analyzer.store import DEFAULT_STORE_DIR, Store
from grpc_overhead.analyzer.store.user_statements import QueryLimits, output_format
from grpc_overhead.cli.report import open_for_reading

#: ClickHouse's UNKNOWN_TABLE: the code a query of a view the store lacks fails with.
UNKNOWN_TABLE = 60

EXIT_QUERY = 1
EXIT_USAGE = 2
FORMATS = ("table", "csv", "json")


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(
        prog="grpc-overhead sql",
        description="Run ClickHouse SQL against the store (through `serve` while it owns it). "
        "A FORMAT clause is passed through: the engine's output is printed as is.",
        epilog=help_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    result.add_argument("sql", help="the statement ('-' reads it from standard input)")
    where = result.add_mutually_exclusive_group()
    where.add_argument(
        "--store", metavar="DIR", help=f"chDB directory (default {DEFAULT_STORE_DIR})"
    )
    where.add_argument(
        "--clickhouse",
        metavar="URL",
        help="clickhouse://user:pass@host:9000/db, or an HTTP interface: http://host:8123",
    )
    result.add_argument("--format", choices=FORMATS, default="table", help="output (default table)")
    result.add_argument(
        "--write", action="store_true", help="allow statements that change data or schema"
    )
    ceiling = QueryLimits()
    result.add_argument(
        "--max-seconds",
        type=float,
        metavar="S",
        help="stop the query after S seconds "
        f"(default and ceiling {ceiling.max_execution_time_s:g})",
    )
    result.add_argument(
        "--max-memory",
        type=int,
        metavar="BYTES",
        help=f"memory for the query (default and ceiling {ceiling.max_memory_bytes})",
    )
    result.add_argument(
        "--max-rows",
        type=int,
        metavar="N",
        help=f"most result rows, more is an error (default and ceiling {ceiling.max_result_rows})",
    )
    return result


def help_epilog() -> str:
    """The tables, the columns of ``grpc_call_phases`` and a few of docs/sql.md's examples."""
    width = max(len(name) for name, _ in view_columns())
    columns = "\n".join(f"  {name:<{width}}  {text}" for name, text in view_columns())
    examples = "\n\n".join(
        f"  -- {question}\n" + "\n".join(f"  {line}" for line in sql.splitlines())
        for question, sql in EXAMPLES[:3]
    )
    return (
        "tables:\n"
        f"  {PHASES_VIEW:<19} one row per call, merged (no FINAL), every phase in µs: "
        "query this\n"
        f"  {MESSAGES_VIEW:<19} one row per message of every call (streams: each request "
        "and response)\n"
        "  grpc_calls          the calls as assembled (raw *_ns timestamps; read with FINAL)\n"
        "  otel_traces         every span, the collector's clickhouse exporter schema\n\n"
        f"columns of {PHASES_VIEW}:\n{columns}\n\n"
        f"examples (ten in docs/sql.md):\n{examples}\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    sql = sys.stdin.read() if args.sql == "-" else args.sql
    if not sql.strip():
        print("grpc-overhead sql: empty statement", file=sys.stderr)
        return EXIT_USAGE
    try:
        # A --store that is no directory is a typo, not a new store to create and read empty.
        store = open_for_reading(args)
    except AnalyzerError as error:
        print(f"grpc-overhead sql: {error}", file=sys.stderr)
        return EXIT_USAGE
    with store:
        if args.write and not store.backend.writable:
            print(
                f"grpc-overhead sql: --write: {store.description} is read-only here; "
                "writes go through the process that owns the store (stop it to write)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        try:
            if args.write:  # the statement may be about the view itself (DROP, CREATE)
                result: Any = store.query(sql)
            else:
                _prepare_view(store, sql)
                limits = QueryLimits().lowered(
                    max_execution_time_s=args.max_seconds,
                    max_memory_bytes=args.max_memory,
                    max_result_rows=args.max_rows,
                )
                result = _until_stopped(lambda stop: _read(store, sql, limits, stop))
        except QueryError as error:
            print(explain(error, writable=store.backend.writable), file=sys.stderr)
            return EXIT_QUERY
        except AnalyzerError as error:
            print(f"grpc-overhead sql: {error}", file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt:
            print("grpc-overhead sql: stopped; the query was killed", file=sys.stderr)
            return 130
    if isinstance(result, bytes):
        sys.stdout.buffer.write(result)
        sys.stdout.flush()
    else:
        sys.stdout.write(render(result, args.format))
    return 0


def _prepare_view(store: Store, sql: str) -> None:
    """Make ``grpc_call_phases`` for a statement that reads it on a store that lacks it.

    Only where this process may write (its own chDB store, a ClickHouse user allowed
    DDL): a store read through ``serve`` has it from serve, and a read-only user gets
    ``explain``'s hint instead.
    """
    lowered = sql.lower()
    if not (PHASES_VIEW in lowered or MESSAGES_VIEW in lowered) or not store.backend.writable:
        return
    with contextlib.suppress(QueryError):
        ensure_phase_view(store, CallsOptions.from_schema(SchemaOptions.for_store(store)))


def _read(store: Store, sql: str, limits: QueryLimits, stop: threading.Event) -> Any:
    formatted = store.check_user_statement(sql)
    return store.user_query(sql, limits, abandoned=stop.is_set, output=output_format(formatted))


def _until_stopped(work: Callable[[threading.Event], Any]) -> Any:
    """Run ``work`` in a thread; SIGINT/SIGTERM (main thread only) stop it and raise
    KeyboardInterrupt once it returned. The engine cannot be interrupted from the
    thread it runs in, so the query is killed from beside it (``abandoned``)."""
    stop = threading.Event()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = work(stop)
        except BaseException as error:  # handed to the caller below
            outcome["error"] = error

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, lambda *_: stop.set())
    worker = threading.Thread(target=run, name="sql-query", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.1)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if stop.is_set():
        raise KeyboardInterrupt
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def explain(error: QueryError, *, writable: bool = True) -> str:
    if error.is_readonly_refusal and "setting" in error.message:
        headline = (
            "refused: a query cannot change settings (the engine runs it read-only); "
            "lower its limits with --max-seconds, --max-memory or --max-rows"
        )
    elif error.is_readonly_refusal and not writable:
        headline = (
            f"refused: {error.message.rstrip('.')}; the store is read through the `serve` "
            "that owns it, which writes it"
        )
    elif error.is_readonly_refusal:
        headline = (
            f"refused: the store is opened read-only for `grpc-overhead sql` "
            f"({error.message.rstrip('.')}); "
            "pass --write to run statements that change data or schema"
        )
    else:
        headline = error.message
    if error.code == UNKNOWN_TABLE and PHASES_VIEW in error.message:
        headline += (
            f"\n  {PHASES_VIEW} is made by `grpc-overhead report` (and serve, app) on a store "
            "with calls: run `grpc-overhead report` on this store once, as a user allowed "
            "to create views"
        )
    return f"grpc-overhead sql: {headline}\n  SQL: {error.sql.strip()}"


def render(frame: pd.DataFrame, output: str) -> str:
    """The result as ``output``; Float32 numbers as the engine prints them (28210.9)."""
    frame = decimal_floats(frame)
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
