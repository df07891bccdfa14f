"""``grpc-overhead serve``: the intake, the store and the web app in one process.

    grpc-overhead serve [--store DIR | --clickhouse URL] [--otlp-port 4327] [--host 127.0.0.1]
                        [--standard-otlp-port 4317 | off] [--otlp-http-port 4318 | off]
                        [--app-port 8501 | --no-app]
                        [--jaeger-url URL]
                        [--http-port 8123 | --no-http] [--http-host 127.0.0.1]
                        [--http-user U] [--http-password-file FILE]
                        [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]
                        [--auth-token-file FILE] [--insecure]
                        [--app-password-file FILE | --app-oidc-file FILE]
                        [--retention 7d] [--rollup-retention 90d] [--max-store-gb 20]

Point the collector's ``otlp`` exporter (or any OTLP/gRPC SDK exporter) at
the intake; spans land in ``otel_traces`` exactly as the collector's
clickhouse exporter would write them.

Defaults that meet: an OpenTelemetry SDK with no endpoint configured sends to
localhost:4317, and the embedded collector config listens there and forwards
to the intake on 4327. So a plain ``serve`` (no ``--otlp-port``) also takes
OTLP on 4317 when no other process holds it: a service started with no
configuration reaches it, with or without a collector in between. When 4317
is taken (a collector, presumably forwarding here) serve names the holder and
goes on. Whoever chooses the intake port (the demo, tests, a collector
wiring) wires things explicitly, so ``--otlp-port N`` leaves 4317 alone
unless ``--standard-otlp-port`` asks for it, and then a taken port is an error.

OTLP/HTTP (``POST /v1/traces``, protobuf or JSON, gzip) follows the same rules on
OpenTelemetry's standard HTTP port 4318, where the Java agent, the Node SDK and .NET
send by default: a plain serve takes it when free and names the holder otherwise;
``--otlp-http-port N`` asks for a port (a taken one is an error), ``off`` for none.

The Streamlit app runs in this same process because a chDB directory belongs
to one process: it reads the store this process holds. Runs until SIGINT or
SIGTERM, then stops the app, flushes what the intake buffered and closes the
store.

On an embedded store, serve also speaks ClickHouse's HTTP interface
(``--http-port``, default 8123, loopback; read-only, with the limits of
``grpc-overhead sql``): curl and ClickHouse clients read the store there, and
so do ``report``, ``sql`` and ``app`` started against the same directory,
which serve owns. While it runs, serve writes ``DIR/grpc-overhead-serve.json``
(its pid, intake, app and HTTP URLs: ``store.owner``) so they find it.

Beyond loopback it needs TLS and authentication (``serve_security``: the intake's tokens,
the HTTP interface's and the app's passwords, from files) or says ``--insecure``.

Nothing expires unless asked: ``--retention`` drops spans and calls that long after they
started (the tables' TTL, applied by the engine's merges), ``--rollup-retention`` the
per-minute rollups, and ``--max-store-gb`` keeps an embedded store within a disk budget by
dropping the oldest spans and calls first (``analyzer.retention``).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from grpc_overhead.analyzer import rollup
from grpc_overhead.analyzer.errors import AnalyzerError, BadInput, StoreLocked
from grpc_overhead.analyzer.intake import (
    Intake,
    IntakeConfig,
)
from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.phase_view import create_call_tables
from grpc_overhead.analyzer.retention import Retention
from grpc_overhead.analyzer.store import DEFAULT_STORE_DIR, Store, open_store
from grpc_overhead.analyzer.store.owner import SERVE_INFO_FILE as SERVE_INFO_FILE
from grpc_overhead.analyzer.store.owner import ServeInfo, remove_serve_info, write_serve_info
from grpc_overhead.analyzer.store.owner import read_serve_info as read_serve_info
from grpc_overhead.cli.serve_arguments import parser
from grpc_overhead.cli.serve_http import start_http
from grpc_overhead.cli.serve_ports import (
    OtlpPorts,
    held_by,
    say_http_port,
    say_standard_port,
    standard_port_taken,
)
from grpc_overhead.cli.serve_retention import (
    StoreKeeper,
    retention_from_args,
)
from grpc_overhead.cli.serve_security import (
    Security,
    exposure,
    refusal,
    security_from_args,
    warning,
)
from grpc_overhead.processes import port_is_free

EXIT_USAGE = 2


def main(argv: Sequence[str] | None = None, *, stop: threading.Event | None = None) -> int:
    args = parser().parse_args(argv)
    ports = OtlpPorts.from_args(args)
    try:
        retention = retention_from_args(args)
        security = security_from_args(args)
    except BadInput as error:
        print(f"grpc-overhead serve: {error}", file=sys.stderr)
        return EXIT_USAGE
    exposed = exposure(args, security, http=not (args.clickhouse or args.no_http))
    if exposed and not args.insecure:
        print(f"grpc-overhead serve: {refusal(exposed)}", file=sys.stderr)
        return EXIT_USAGE
    if exposed:
        print(warning(exposed), file=sys.stderr)
    stop = stop or threading.Event()
    # From here on a SIGTERM or Ctrl-C stops serve the graceful way, even one that comes
    # while it starts (the first lines are printed before its loop begins); a program that
    # embeds serve gets its own handlers back when serve returns.
    previous = _stop_on_signals(stop)
    try:
        return _start(args, ports, retention, security, stop)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _start(
    args: argparse.Namespace,
    ports: OtlpPorts,
    retention: Retention,
    security: Security,
    stop: threading.Event,
) -> int:
    """Open the store, start the intake, the HTTP interface and the app; serve until ``stop``."""
    if not args.no_app:
        from grpc_overhead.app.app_server import AppServerError, check_port

        try:  # before anything starts: a taken port is the commonest failure
            check_port(args.host, args.app_port)
        except AppServerError as error:
            print(f"grpc-overhead serve: {error}", file=sys.stderr)
            return EXIT_USAGE
    try:
        store = open_store(
            None if args.clickhouse else (args.store or DEFAULT_STORE_DIR),
            args.clickhouse,
            through_owner=False,  # serve owns its store, never reads another serve's
        )
    except AnalyzerError as error:
        print(f"grpc-overhead serve: {_served_already(error) or error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        # Checked first: grpcio would log an error line for a port it cannot bind.
        standard = ports.standard
        extra = (standard,) if standard and port_is_free(standard, args.host) else ()
        http_port = ports.http
        if http_port and not ports.http_required and not port_is_free(http_port, args.host):
            http_port = None  # the standard port is someone else's: said below
        config = IntakeConfig(
            host=args.host,
            port=ports.intake,
            extra_ports=extra,
            http_port=http_port,
            tls=security.tls,
            credentials=security.credentials,
        )
        intake = Intake(store, config)
        calls_options = CallsOptions.from_schema(intake.schema)  # the store's database
        try:
            intake.start()
            # Calls are assembled as spans arrive (the view), not when a report asks.
            create_call_tables(store, calls_options)
        except (AnalyzerError, OSError) as error:
            held = held_by(error, ports)
            print(f"grpc-overhead serve: {error}{held}", file=sys.stderr)
            intake.stop()
            return EXIT_USAGE
        if ports.standard is not None and not intake.extra_ports and ports.standard_required:
            print(f"grpc-overhead serve: {standard_port_taken(args.host, ports)}", file=sys.stderr)
            intake.stop()
            return EXIT_USAGE
        # Where readers find serve (grpc-overhead-serve.json): the store's directory.
        directory = None if args.clickhouse else os.path.abspath(args.store or DEFAULT_STORE_DIR)
        owner = store.backend.owns_data  # the embedded store: this process alone has it
        try:  # a ClickHouse server has its own HTTP interface
            http = start_http(args, store, security) if owner else None
        except BadInput as error:
            print(f"grpc-overhead serve: {error}", file=sys.stderr)
            intake.stop()
            return EXIT_USAGE
        http_url = http.url if http else ""
        certificate = os.path.abspath(security.tls.certificate_path) if security.tls else ""
        info = ServeInfo(
            os.getpid(),
            intake.address,
            "",
            store.description,
            http_url,
            intake.http_url,
            certificate,
        )
        _write_serve_info(directory, info)  # before saying so: readers may start at once
        guarded = [
            word for word, on in (("TLS", security.tls), ("tokens", security.credentials)) if on
        ]
        print(
            f"intake listening on {intake.address}"
            + (f" ({' and '.join(guarded)})" if guarded else ""),
            flush=True,
        )
        say_standard_port(args.host, ports, intake)
        say_http_port(args.host, ports, intake)
        print(f"store: {store.description}", flush=True)
        if http is not None:
            print(f"clickhouse http: {http_url}", flush=True)
        elif owner:
            print("clickhouse http: off (--no-http)", flush=True)
        # The embedded store has exactly one owner, this process: it rolls settled
        # minutes up. On a ClickHouse server several processes may run; none settles
        # there, so no minute is ever rolled up twice.
        keeper = StoreKeeper(store, calls_options, retention)
        if retention.active:
            keeper()  # the TTLs are in place before the first span is said to be stored
            print(f"retention: {retention.describe()}", flush=True)
        loop = SettleLoop(store, calls_options, SETTLE_INTERVAL_S if owner else None, keeper)
        try:
            if args.no_app:
                print("app: off (--no-app)", flush=True)
                loop(stop)
                return 0
            return _serve_app(
                args,
                store,
                calls_options,
                loop,
                stop,
                info,
                directory,
                intake.stored_batches,
                security,
            )
        finally:
            if directory:
                remove_serve_info(directory)
            if http is not None:
                http.stop()
            intake.stop()
            stats = intake.stats()
            print(
                f"intake stopped: {stats.spans_inserted} spans stored, "
                f"{stats.spans_rejected} rejected, {stats.duplicate_spans} already stored "
                f"(retries, not stored again), {stats.requests_refused} requests refused"
                + (
                    f", {stats.requests_unauthenticated} unauthenticated"
                    if security.credentials
                    else ""
                ),
                flush=True,
            )
    finally:
        store.close()


def _served_already(error: AnalyzerError) -> str:
    """What to do when another serve owns the store ('' if another kind of process does).

    The generic lock message is about readers (they go through a serve); a second
    serve needs to hear that one already takes this store's spans, and where.
    """
    if not isinstance(error, StoreLocked) or not error.location:
        return ""
    info = read_serve_info(error.location)
    if info is None or info.pid != error.holder_pid:
        return ""
    http = f", ClickHouse HTTP {info.http_url}" if info.http_url else ""
    return (
        f"store {error.location} is already served by process {info.pid}, a `grpc-overhead "
        f"serve` (intake {info.intake}{http}); a store has one serve. Send spans to that "
        "intake and read with report, sql or app (they go through it); or stop it first, "
        "or pass another --store DIR"
    )


def _serve_app(
    args: argparse.Namespace,
    store: Store,
    options: CallsOptions,
    loop: SettleLoop,
    stop: threading.Event,
    info: ServeInfo,
    directory: str | None,
    stored_batches: Callable[[], int],
    security: Security,
) -> int:
    """Run the app in this thread (it handles the signals) and the settle loop beside it;
    its pages rerun as soon as the intake has stored a batch (``Served.changes``)."""
    from grpc_overhead.app.app_server import AppServer, AppServerError
    from grpc_overhead.app.runtime import Served

    served = Served(
        store,
        options,
        jaeger_url=args.jaeger_url,
        live=True,
        changes=stored_batches,
        password=security.app_password,
        oidc=security.app_oidc,
    )
    server = AppServer(served, host=args.host, port=args.app_port, tls=security.tls)

    def ready(url: str) -> None:
        _write_serve_info(directory, replace(info, app_url=url))
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
    #: Retention and the disk budget, looked after between settles (it paces itself).
    keeper: StoreKeeper | None = None

    def __call__(self, stop: threading.Event) -> None:
        last_settle = time.monotonic()
        while not stop.wait(1.0):
            if self.every_s and time.monotonic() - last_settle >= self.every_s:
                last_settle = time.monotonic()
                _settle(self.store, self.options)
            if self.keeper is not None:
                self.keeper()


def _write_serve_info(directory: str | None, info: ServeInfo) -> None:
    if directory is None:
        return
    try:
        write_serve_info(directory, info)
    except OSError as error:  # readers then cannot find serve: say so, but keep serving
        print(
            f"grpc-overhead serve: cannot write {SERVE_INFO_FILE} in {directory}: {error.strerror}",
            file=sys.stderr,
        )


SETTLE_INTERVAL_S = 60.0


def _settle(store: Store, options: CallsOptions) -> None:
    """Roll settled minutes up; a failure is reported and retried next time, never fatal."""
    try:
        rollup.settle(store, options)
    except AnalyzerError as error:
        print(
            f"grpc-overhead serve: rolling up minutes failed (retrying): {error}", file=sys.stderr
        )


def _stop_on_signals(stop: threading.Event) -> dict[int, Any]:
    """SIGINT and SIGTERM set ``stop``; the handlers they had (none off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return {}  # embedded in a test or another program: it sets ``stop`` itself

    def handle(signum: int, frame: object) -> None:
        stop.set()

    return {signum: signal.signal(signum, handle) for signum in (signal.SIGINT, signal.SIGTERM)}
