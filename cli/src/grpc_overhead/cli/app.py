"""``grpc-overhead app``: the web app on data already in a store, without an intake.

    grpc-overhead app [--store DIR | --clickhouse URL] [--port 8501] [--host 127.0.0.1]
                      [--tls-cert FILE --tls-key FILE]
                      [--password-file FILE | --oidc-file FILE] [--insecure]
                      [--jaeger-url URL] [--no-browser]

A chDB directory belongs to one process. When ``grpc-overhead serve`` owns it,
this app reads it through serve's ClickHouse HTTP interface (serve records
where in ``DIR/grpc-overhead-serve.json``); a serve started with --no-http
cannot be read, and the message says where its own app runs. Nothing is
received here; like ``report``, the command prepares what the analysis reads
where it owns the store: the calls view before it serves, and the roll-up of
settled minutes before it serves when it takes seconds (up to 100,000 call halves
not rolled up), beside the app otherwise: a million calls nobody settled took 25 s
to roll up before the app answered; its pages now compute those minutes raw until
the roll-up lands (bench/app_start.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from grpc_overhead.analyzer.errors import AnalyzerError, StoreLocked, brief
from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.readiness import prepare_for_reading, unsettled_halves
from grpc_overhead.analyzer.store import DEFAULT_STORE_DIR, Store, open_store
from grpc_overhead.analyzer.tls import Tls
from grpc_overhead.app import runtime
from grpc_overhead.app.app_server import AppServer, AppServerError, check_port, open_browser
from grpc_overhead.app.oidc import OidcLogin
from grpc_overhead.app.runtime import Served
from grpc_overhead.cli.ports import port_number
from grpc_overhead.cli.report import INTAKE_HINT, add_store_arguments, through_serve
from grpc_overhead.cli.serve import read_serve_info
from grpc_overhead.cli.serve_arguments import DEFAULT_APP_PORT
from grpc_overhead.cli.serve_security import (
    app_exposure,
    app_login,
    refusal,
    tls_from_args,
    warning,
)
from grpc_overhead.instrumentation import environment

EXIT_USAGE = 2


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(
        prog="grpc-overhead app",
        description="The web app (Streamlit) on the calls already in a store.",
    )
    add_store_arguments(result)
    result.add_argument(
        "--port",
        type=port_number,
        default=DEFAULT_APP_PORT,
        metavar="N",
        help=f"port of the app (default {DEFAULT_APP_PORT}; 0 picks a free one)",
    )
    result.add_argument("--host", default="127.0.0.1", help="address to listen on")
    result.add_argument(
        "--jaeger-url",
        metavar="URL",
        default=os.environ.get(environment.JAEGER_URL, ""),
        help="Jaeger UI base URL for trace links (default $GRPC_OVERHEAD_JAEGER_URL)",
    )
    result.add_argument("--no-browser", action="store_true", help="do not open a browser")
    result.add_argument("--tls-cert", metavar="FILE", help="PEM certificate chain: HTTPS")
    result.add_argument("--tls-key", metavar="FILE", help="PEM private key of --tls-cert")
    result.add_argument(
        "--password-file", metavar="FILE", help="file holding the team's password the app asks for"
    )
    result.add_argument(
        "--oidc-file",
        metavar="FILE",
        help="a login through an OpenID Connect identity provider instead: "
        "Streamlit's [auth] secrets (docs/team.md)",
    )
    result.add_argument(
        "--insecure",
        action="store_true",
        help="listen on a non-loopback --host without TLS and a password",
    )
    return result


def _guarded(args: argparse.Namespace) -> tuple[Tls | None, str | None, OidcLogin | None]:
    """TLS and the login as the flags ask; the exposure rule of ``serve_security``."""
    tls = tls_from_args(args)
    password, oidc = app_login(args.password_file, args.oidc_file, tls, "--")
    exposed = app_exposure(args.host, tls, password or oidc, "--")
    if exposed and not args.insecure:
        raise AppCommandError(refusal(exposed))
    if exposed:
        print(warning(exposed, "app"), file=sys.stderr)
    return tls, password, oidc


class AppCommandError(AnalyzerError):
    """A condition the user fixes (no store, store held by serve): one message, exit 2."""


def locked_by_serve_message(directory: str, error: StoreLocked) -> str:
    """The lock message, plus where the owning serve's app already runs when we know it."""
    pid = error.holder_pid
    info = read_serve_info(directory)
    if info is None or pid is None or info.pid != pid:
        return str(error)
    if info.app_url:
        return (
            f"store {directory} is owned by `grpc-overhead serve` (process {pid}), which "
            f"already serves the app on it: open {info.app_url}\n"
            "(It runs with --no-http, so no other process can read the store; restart it "
            "without --no-http to open the app here too.)"
        )
    return (
        f"store {directory} is owned by `grpc-overhead serve` (process {pid}) running with "
        "--no-app and --no-http: restart it without --no-http (readers go through it) or "
        "without --no-app, or stop it and run `grpc-overhead app` again."
    )


