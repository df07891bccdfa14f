"""A plain grpcio service standing for yours: nothing of grpc-overhead is imported.

    opentelemetry-instrument python examples/echo_server.py --port 50061

``opentelemetry-instrument`` finds grpc-overhead's instrumentor (installed with
``grpc-overhead-instrumentation``) and patches ``grpc.server`` before this
file runs, so the server below records every call's transport events. The
messages are protobuf's well-known ``StringValue``, so the example needs no
generated code; ``--work-ms`` stands for the model's time inside a call.
Stops on Ctrl-C or SIGTERM (letting in-flight calls finish, and the
instrumentation export what it recorded).
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from concurrent import futures

import grpc
from google.protobuf.wrappers_pb2 import StringValue

SERVICE = "example.Echo"


def say(request: StringValue, context: grpc.ServicerContext, work_s: float) -> StringValue:
    """Echo the request upper-cased, after ``work_s`` of CPU (the "model")."""
    until = time.perf_counter() + work_s
    while time.perf_counter() < until:
        pass
    return StringValue(value=request.value.upper())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=50061)
    parser.add_argument("--work-ms", type=float, default=2.0, help="CPU per call (default 2)")
    args = parser.parse_args()

    handler = grpc.unary_unary_rpc_method_handler(
        lambda request, context: say(request, context, args.work_ms / 1000),
        request_deserializer=StringValue.FromString,
        response_serializer=StringValue.SerializeToString,
    )
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4),
        handlers=[grpc.method_handlers_generic_handler(SERVICE, {"Say": handler})],
    )
    server.add_insecure_port(f"127.0.0.1:{args.port}")
    server.start()
    print(f"echo server listening on 127.0.0.1:{args.port}", flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    server.stop(grace=2).wait()


if __name__ == "__main__":
    main()
