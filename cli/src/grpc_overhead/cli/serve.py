"""``grpc-overhead serve``: the intake, the store and the web app in one process.

    grpc-overhead serve [--store DIR | --clickhouse URL] [--otlp-port 4327] [--host 127.0.0.1]
                        [--app-port 8501 | --no-app] [--jaeger-url URL]

Point the collector's ``otlp`` exporter (or any OTLP/gRPC SDK exporter) at
the intake; spans land in ``otel_traces`` exactly as the collector's
clickhouse exporter would write them. The Streamlit app runs in this same
process because a chDB directory belongs to one process: it reads the store
this process holds. Runs until SIGINT or SIGTERM, then stops the app, flushes
what the intake buffered and closes the store.

While it runs, serve writes ``DIR/grpc-overhead-serve.json`` (its pid, intake
and app URL) so other commands that find the directory locked can say where
the running app is.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grpc_overhead.analyzer import rollup
from grpc_overhead.analyzer.calls import CallsOptions
from grpc_overhead.analyzer.errors import AnalyzerError
from grpc_overhead.analyzer.intake import DEFAULT_OTLP_PORT, Intake, IntakeConfig
from grpc_overhead.analyzer.phase_view import create_call_tables
from grpc_overhead.analyzer.store import DEFAULT_STORE_DIR, Store, open_store
from grpc_overhead.instrumentation import environment

EXIT_USAGE = 2
DEFAULT_APP_PORT = 8501
#: Written into the store directory while serve runs (see ``read_serve_info``).
SERVE_INFO_FILE = "grpc-overhead-serve.json"


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(
        prog="grpc-overhead serve",
        description="Receive OTLP spans, store them (embedded chDB or a ClickHouse server) "
        "and serve the web app on them, in one process.",
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
    app = result.add_mutually_exclusive_group()
    app.add_argument(
        "--app-port",
        type=int,
        default=DEFAULT_APP_PORT,
        metavar="N",
        help=f"port of the web app (default {DEFAULT_APP_PORT}; 0 picks a free one)",
    )
    app.add_argument("--no-app", action="store_true", help="do not start the web app")
    result.add_argument(
        "--jaeger-url",
        metavar="URL",
        default=os.environ.get(environment.JAEGER_URL, ""),
        help="Jaeger UI base URL: the call explorer links each call to URL/trace/<trace id> "
        f"(default ${environment.JAEGER_URL})",
    )
    return result


def main(argv: Sequence[str] | None = None, *, stop: threading.Event | None = None) -> int:
    args = parser().parse_args(argv)
    stop = stop or threading.Event()
    if not args.no_app:
        from grpc_overhead.app.server import AppServerError, check_port

        try:  # before anything starts: a taken port is the commonest failure
            check_port(args.host, args.app_port)
        except AppServerError as error:
            print(f"grpc-overhead serve: {error}", file=sys.stderr)
            return EXIT_USAGE
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
        calls_options = CallsOptions.from_schema(intake.schema)  # the store's database
        try:
            intake.start()
            # Calls are assembled as spans arrive (the view), not when a report asks.
            create_call_tables(store, calls_options)
        except (AnalyzerError, OSError) as error:
            print(f"grpc-overhead serve: {error}", file=sys.stderr)
            intake.stop()
            return EXIT_USAGE
        info = ServeInfo(os.getpid(), intake.address, "", store.description)
        directory = None if args.clickhouse else os.path.abspath(args.store or DEFAULT_STORE_DIR)
        print(f"intake listening on {intake.address}", flush=True)
        print(f"store: {store.description}", flush=True)
        # The embedded store has exactly one owner, this process: it rolls settled
        # minutes up. On a ClickHouse server several processes may run; none settles
        # there, so no minute is ever rolled up twice.
        loop = SettleLoop(store, calls_options, SETTLE_INTERVAL_S if directory else None)
        try:
            if args.no_app:
                print("app: off (--no-app)", flush=True)
                _write_serve_info(directory, info)
                _stop_on_signals(stop)
                loop(stop)
                return 0
            return _serve_app(args, store, calls_options, loop, stop, info, directory)
        finally:
            _remove_serve_info(directory)
            intake.stop()
            stats = intake.stats()
            print(
                f"intake stopped: {stats.spans_inserted} spans stored, "
                f"{stats.spans_rejected} rejected, {stats.requests_refused} requests refused",
                flush=True,
            )
    finally:
        store.close()


def _serve_app(
    args: argparse.Namespace,
    store: Store,
    options: CallsOptions,
    loop: SettleLoop,
    stop: threading.Event,
    info: ServeInfo,
    directory: str | None,
) -> int:
    """Run the app in this thread (it handles the signals) and the settle loop beside it."""
    from grpc_overhead.app.runtime import Served
    from grpc_overhead.app.server import AppServer, AppServerError

    server = AppServer(
        Served(store, options, jaeger_url=args.jaeger_url, live=True),
        host=args.host,
        port=args.app_port,
    )

    def ready(url: str) -> None:
        _write_serve_info(directory, ServeInfo(info.pid, info.intake, url, info.store))
        print(f"app: {url}", flush=True)

    try:
        server.run(background=loop, on_ready=ready, stop_event=stop)
    except AppServerError as error:
        print(f"grpc-overhead serve: {error}", file=sys.stderr)
        return EXIT_USAGE
    return 0


@dataclass
class SettleLoop:
    """Waits for ``stop``, rolling settled minutes up every ``every_s`` seconds (None: never)."""

    store: Store
    options: CallsOptions
    every_s: float | None

    def __call__(self, stop: threading.Event) -> None:
        last_settle = time.monotonic()
        while not stop.wait(1.0):
            if self.every_s and time.monotonic() - last_settle >= self.every_s:
                last_settle = time.monotonic()
                _settle(self.store, self.options)


@dataclass(frozen=True)
class ServeInfo:
    """What a running serve tells other commands about itself (the store's lock names the pid)."""

    pid: int
    intake: str
    app_url: str
    store: str


def _write_serve_info(directory: str | None, info: ServeInfo) -> None:
    if directory is None:
        return
    path = os.path.join(directory, SERVE_INFO_FILE)
    try:
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            json.dump(info.__dict__, handle)
        os.replace(path + ".tmp", path)
    except OSError as error:  # only a convenience for other commands: never fatal
        print(f"grpc-overhead serve: cannot write {path}: {error.strerror}", file=sys.stderr)


def _remove_serve_info(directory: str | None) -> None:
    if directory is None:
        return
    info = read_serve_info(directory)
    if info is not None and info.pid == os.getpid():
        with contextlib.suppress(OSError):
            os.remove(os.path.join(directory, SERVE_INFO_FILE))


def read_serve_info(directory: str) -> ServeInfo | None:
    """The running serve's pid, intake and app URL for a store directory, if it wrote them."""
    try:
        with open(os.path.join(directory, SERVE_INFO_FILE), encoding="utf-8") as handle:
            data: Any = json.load(handle)
        return ServeInfo(int(data["pid"]), str(data["intake"]), str(data["app_url"]),
                         str(data["store"]))  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError):
        return None


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
