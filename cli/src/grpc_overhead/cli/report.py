"""``grpc-overhead report``: the phase breakdown of the calls in a store, as table, JSON or CSV.

    grpc-overhead report --store DIR | --clickhouse URL
        [--since 15m|2026-11-21T10:00:00Z] [--until ...] [--service S] [--method M] [--run R]
        [--otel-service NAME]
        [--format table|json|csv] [--window 60] [--clock-domain host|process]

Every failure the user can fix (store missing or locked, unreachable server,
empty store, a bad --since) is one clear line on stderr and exit status 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from grpc_overhead.analyzer.clock_offsets import DOMAIN_HOST, DOMAIN_PROCESS, ClockOptions
from grpc_overhead.analyzer.errors import AnalyzerError, BadInput, QueryError
from grpc_overhead.analyzer.insights.catalog import check_run, known_names, resolve_names
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.readiness import has_calls, prepare_for_reading, settle_where_ours
from grpc_overhead.analyzer.report import build_report, render_table, to_csv, to_json
from grpc_overhead.analyzer.schema import SchemaOptions
from grpc_overhead.analyzer.store import DEFAULT_STORE_DIR, Store, open_store
from grpc_overhead.instrumentation import environment

EXIT_USAGE = 2
T = TypeVar("T")
INTAKE_HINT = (
    "no calls yet: send OTLP to the intake (`grpc-overhead serve --store DIR`, then point "
    "OTEL_EXPORTER_OTLP_ENDPOINT or the collector's otlp exporter at it) and run some load "
    "(`grpc-overhead load ...`)"
)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
#: Longest clock offset window: a year (the window is nanoseconds in the engine's Int64).
MAX_WINDOW_S = 366 * 86_400


class ReportInputError(BadInput):
    """A command-line value the report cannot use."""


def parse_moment(text: str, *, option: str, now: datetime | None = None) -> datetime:
    """ISO 8601 (``2026-11-21T10:00:00Z``; without a zone: local time) or a duration
    back from now (``90s``, ``15m``, ``2h``, ``1d``, ``1w``, ``500ms``)."""
    now = now or datetime.now(UTC)
    match = _DURATION.match(text)
    if match:
        try:
            return now - timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])
        except OverflowError:
            raise ReportInputError(
                f"bad {option} {text!r}: that is before year 1; give a shorter duration "
                "or an ISO 8601 moment"
            ) from None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ReportInputError(
            f"bad {option} {text!r}: expected ISO 8601 (2026-11-21T10:00:00Z) "
            "or a duration back from now (30s, 15m, 2h, 1d)"
        ) from None
    return moment if moment.tzinfo else moment.astimezone()


def check_range(args: argparse.Namespace, since: datetime | None, until: datetime | None) -> None:
    """``ReportInputError`` for a --since not before --until: nothing could match."""
    if since and until and since >= until:
        raise ReportInputError(
            f"--since {args.since} ({since:%Y-%m-%d %H:%M:%S %Z}) is not before --until "
            f"{args.until} ({until:%Y-%m-%d %H:%M:%S %Z}): no call can match; durations count "
            "back from now, so --since 2h --until 1h is the hour before last"
        )


def check_window(seconds: float) -> None:
    """``ReportInputError`` unless ``seconds`` is a usable clock offset window."""
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_WINDOW_S):
        raise ReportInputError(
            f"bad --window {seconds:g}: must be a positive number of seconds, "
            f"at most {MAX_WINDOW_S:,} (a year)"
        )


def through_serve() -> dict[str, str | None]:
    """``open_store`` keywords for a reader: the credentials a serve's HTTP interface asks."""
    return {
        "http_user": os.environ.get(environment.HTTP_USER),
        "http_password": os.environ.get(environment.HTTP_PASSWORD),
    }


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    """``--store DIR | --clickhouse URL``: the store a reading command (report, app) opens."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--store", metavar="DIR", help=f"chDB store (default {DEFAULT_STORE_DIR})")
    where.add_argument(
        "--clickhouse",
        metavar="URL",
        help="clickhouse://user:pass@host:9000/db, or an HTTP interface: http://host:8123",
    )


def add_filter_arguments(parser: argparse.ArgumentParser) -> None:
    """The calls a reading command covers (report, findings): time range, service, method,
    run, OpenTelemetry service, and the clock options of one-way phases."""
    parser.add_argument("--since", help="calls started at or after: ISO 8601 or 15m, 2h, 1d ago")
    parser.add_argument("--until", help="calls started before: ISO 8601 or a duration ago")
    parser.add_argument(
        "--service", help="only this gRPC service (rpc.service: predict.Predictor or Predictor)"
    )
    parser.add_argument(
        "--method",
        help="only this method, as the report prints it (predict.Predictor/Predict), "
        "or Predictor/Predict, or Predict (that method of every service)",
    )
    parser.add_argument("--run", help="only this run (grpc_overhead.run_id)")
    parser.add_argument(
        "--otel-service",
        metavar="NAME",
        help="only calls from or to this OpenTelemetry service (OTEL_SERVICE_NAME of the "
        "client or the server; --service is the gRPC service)",
    )
    parser.add_argument(
        "--window",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="clock offset estimation window (default 60)",
    )
    parser.add_argument(
        "--clock-domain",
        choices=(DOMAIN_HOST, DOMAIN_PROCESS),
        default=DOMAIN_HOST,
        help="processes sharing a clock: same host.name (default) or only the same process",
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="grpc-overhead report",
        description="Phase breakdown per method (p50/p90/p99/mean, µs) and clock offsets.",
    )
    add_store_arguments(p)
    add_filter_arguments(p)
    p.add_argument("--format", choices=("table", "json", "csv"), default="table")
    return p


def check_filters(args: argparse.Namespace) -> tuple[datetime | None, datetime | None]:
    """(since, until) from the command line, ``ReportInputError`` for anything unusable;
    checked before any store is opened."""
    since = parse_moment(args.since, option="--since") if args.since else None
    until = parse_moment(args.until, option="--until") if args.until else None
    check_range(args, since, until)
    check_window(args.window)
    return since, until


def call_filters(
    args: argparse.Namespace,
    store: Store,
    options: CallsOptions,
    moments: tuple[datetime | None, datetime | None],
) -> tuple[CallFilters, ClockOptions]:
    """The filters and clock options the command line names, names resolved against the
    store (``--service Predictor`` -> ``predict.Predictor``; an unknown run or name is
    ``BadInput`` naming what the store has)."""
    service, method = args.service, args.method
    if args.run:
        check_run(store, args.run, options=options)
    if service or method or args.otel_service:
        names = known_names(store, options=options)
        service, method = resolve_names(names, service, method, args.otel_service)
    filters = CallFilters(
        since=moments[0],
        until=moments[1],
        service=service,
        method=method,
        run_id=args.run,
        otel_service=args.otel_service,
    )
    if store.backend.owns_data:  # no serve holds it: no intake writes, nothing in flight
        filters = filters.at_rest()
    clock = ClockOptions(window=timedelta(seconds=args.window), domain=args.clock_domain)
    return filters, clock


def open_for_reading(args: argparse.Namespace) -> Store:
    """The store ``--store``/``--clickhouse`` names; ``ReportInputError`` for a missing
    directory."""
    if args.clickhouse:
        return open_store(None, args.clickhouse, **through_serve())
    directory = args.store or DEFAULT_STORE_DIR
    if not os.path.isdir(directory):
        raise ReportInputError(
            f"no store at {directory}: pass --store DIR of a `grpc-overhead serve` store "
            "(or --clickhouse URL)"
        )
    # A directory a serve owns is read through it; one another process holds raises
    # StoreLocked naming it, before any engine starts.
    return open_store(directory, **through_serve())


def prepare(store: Store) -> tuple[CallsOptions, str]:
    """(options, '') ready to report on, or (options, why not) when there is nothing yet.

    The options come from ``SchemaOptions.for_store``, as ``serve``'s, so the
    report reads the database the intake wrote (a ClickHouse URL's, or
    ``default``).
    """
    options = CallsOptions.from_schema(SchemaOptions.for_store(store))
    missing = prepare_for_reading(store, options, settle_now=False)
    if missing:
        return options, f"{missing}. {INTAKE_HINT}"
    if not has_calls(store, options):
        return options, INTAKE_HINT
    settle_where_ours(store, options)
    return options, ""


def read_store(args: argparse.Namespace, compute: Callable[..., T]) -> T | None:
    """``compute(store, filters, clock, options=...)`` (an analyzer answer: ``build_report``,
    ``findings``) over the store and filters the command line names; None (the reason on
    stderr) when the store has no calls yet. Bad input raises ``ReportInputError``
    before any store is opened."""
    moments = check_filters(args)
    with open_for_reading(args) as store:
        options, missing = prepare(store)
        if missing:
            print(missing, file=sys.stderr)
            return None
        filters, clock = call_filters(args, store, options, moments)
        return compute(store, filters, clock, options=options)


def run(args: argparse.Namespace) -> int:
    report = read_store(args, build_report)
    if report is None:
        return EXIT_USAGE
    if args.format == "json":
        print(json.dumps(to_json(report), indent=2))
    elif args.format == "csv":
        sys.stdout.write(to_csv(report))
    elif report.calls == 0:
        print("no calls match the filters")
    else:
        sys.stdout.write(render_table(report, width=_terminal_width()))
    return 0


def _terminal_width() -> int:
    try:
        return max(80, min(os.get_terminal_size().columns, 160))
    except OSError:
        return 100


def guarded(command: str, run: Callable[[], int]) -> int:
    """``run()``, every analyzer failure one line on stderr and exit status 2."""
    try:
        return run()
    except QueryError as error:
        print(
            f"grpc-overhead {command}: the store refused a query: {error.message}", file=sys.stderr
        )
        return EXIT_USAGE
    except AnalyzerError as error:
        print(f"grpc-overhead {command}: {error}", file=sys.stderr)
        return EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    return guarded("report", lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
