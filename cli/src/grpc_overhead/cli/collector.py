"""``grpc-overhead collector``: build the collector, print a config, run it.

    grpc-overhead collector build [--force]
    grpc-overhead collector config embedded|clickhouse
    grpc-overhead collector validate [--config embedded|clickhouse|PATH]
    grpc-overhead collector run [--config embedded|clickhouse|PATH]
                                [--otlp-port N] [--otlp-http-port N] [--intake HOST:PORT]
                                [--health-port N]

User errors (no Go, unknown config, port in use, rejected config) print one
clear message and return a non-zero code; they never show a traceback. A
taken OTLP port names its holder (``ports.holder``): with the default port
that is often a plain ``serve``, which takes OTLP on 4317 itself when free.

``run`` is safe under an init system or a pipe: SIGTERM, SIGINT and SIGHUP
(hangup: the session is over) stop the collector the graceful way (it drains
its queues and exits) and ``run`` returns once it did, with 0; if ``run``
itself is killed (SIGKILL), the collector is told to stop by the kernel. The
collector's own config reload is ``kill -HUP <collector pid>`` (printed).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from types import FrameType

from grpc_overhead.cli.ports import fixed_port_number
from grpc_overhead.collector.runner import (
    CONFIG_NAMES,
    DEFAULT_HEALTH_PORT,
    DEFAULT_INTAKE,
    DEFAULT_OTLP_HTTP_PORT,
    DEFAULT_OTLP_PORT,
    ENV_OTLP_HTTP_PORT,
    CollectorError,
    CollectorProcess,
    build_collector,
    config_path,
    resolve_config,
    validate_config,
)
from grpc_overhead.processes import holder, port_is_free

PROG = "grpc-overhead collector"


def _host_port(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    fixed_port_number(port)
    return text


def _parser() -> argparse.ArgumentParser:
    names = "|".join(CONFIG_NAMES)
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Build, configure or run the grpc-overhead OpenTelemetry Collector.",
    )
    sub = parser.add_subparsers(dest="action", metavar="{build,run,config,validate}")
    sub.required = True

    build = sub.add_parser("build", help="build collector/dist/otelcol-grpc-overhead (needs Go)")
    build.add_argument("--force", action="store_true", help="rebuild even if up to date")

    run = sub.add_parser("run", help="run the collector in the foreground until Ctrl-C")
    run.add_argument(
        "--config",
        default="embedded",
        metavar=f"{names}|PATH",
        help="shipped config name or a config file (default: embedded)",
    )
    run.add_argument(
        "--otlp-port",
        type=fixed_port_number,
        help=f"OTLP/gRPC receiver port (default {DEFAULT_OTLP_PORT})",
    )
    run.add_argument(
        "--otlp-http-port",
        type=fixed_port_number,
        help=f"OTLP/HTTP receiver port, /v1/traces (default {DEFAULT_OTLP_HTTP_PORT})",
    )
    run.add_argument(
        "--intake",
        type=_host_port,
        metavar="HOST:PORT",
        help=f"analyzer intake for the embedded config (default {DEFAULT_INTAKE})",
    )
    run.add_argument(
        "--health-port",
        type=fixed_port_number,
        help=f"health_check port (default {DEFAULT_HEALTH_PORT})",
    )
    run.add_argument(
        "--startup-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long to wait for the collector to become healthy (default 30)",
    )

    config = sub.add_parser("config", help="print a shipped config")
    config.add_argument("name", metavar=names, help="which config to print")

    validate = sub.add_parser("validate", help="check a config with the collector binary")
    validate.add_argument("--config", default="embedded", metavar=f"{names}|PATH")
    return parser


def _run(args: argparse.Namespace) -> int:
    config = resolve_config(args.config)
    collector = CollectorProcess(
        config,
        otlp_port=args.otlp_port,
        otlp_http_port=_http_port(args.otlp_http_port),
        intake=args.intake,
        health_port=args.health_port,
        startup_timeout=args.startup_timeout,
        echo=True,
        die_with_parent=True,
    )
    if args.config in CONFIG_NAMES:
        ports = (
            (collector.otlp_port, "--otlp-port"),
            (collector.otlp_http_port, "--otlp-http-port"),
        )
        for port, flag in ports:
            if not port_is_free(port):
                raise CollectorError(_otlp_port_taken(port, flag))
    build_collector()
    stopped_by: list[int] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        if not stopped_by:
            _say(f"\n{PROG}: {signal.Signals(signum).name}: stopping the collector (draining)")
        stopped_by.append(signum)
        collector.signal(signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        with collector:
            target = f" -> intake {collector.intake}" if config.name == "embedded.yaml" else ""
            _say(
                f"collector ready (config {config}, pid {collector.pid}): OTLP/gRPC on port "
                f"{collector.otlp_port}, OTLP/HTTP on {collector.otlp_http_url}{target}, "
                f"health {collector.health_url}, "
                f"queue on disk in {collector.storage_dir}. Ctrl-C to stop."
            )
            code = collector.wait()
    except CollectorError:
        if stopped_by:  # stopped while it was starting
            return 0
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopped_by:
        _say(f"{PROG}: the collector stopped (exit code {code})")
        return 0
    print(f"{PROG}: the collector exited with code {code}", file=sys.stderr)
    return code or 1


def _http_port(asked: int | None) -> int | None:
    """The OTLP/HTTP port: asked, else the environment's, else the standard one.

    A person running a collector wants 4318 even with another gRPC port (the runner
    would pick a free one then, as tests want).
    """
    if asked is not None:
        return asked
    return None if os.environ.get(ENV_OTLP_HTTP_PORT) else DEFAULT_OTLP_HTTP_PORT


def _otlp_port_taken(port: int, flag: str = "--otlp-port") -> str:
    """Who holds an OTLP port and what to do: a serve there takes the spans itself."""
    who = holder(port)
    text = f"OTLP port {port} is already in use by {who or 'another process'}: "
    if who and " serve" in who:
        return text + (
            "a plain `grpc-overhead serve` takes OTLP on the standard port itself when no "
            "collector holds it, so services already reach it without a collector. To put "
            "this collector in front, start it first (serve then leaves the port to it) or "
            f"restart serve with --standard-otlp-port off --otlp-http-port off; or pass {flag} N"
        )
    return text + f"stop it or choose another port with {flag} N"


#: Signals ``run`` turns into a graceful stop of the collector.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _say(text: str) -> None:
    """Print a status line; a closed or broken stdout (a pipe whose reader left) is no error."""
    try:
        print(text, flush=True)
    except (OSError, ValueError):
        pass


def main(argv: list[str]) -> int:
    """Entry point of ``grpc-overhead collector``; returns the exit code."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:  # --help (0) or a usage error (2), already printed
        return int(exit_.code or 0)
    try:
        if args.action == "build":
            path = build_collector(force=args.force)
            print(path)
            return 0
        if args.action == "config":
            sys.stdout.write(config_path(args.name).read_text(encoding="utf-8"))
            return 0
        if args.action == "validate":
            path = resolve_config(args.config)
            build_collector()
            validate_config(path)
            print(f"{path}: valid")
            return 0
        return _run(args)
    except CollectorError as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 1