def open_for_app(args: argparse.Namespace) -> Store:
    if args.clickhouse:
        return open_store(None, args.clickhouse, **through_serve())
    directory = os.path.abspath(args.store or DEFAULT_STORE_DIR)
    if not os.path.isdir(directory):
        raise AppCommandError(
            f"no store at {directory}: pass --store DIR of a `grpc-overhead serve` or `demo` "
            "store (or --clickhouse URL), or run `grpc-overhead demo` to make one"
        )
    try:  # read through the serve that owns it; otherwise held raises before any engine starts
        return open_store(directory, **through_serve())
    except StoreLocked as error:
        raise StoreLocked(
            locked_by_serve_message(directory, error),
            location=directory,
            holder_pid=error.holder_pid,
        ) from error


def prepare(store: Store, options: CallsOptions) -> None:
    """What ``report`` does before reading but the roll-up of settled minutes (``run``
    decides whether it runs before the app or beside it): the calls view (idempotent)."""
    missing = prepare_for_reading(store, options, settle_now=False)
    if missing:
        raise AppCommandError(f"{missing}. {INTAKE_HINT}")


def _say(message: str) -> None:
    print(f"grpc-overhead app: {message}", flush=True)


def run(args: argparse.Namespace) -> int:
    tls, password, oidc = _guarded(args)
    check_port(args.host, args.port, option="--port")
    options = CallsOptions()
    store = open_for_app(args)
    settling: runtime.BackgroundSettle | None = None
    try:
        prepare(store, options)
        if not store.backend.owns_data:
            pass  # read through serve, which rolls it up
        elif unsettled_halves(store, options) <= runtime.FOREGROUND_SETTLE_HALVES:
            prepare_for_reading(store, options)  # seconds at most: pages read it from the start
        else:
            settling = runtime.BackgroundSettle(store, options, report=_say).start()
        server = AppServer(
            Served(
                store,
                options,
                jaeger_url=args.jaeger_url,
                # Read through serve or from a ClickHouse server: others write it meanwhile.
                live=not store.backend.owns_data,
                password=password,
                oidc=oidc,
            ),
            host=args.host,
            port=args.port,
            option="--port",
            tls=tls,
        )

        def ready(url: str) -> None:
            print(f"store: {store.description}", flush=True)
            print(f"app: {url}", flush=True)
            if not args.no_browser:
                open_browser(url)

        server.run(on_ready=ready)
    finally:
        if settling is not None:
            settling.stop()
            if settling.error is not None:
                print(
                    f"grpc-overhead app: rolling up settled minutes failed: "
                    f"{brief(settling.error)}",
                    file=sys.stderr,
                )
        store.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run(args)
    except (AnalyzerError, AppServerError) as error:
        print(f"grpc-overhead app: {error}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
