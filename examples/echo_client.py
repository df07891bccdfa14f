"""A plain grpcio client standing for yours: nothing of grpc-overhead is imported.

    opentelemetry-instrument python examples/echo_client.py --target 127.0.0.1:50061 --calls 200

Under ``opentelemetry-instrument`` the channel below is instrumented, so each
call's client side (serialization, the wait for the response, deserialization)
is recorded and joined with the server's by trace context.
"""

from __future__ import annotations

import argparse
import time

import grpc
from google.protobuf.wrappers_pb2 import StringValue


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="127.0.0.1:50061")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--size", type=int, default=1024, help="request bytes (default 1024)")
    args = parser.parse_args()

    text = "x" * args.size
    with grpc.insecure_channel(args.target) as channel:
        say = channel.unary_unary(
            "/example.Echo/Say",
            request_serializer=StringValue.SerializeToString,
            response_deserializer=StringValue.FromString,
        )
        started = time.perf_counter()
        for _ in range(args.calls):
            say(StringValue(value=text), timeout=10, wait_for_ready=True)
        elapsed = time.perf_counter() - started
    print(f"{args.calls} calls to {args.target} in {elapsed:.2f} s", flush=True)


if __name__ == "__main__":
    main()
