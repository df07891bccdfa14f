"""``grpc-overhead serve``: the intake and the store in one process (the app joins later).

    grpc-overhead serve [--store DIR | --clickhouse URL] [--otlp-port 4327] [--host 127.0.0.1]

Point the collector's ``otlp`` exporter (or any OTLP/gRPC SDK exporter) at
the intake; spans land in ``otel_traces`` exactly as the collector's
clickhouse exporter would write them. Runs until SIGINT or SIGTERM, then
flushes what is buffered and closes the store.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Sequence

from grpc_overhead.analyzer import rollup
from grpc_overhead.analyzer.calls import CallsOptions, create_calls
from grpc_overhead.analyzer.errors import AnalyzerError
from grpc_overhead.analyzer.intake import DEFAULT_OTLP_PORT, Intake, IntakeConfig
from grpc_overhead.analyzer.store import DEFAULT_STORE_DIR, Store, open_store

EXIT_USAGE = 2


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(
        prog="grpc-overhead serve",
        description="Receive OTLP spans and store them (embedded chDB or a ClickHouse server).",
    )
    where = result.add_mutually_exclusive_group()
    where.add_argument(
        "--store",
        metavar="DIR",
        help=f"chDB data directory (default {DEFAULT_STORE_DIR}); one process owns it",
    )
    where.add_argument(
        "--clickhouse",
        metavar="URL",
        help="ClickHouse server, native protocol: clickhouse://user:password@host:9000/db",
    )
    result.add_argument(
        "--otlp-port",
        type=int,
        default=DEFAULT_OTLP_PORT,
        metavar="N",
        help=f"OTLP/gRPC port of the intake (default {DEFAULT_OTLP_PORT}; 0 picks a free one)",
    )
    result.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    result.add_argument("--no-app", action="store_true", help="do not start the web app")
    return result


def main(argv: Sequence[str] | None = None, *, stop: threading.Event | None = None) -> int:
    args = parser().parse_args(argv)
    stop = stop or threading.Event()
    try:
        store = open_store(
            None if args.clickhouse else (args.store or DEFAULT_STORE_DIR), args.clickhouse
        )
    except AnalyzerError as error:
        print(f"grpc-overhead serve: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        config = IntakeConfig(host=args.host, port=args.otlp_port)
        intake = Intake(store, config)
        calls_options = CallsOptions.from_schema(config.schema)
        try:
            intake.start()
            # Calls are assembled as spans arrive (the view), not when a report asks.
            create_calls(store, calls_options)
        except (AnalyzerError, OSError) as error:
            print(f"grpc-overhead serve: {error}", file=sys.stderr)
            return EXIT_USAGE
        print(f"intake listening on {intake.address}", flush=True)
        print(f"store: {store.description}", flush=True)
        if args.no_app:
            print("app: off (--no-app)", flush=True)
        _stop_on_signals(stop)
        # The embedded store has exactly one owner, this process: it rolls settled
        # minutes up. On a ClickHouse server several processes may run; none settles
        # there, so no minute is ever rolled up twice.
        settle_every_s = SETTLE_INTERVAL_S if not args.clickhouse else None
        last_settle = time.monotonic()
        try:
            while not stop.wait(1.0):
                if settle_every_s and time.monotonic() - last_settle >= settle_every_s:
                    last_settle = time.monotonic()
                    _settle(store, calls_options)
        finally:
            intake.stop()
            stats = intake.stats()
            print(
                f"intake stopped: {stats.spans_accepted} spans stored, "
                f"{stats.spans_rejected} rejected, {stats.requests_refused} requests refused",
                flush=True,
            )
        return 0
    finally:
        store.close()


SETTLE_INTERVAL_S = 60.0


def _settle(store: Store, options: CallsOptions) -> None:
    """Roll settled minutes up; a failure is reported and retried next time, never fatal."""
    try:
        rollup.settle(store, options)
    except AnalyzerError as error:
        print(
            f"grpc-overhead serve: rolling up minutes failed (retrying): {error}", file=sys.stderr
        )


def _stop_on_signals(stop: threading.Event) -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # embedded in a test or another program: it sets ``stop`` itself

    def handle(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)
