"""``grpc-overhead load``: drive the prediction service and summarize latencies (ghz-like).

Exit codes: 0 when the run completed (RPC errors are data, reported in the
summary), 2 for bad arguments or an unreachable target, 130 when interrupted
(the partial summary is still printed).

Ctrl-C and SIGTERM stop a run the same way: the calls in flight finish, the spans are
flushed, the partial summary is printed. SIGTERM matters because a shell starts a
background job with SIGINT ignored (``make demo &``, ``nohup``), and a parent stopping
its load generator must not have to guess how it was started.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import sys
import threading
import time
from pathlib import Path

from grpc_overhead.cli.busy import busy_threads
from grpc_overhead.cli.numbers import non_negative_int, positive_float, positive_int
from grpc_overhead.instrumentation.environment import RUN_ID as RUN_ID_VARIABLE
from grpc_overhead.load_generator.workload import MODES

GRPC_COMPRESSIONS = ("none", "gzip", "deflate")
APPLICATION_CODECS = ("zstd", "lz4", "snappy")
MAX_DURATION_S = 24 * 3600.0


class UsageError(Exception):
    pass


def default_run_id() -> str:
    return time.strftime("run-%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grpc-overhead load",
        description="Load generator for the prediction service (closed loop by concurrency, "
        "or open loop at a Poisson rate). Every call is instrumented; spans carry the run id.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--target",
        action="append",
        metavar="HOST:PORT",
        help="server address; repeat or comma-separate for several (calls go round-robin)",
    )
    stop = parser.add_argument_group("how long (the run ends at whichever comes first)")
    stop.add_argument(
        "--calls", type=positive_int, default=None, help="number of calls (default 200)"
    )
    stop.add_argument(
        "--duration", type=positive_float, default=None, metavar="S", help="seconds to run"
    )
    shape = parser.add_argument_group("load shape")
    shape.add_argument(
        "--concurrency",
        type=positive_int,
        default=None,
        help="closed loop: concurrent callers (default 8); open loop: worker threads, i.e. the "
        "most calls in flight (default 32)",
    )
    shape.add_argument(
        "--channels",
        type=positive_int,
        default=1,
        help="channels (HTTP/2 connections) per target; callers are spread over them",
    )
    shape.add_argument(
        "--rps",
        type=positive_float,
        default=None,
        help="open loop: Poisson arrivals at this mean rate, sent on schedule regardless of "
        "completions (default: closed loop)",
    )
    shape.add_argument(
        "--late-threshold-ms",
        type=positive_float,
        default=1.0,
        help="open loop: a call starting this much after its scheduled time counts as late",
    )
    shape.add_argument(
        "--busy-threads",
        type=non_negative_int,
        default=0,
        help="threads burning CPU in this process while the run lasts, standing in for a "
        "client busy with its own work (feature computation): what a saturated client does "
        "to the phases (default 0)",
    )
    payload = parser.add_argument_group("payload")
    payload.add_argument("--entities", type=non_negative_int, default=200)
    payload.add_argument("--features", type=positive_int, default=32)
    payload.add_argument(
        "--encoding",
        choices=("repeated", "packed"),
        default=None,
        help="repeated float per entity, or one packed float32 blob (default: repeated; packed "
        "when --compression is zstd/lz4/snappy)",
    )
    payload.add_argument(
        "--compression",
        choices=GRPC_COMPRESSIONS + APPLICATION_CODECS,
        default="none",
        help="gzip/deflate: gRPC's own call compression (whole messages); zstd/lz4/snappy: "
        "application-level compression of the packed feature blob, which forces --encoding "
        "packed",
    )
    payload.add_argument(
        "--mode",
        choices=MODES,
        default="unary",
        help="unary=Predict, stream=PredictStream (bidi), batch=PredictBatch, "
        "chunks=PredictChunks (server streaming), upload=PredictUpload (client streaming)",
    )
    payload.add_argument(
        "--payload",
        choices=("structured", "image"),
        default="structured",
        help="structured: entities x features; image: --image-bytes of JPEG-like bytes per "
        "request, scored as one entity",
    )
    payload.add_argument("--image-bytes", type=positive_int, default=230_000, metavar="N")
    payload.add_argument(
        "--transport",
        choices=("grpc", "rest"),
        default="grpc",
        help="rest: the same model over HTTP/1.1 + JSON (`grpc-overhead service --rest`), "
        "one connection per caller; unary only",
    )
    payload.add_argument(
        "--rest-body",
        choices=("json", "binary", "base64"),
        default="json",
        help="rest images: base64 inside JSON (json, base64) or the raw bytes (binary)",
    )
    payload.add_argument(
        "--stream-messages", type=positive_int, default=10, help="stream: messages per call"
    )
    payload.add_argument(
        "--stream-lockstep",
        action="store_true",
        help="stream: send each request only once the previous one's response arrived "
        "(request/response over one stream) instead of all requests at once",
    )
    payload.add_argument(
        "--batch-size", type=positive_int, default=8, help="batch: requests per message"
    )
    payload.add_argument(
        "--chunk-entities",
        type=positive_int,
        default=64,
        help="chunks/upload: entities per streamed message",
    )
    connection = parser.add_argument_group("connection")
    connection.add_argument("--tls", action="store_true", help="connect with TLS")
    connection.add_argument(
        "--tls-ca",
        default=None,
        metavar="PATH",
        help="PEM certificate(s) to trust (implies --tls), e.g. the service's DIR/cert.pem",
    )
    connection.add_argument(
        "--tls-server-name", default=None, help="expected server name, if not the target host"
    )
    connection.add_argument(
        "--timeout", type=positive_float, default=10.0, metavar="S", help="deadline per call"
    )
    connection.add_argument(
        "--connect-timeout",
        type=positive_float,
        default=5.0,
        metavar="S",
        help="how long to wait for every channel to connect before giving up",
    )
    connection.add_argument("--max-message-mb", type=positive_int, default=64)
    output = parser.add_argument_group("output")
    output.add_argument(
        "--run-id",
        default=None,
        help="put on every span as grpc_overhead.run_id (default: $GRPC_OVERHEAD_RUN_ID or "
        "run-YYYYmmdd-HHMMSS-xxxx)",
    )
    output.add_argument("--json", action="store_true", help="print the summary as JSON")
    output.add_argument("--quiet", action="store_true", help="no progress bar")
    output.add_argument("--seed", type=int, default=0, help="payload and arrival seed")
    return parser


def parse_target(text: str) -> str:
    target = text.strip()
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--target {text!r}: expected HOST:PORT with a port 1..65535")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise UsageError(f"--target {text!r}: write IPv6 addresses as [ADDR]:PORT")
    return target


def config_from_args(args: argparse.Namespace):
    from grpc_overhead.load_generator.runner import LoadConfig
    from grpc_overhead.load_generator.workload import WorkloadSpec
    from grpc_overhead.prediction.model import MAX_FEATURES

    if not args.target:
        raise UsageError("--target HOST:PORT is required (start one with `grpc-overhead service`)")
    targets = [parse_target(part) for item in args.target for part in item.split(",") if part]
    if not targets:
        raise UsageError("--target: no address given")
    if args.features > MAX_FEATURES:
        raise UsageError(f"--features {args.features}: the model supports at most {MAX_FEATURES}")
    if args.duration is not None and args.duration > MAX_DURATION_S:
        raise UsageError(f"--duration {args.duration:g}: at most {MAX_DURATION_S:g} s")
    calls = args.calls
    if calls is None and args.duration is None:
        calls = 200
    compression = args.compression
    if compression in APPLICATION_CODECS:
        if args.encoding == "repeated":
            raise UsageError(
                f"--compression {compression} compresses the packed feature blob: use "
                "--encoding packed (or leave --encoding out)"
            )
        encoding, codec, grpc_compression = "packed", compression, "none"
    else:
        encoding, codec, grpc_compression = args.encoding or "repeated", "none", compression
    _check_payload(args, compression)
    tls_ca = args.tls_ca
    if tls_ca is not None and not Path(tls_ca).is_file():
        raise UsageError(f"--tls-ca {tls_ca!r}: no such file")
    concurrency = args.concurrency or (32 if args.rps else 8)
    run_id = args.run_id or os.environ.get(RUN_ID_VARIABLE) or default_run_id()
    return LoadConfig(
        targets=targets,
        run_id=run_id,
        calls=calls,
        duration_s=args.duration,
        concurrency=concurrency,
        channels=args.channels,
        rps=args.rps,
        workload=WorkloadSpec(
            mode=args.mode,
            entities=args.entities,
            features=args.features,
            encoding=encoding,
            codec=codec,
            stream_messages=args.stream_messages,
            stream_lockstep=args.stream_lockstep,
            batch_size=args.batch_size,
            chunk_entities=args.chunk_entities,
            seed=args.seed,
            payload=args.payload,
            image_bytes=args.image_bytes,
            transport=args.transport,
            rest_body=args.rest_body,
        ),
        grpc_compression=grpc_compression,
        tls=args.tls or tls_ca is not None,
        tls_ca=tls_ca,
        tls_server_name=args.tls_server_name,
        timeout_s=args.timeout,
        connect_timeout_s=args.connect_timeout,
        late_threshold_ms=args.late_threshold_ms,
        max_message_mb=args.max_message_mb,
    )


def _check_payload(args: argparse.Namespace, compression: str) -> None:
    """Combinations the REST baseline and image payloads cannot run, refused up front."""
    if args.transport == "rest":
        if args.mode != "unary":
            raise UsageError(f"--transport rest runs --mode unary only, not {args.mode}")
        if compression != "none" or args.encoding == "packed":
            raise UsageError("--transport rest sends JSON lists: no --compression, no packed")
        if args.tls or args.tls_ca:
            raise UsageError("--transport rest is plaintext HTTP/1.1 (no --tls)")
    if args.payload == "image":
        if args.mode not in ("unary", "batch"):
            raise UsageError(f"--payload image is sent by --mode unary or batch, not {args.mode}")
        if compression in APPLICATION_CODECS:
            raise UsageError(f"--compression {compression} compresses packed features, not images")
    elif args.rest_body != "json" and args.transport == "rest":
        raise UsageError(f"--rest-body {args.rest_body} carries images (--payload image)")


def _error(message: str) -> int:
    print(f"grpc-overhead load: error: {message}", file=sys.stderr, flush=True)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        config = config_from_args(args)
    except UsageError as error:
        return _error(str(error))

    from grpc_overhead.instrumentation import default_pipeline
    from grpc_overhead.load_generator.runner import ConnectError, Run
    from grpc_overhead.load_generator.stats import format_text
    from grpc_overhead.prediction.telemetry import close_pipeline

    pipeline = default_pipeline()
    config.pipeline = pipeline
    # Unwound in reverse on any way out: the run's channels close, then the spans leave.
    with contextlib.ExitStack() as closing:
        closing.callback(close_pipeline, pipeline, label="grpc-overhead load")
        try:
            run = Run(config)
            closing.callback(run.close)
            run.connect()
        except ConnectError as error:
            return _error(str(error))
        except (OSError, ValueError) as error:
            return _error(str(error))
        with busy_threads(args.busy_threads), _sigterm_interrupts():
            interrupted = _drive(run, config, show_progress=not args.quiet and sys.stderr.isatty())
        summary = run.summary(interrupted=interrupted)
        # The spans leave before the summary is printed, so that it can say whether they
        # all did: an experiment counts a call its spans never reached as untraced.
        closing.close()
        summary["spans"] = None if run.rest else pipeline.delivery()
        if args.json:
            print(json.dumps(summary, indent=2), flush=True)
        else:
            print(format_text(summary), end="", flush=True)
        return 130 if interrupted else 0


@contextlib.contextmanager
def _sigterm_interrupts():
    """While the run is driven, SIGTERM raises KeyboardInterrupt as Ctrl-C does.

    Only the main thread can set a handler; ``main`` called from another thread (a
    test, an embedding program) keeps the process's own."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _drive(run, config, show_progress: bool) -> bool:
    """Run to completion, showing progress on stderr; True if stopped by Ctrl-C or SIGTERM."""
    progress = _Progress(config) if show_progress else None
    try:
        run.start()
        while not run.done():
            run.join(0.1)
            if progress is not None:
                progress.update(run)
        return False
    except KeyboardInterrupt:
        run.stop.set()
        run.join(config.timeout_s + 1)
        return True
    finally:
        if progress is not None:
            progress.close()


class _Progress:
    """A rich progress bar on stderr: by calls when --calls bounds the run, else by time."""

    def __init__(self, config) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.by_calls = config.calls is not None
        total = config.calls if self.by_calls else config.duration_s
        self.progress = Progress(
            TextColumn(f"[bold]{config.workload.mode}[/] {config.run_id}"),
            BarColumn(),
            MofNCompleteColumn() if self.by_calls else TextColumn("{task.completed:.0f}s"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.task = self.progress.add_task("load", total=total, rate="")
        self.progress.start()

    def update(self, run) -> None:
        done = run.progress()
        elapsed = run.elapsed()
        rate = f"{done / elapsed:.0f} calls/s" if elapsed > 0 else ""
        completed = done if self.by_calls else min(elapsed, self.progress.tasks[0].total or 0)
        self.progress.update(self.task, completed=completed, rate=rate)

    def close(self) -> None:
        self.progress.stop()
