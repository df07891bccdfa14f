"""``serve``'s ClickHouse HTTP interface: its flags and starting it on the embedded store.

Read-only for every user, with the limits of ``grpc-overhead sql``; its password comes
from a file or the environment (``serve_security``), over TLS when serve has a
certificate.
"""

from __future__ import annotations

import argparse
import os
import sys

from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.http_interface import (
    DEFAULT_HTTP_HOST,
    DEFAULT_HTTP_PORT,
    Answerer,
    Credentials,
    HttpInterface,
)
from grpc_overhead.analyzer.store import Store
from grpc_overhead.cli.ports import port_number
from grpc_overhead.cli.serve_security import Security, security_from_args
from grpc_overhead.instrumentation import environment


def add_http_arguments(result: argparse.ArgumentParser) -> None:
    """``--http-port N | --no-http``, ``--http-host``, ``--http-user``, ``--http-password``."""
    http = result.add_mutually_exclusive_group()
    http.add_argument(
        "--http-port",
        type=port_number,
        metavar="N",
        help=f"port of the ClickHouse HTTP interface on an embedded store (default "
        f"{DEFAULT_HTTP_PORT}, or a free port when that one is taken; 0 picks a free one)",
    )
    http.add_argument(
        "--no-http", action="store_true", help="no ClickHouse HTTP interface (readers then fail)"
    )
    result.add_argument(
        "--http-host",
        default=DEFAULT_HTTP_HOST,
        help=f"address the HTTP interface listens on (default {DEFAULT_HTTP_HOST}: this host "
        "only; it answers every query read-only, so widen it only with a password)",
    )
    result.add_argument(
        "--http-user",
        default=os.environ.get(environment.HTTP_USER, "default"),
        help=f"user the HTTP interface accepts (default ${environment.HTTP_USER} or 'default')",
    )
    result.add_argument(
        "--http-password-file",
        metavar="FILE",
        help=f"file holding the password it asks for (default ${environment.HTTP_PASSWORD}; "
        "unset: none)",
    )
    result.add_argument(
        "--http-password",
        help="deprecated (visible in ps): use --http-password-file or "
        f"${environment.HTTP_PASSWORD}",
    )


def start_http(
    args: argparse.Namespace, store: Store, security: Security | None = None
) -> HttpInterface | None:
    """The HTTP interface on ``store`` as the flags ask, started; None with --no-http.

    The default port taken (a ClickHouse server, another serve) is no reason to
    fail: a free port is used and advertised instead. A port asked for is.
    """
    if args.no_http:
        return None
    security = security or security_from_args(args)
    credentials = Credentials(args.http_user or "default", security.http_password)
    answerer = Answerer(store, credentials=credentials)
    tls = security.tls
    if args.http_port is not None:
        return HttpInterface(answerer, args.http_host, args.http_port, tls=tls).start()
    try:
        return HttpInterface(answerer, args.http_host, DEFAULT_HTTP_PORT, tls=tls).start()
    except BadInput:
        interface = HttpInterface(answerer, args.http_host, 0, tls=tls).start()
        print(
            f"grpc-overhead serve: port {DEFAULT_HTTP_PORT} is taken; the ClickHouse HTTP "
            f"interface listens on {interface.url} instead",
            file=sys.stderr,
        )
        return interface
