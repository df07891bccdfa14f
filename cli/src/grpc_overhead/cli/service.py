"""``grpc-overhead service``: run the instrumented prediction server.

Prints ``listening on HOST:PORT`` on stdout once it accepts calls (with
``--tls``, a ``tls ca: PATH`` line first); SIGTERM or SIGINT stops it
gracefully (in-flight calls get ``--grace-s`` seconds), flushes the span
pipeline and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading
import uuid

from grpc_overhead.cli.busy import busy_threads
from grpc_overhead.cli.numbers import non_negative_float, non_negative_int, positive_int
from grpc_overhead.cli.ports import port_number
from grpc_overhead.prediction.server import GRPC_COMPRESSION, ServiceConfig


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grpc-overhead service",
        description="The instrumented prediction server (Predictor: Predict, PredictStream, "
        "PredictBatch, PredictChunks, PredictUpload). Spans go to the OTLP endpoint set by "
        "the standard OTEL_* variables.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=port_number, default=0, help="port; 0 = pick a free one (default)"
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=8,
        help="handler thread-pool size (with --aio: threads running the model) (default 8)",
    )
    parser.add_argument(
        "--model-cost-ms",
        type=non_negative_float,
        default=0.0,
        help="extra CPU time burned per scored request, standing in for a heavier model",
    )
    parser.add_argument(
        "--model-wait-ms",
        type=non_negative_float,
        default=0.0,
        help="wall time slept per scored request, standing in for a model that waits "
        "(a remote feature store, an accelerator)",
    )
    parser.add_argument(
        "--busy-threads",
        type=non_negative_int,
        default=0,
        help="threads burning CPU in this process outside any handler while it serves, "
        "standing in for a server busy with other work (a background job, too many calls for "
        "one process): the GIL it holds delays each call's start (default 0)",
    )
    parser.add_argument(
        "--max-concurrent-rpcs",
        type=positive_int,
        default=None,
        help="beyond this many calls in progress the server answers RESOURCE_EXHAUSTED",
    )
    parser.add_argument(
        "--max-connection-age-s",
        type=non_negative_float,
        default=None,
        help="close connections after this age (grpc.max_connection_age_ms), forcing reconnects",
    )
    parser.add_argument(
        "--max-connection-age-grace-s",
        type=non_negative_float,
        default=5.0,
        help="time calls in flight get after a connection reached its age (default 5)",
    )
    parser.add_argument("--tls", action="store_true", help="serve TLS with a self-signed cert")
    parser.add_argument(
        "--tls-dir",
        default=None,
        help="where to write cert.pem/key.pem (default: a temporary directory removed at exit); "
        "clients trust DIR/cert.pem with --tls-ca",
    )
    parser.add_argument("--aio", action="store_true", help="use grpc.aio with async handlers")
    parser.add_argument(
        "--rest",
        action="store_true",
        help="serve the same model over HTTP/1.1 + JSON instead of gRPC (uvicorn + starlette; "
        "POST /v1/predict, /v1/predict/image), traced by OpenTelemetry's ASGI middleware",
    )
    parser.add_argument(
        "--compression",
        choices=sorted(GRPC_COMPRESSION),
        default="none",
        help="default gRPC compression of responses (default none)",
    )
    parser.add_argument(
        "--instance-id", default=None, help="returned in every response (default: a UUID)"
    )
    parser.add_argument(
        "--max-message-mb",
        type=positive_int,
        default=64,
        help="largest request/response message accepted (default 64)",
    )
    parser.add_argument(
        "--grace-s",
        type=non_negative_float,
        default=5.0,
        help="on SIGTERM/SIGINT, time in-flight calls get to finish (default 5)",
    )
    parser.add_argument("--seed", type=int, default=None, help="model weight seed")
    return parser


def config_from_args(args: argparse.Namespace) -> ServiceConfig:
    return ServiceConfig(
        host=args.host,
        port=args.port,
        workers=args.workers,
        model_cost_ms=args.model_cost_ms,
        model_wait_ms=args.model_wait_ms,
        max_concurrent_rpcs=args.max_concurrent_rpcs,
        max_connection_age_s=args.max_connection_age_s,
        max_connection_age_grace_s=args.max_connection_age_grace_s,
        tls=args.tls or args.tls_dir is not None,
        tls_dir=args.tls_dir,
        aio=args.aio,
        compression=args.compression,
        instance_id=args.instance_id or str(uuid.uuid4()),
        max_message_mb=args.max_message_mb,
        grace_s=args.grace_s,
        seed=args.seed,
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    config = config_from_args(args)
    if args.rest:
        return _serve_rest(args, config)

    from grpc_overhead.instrumentation import default_pipeline
    from grpc_overhead.prediction.server import prepare_tls
    from grpc_overhead.prediction.telemetry import close_pipeline

    try:
        tls = prepare_tls(config)
    except OSError as error:
        print(f"grpc-overhead service: cannot write TLS files: {error}", file=sys.stderr)
        return 2
    pipeline = default_pipeline()
    try:
        with busy_threads(args.busy_threads):
            if config.aio:
                return asyncio.run(_serve_aio(config, pipeline, tls))
            return _serve(config, pipeline, tls)
    except OSError as error:
        print(f"grpc-overhead service: {error}", file=sys.stderr)
        return 2
    finally:
        try:
            close_pipeline(pipeline, label="grpc-overhead service")
        finally:
            if tls is not None:
                tls.cleanup()


def _announce(config: ServiceConfig, port: int, tls, transport: str = "gRPC") -> None:
    from grpc_overhead.prediction.server import format_address

    if tls is not None:
        print(f"tls ca: {tls.certificate}", flush=True)
    mode = "aio" if config.aio else f"{config.workers} workers"
    mode = f"{transport}, {mode}"
    print(
        f"grpc-overhead service: instance {config.instance_id}, {mode}, "
        f"model cost {config.model_cost_ms} ms, compression {config.compression}",
        file=sys.stderr,
        flush=True,
    )
    print(f"listening on {format_address(config.host, port)}", flush=True)


def _serve(config: ServiceConfig, pipeline, tls) -> int:
    from grpc_overhead.prediction.server import build_server

    server, port = build_server(config, pipeline, tls)
    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum, _frame):
        received.append(signum)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.start()
        _announce(config, port, tls)
        while not stop.wait(0.5):
            pass
        _stopping(received)
        server.stop(config.grace_s).wait(config.grace_s + 5)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


async def _serve_aio(config: ServiceConfig, pipeline, tls) -> int:
    from grpc_overhead.prediction.server import build_aio_server

    server, port, pool = build_aio_server(config, pipeline, tls)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    received: list[int] = []

    def on_signal(signum: int) -> None:
        received.append(signum)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await server.start()
        _announce(config, port, tls)
        await stop.wait()
        _stopping(received)
        await server.stop(config.grace_s)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        pool.shutdown(wait=False, cancel_futures=True)
    return 0


def _stopping(received: list[int]) -> None:
    name = signal.Signals(received[0]).name if received else "signal"
    print(f"grpc-overhead service: {name}, stopping", file=sys.stderr, flush=True)


def _serve_rest(args: argparse.Namespace, config: ServiceConfig) -> int:
    """The REST baseline: same model, same announcements, HTTP/1.1 + JSON."""
    options = {
        "--tls": config.tls,
        "--aio": args.aio,
        "--compression": args.compression != "none",
        "--max-concurrent-rpcs": args.max_concurrent_rpcs is not None,
        "--max-connection-age-s": args.max_connection_age_s is not None,
        "--busy-threads": args.busy_threads > 0,
    }
    unsupported = [name for name, used in options.items() if used]
    if unsupported:
        print(
            f"grpc-overhead service: --rest does not take {', '.join(unsupported)}", file=sys.stderr
        )
        return 2
    from grpc_overhead.prediction.rest_server import serve

    def announce(port: int) -> None:
        _announce(config, port, None, transport="REST (HTTP/1.1)")

    try:
        return serve(config, announce)
    except OSError as error:
        print(f"grpc-overhead service: {error}", file=sys.stderr)
        return 2
