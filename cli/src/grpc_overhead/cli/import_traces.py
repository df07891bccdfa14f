"""``grpc-overhead import jaeger``: pull traces from a Jaeger query API into a store.

    grpc-overhead import jaeger --url URL [--service S ...] [--since 1h] [--until ...]
        [--store DIR | --clickhouse URL] [--api auto|v3|v1] [--window 5m]

A team with a Jaeger (v1 or v2) analyzes the traces it already has, without
redeploying anything: every span of the chosen services (default: all that
Jaeger knows) that started in the range lands in ``otel_traces`` exactly as
the intake stores spans, and the calls are assembled as usual. Running it
again stores nothing twice. Progress goes to stderr, a summary to stdout;
every failure the user can fix is one line and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime, timedelta

from grpc_overhead.analyzer.calls import create_calls
from grpc_overhead.analyzer.errors import AnalyzerError
from grpc_overhead.analyzer.importers.jaeger import API_VERSIONS, JaegerQuery, import_traces
from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.schema import SchemaOptions, create_schema
from grpc_overhead.analyzer.store import DEFAULT_STORE_DIR, Store, open_store
from grpc_overhead.cli.report import check_range, check_window, parse_moment

EXIT_USAGE = 2
PROG = "grpc-overhead import jaeger"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Copy traces from a Jaeger query API (v3, v1 as a fallback) into a store.",
    )
    p.add_argument("--url", required=True, help="Jaeger's query base URL, e.g. http://host:16686")
    p.add_argument(
        "--service",
        action="append",
        metavar="S",
        help="a service to import (repeatable; default: every service Jaeger knows)",
    )
    p.add_argument("--since", default="1h", help="ISO 8601 or a duration back (default 1h)")
    p.add_argument("--until", help="ISO 8601 or a duration back (default now)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--store", metavar="DIR", help=f"chDB store (default {DEFAULT_STORE_DIR})")
    where.add_argument("--clickhouse", metavar="URL", help="clickhouse://user:pass@host:9000/db")
    p.add_argument("--api", choices=API_VERSIONS, default="auto", help="query API (default auto)")
    p.add_argument(
        "--window",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="read the range this many seconds at a time (default 300)",
    )
    return p


def _open(args: argparse.Namespace) -> Store:
    if args.clickhouse:
        return open_store(None, args.clickhouse)
    directory = args.store or DEFAULT_STORE_DIR
    os.makedirs(directory, exist_ok=True)
    return open_store(directory)


def run(args: argparse.Namespace) -> int:
    now = datetime.now(UTC)
    since = parse_moment(args.since, option="--since", now=now)
    until = parse_moment(args.until, option="--until", now=now) if args.until else now
    check_range(args, since, until)
    check_window(args.window)
    jaeger = JaegerQuery(args.url, api=args.api)
    print(f"[import] {jaeger.url}: query API {jaeger.api}", file=sys.stderr)
    with _open(args) as store:
        schema = SchemaOptions.for_store(store)
        create_schema(store, schema)
        create_calls(store, CallsOptions.from_schema(schema))
        result = import_traces(
            store,
            jaeger,
            since=since,
            until=until,
            services=args.service,
            window=timedelta(seconds=args.window),
            table=schema.qualified_traces_table(),
            progress=lambda line: print(f"[import] {line}", file=sys.stderr, flush=True),
        )
    print(
        f"imported {result.stored} new spans ({result.already} already stored,"
        f" {result.rejected} rejected) of {result.traces} traces from"
        f" {len(result.services)} services via API {result.api}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != "jaeger":
        print(
            "usage: grpc-overhead import jaeger --url URL [options]"
            " (the only source so far is a Jaeger query API)",
            file=sys.stderr,
        )
        return 0 if argv and argv[0] in ("-h", "--help") else EXIT_USAGE
    args = parser().parse_args(argv[1:])
    try:
        return run(args)
    except AnalyzerError as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
