"""``grpc-overhead serve``'s command line: where it stores, the ports it takes (and why the
defaults meet an SDK with no configuration), the app, and the HTTP interface's, security
and retention options their own modules add."""

from __future__ import annotations

import argparse
import os

from grpc_overhead.analyzer.intake import DEFAULT_OTLP_PORT, STANDARD_OTLP_HTTP_PORT
from grpc_overhead.analyzer.store import DEFAULT_STORE_DIR
from grpc_overhead.cli.ports import STANDARD_OTLP_PORT, optional_port, port_number
from grpc_overhead.cli.serve_http import add_http_arguments
from grpc_overhead.cli.serve_ports import NOT_GIVEN, optional_port_or_free
from grpc_overhead.cli.serve_retention import add_retention_arguments
from grpc_overhead.cli.serve_security import add_security_arguments
from grpc_overhead.instrumentation import environment

DEFAULT_APP_PORT = 8501


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(
        prog="grpc-overhead serve",
        description="Receive OTLP spans, store them (embedded chDB or a ClickHouse server) "
        "and serve the web app on them, in one process.",
        epilog=f"Defaults that meet: OpenTelemetry SDKs send to localhost:{STANDARD_OTLP_PORT} "
        "when no endpoint is configured, and the embedded collector config listens there and "
        f"forwards to the intake on {DEFAULT_OTLP_PORT}. A plain serve therefore also takes OTLP "
        f"on {STANDARD_OTLP_PORT} whenever no other process (a collector) holds it, so a service "
        "started with no configuration reaches it directly; with a collector there, the "
        f"collector forwards to the intake. With --otlp-port N, {STANDARD_OTLP_PORT} is left "
        "alone unless --standard-otlp-port asks for it.",
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
        type=port_number,
        metavar="N",
        help=f"OTLP/gRPC port of the intake, where a collector forwards (default "
        f"{DEFAULT_OTLP_PORT}; 0 picks a free one)",
    )
    result.add_argument(
        "--standard-otlp-port",
        type=optional_port,
        metavar="N|off",
        help=f"also take OTLP on this port, where OpenTelemetry SDKs send when no endpoint is "
        f"configured. Default: {STANDARD_OTLP_PORT} when --otlp-port is not given and no other "
        "process (a collector) holds it, off otherwise; given explicitly, a taken port is an "
        "error",
    )
    result.add_argument(
        "--otlp-http-port",
        type=optional_port_or_free,
        default=NOT_GIVEN,
        metavar="N|off",
        help=f"also take OTLP/HTTP (POST /v1/traces, protobuf or JSON, gzip) on this port, "
        f"where the Java agent, Node and .NET send by default. Default: {STANDARD_OTLP_HTTP_PORT} "
        "when --otlp-port is not given and no other process holds it, off otherwise; given "
        "explicitly, a taken port is an error (0 picks a free one)",
    )
    result.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    app = result.add_mutually_exclusive_group()
    app.add_argument(
        "--app-port",
        type=port_number,
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
    add_http_arguments(result)
    add_security_arguments(result)
    add_retention_arguments(result)
    return result
