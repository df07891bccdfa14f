"""An application with no tracing code at all: plain grpc.server and grpc.insecure_channel.

Run under ``opentelemetry-instrument`` by test_instrumentor.py; prints one line per
reply so the test can check the calls themselves were unaffected.
"""

from __future__ import annotations

import sys
from concurrent import futures
from pathlib import Path

import grpc
from google.protobuf.wrappers_pb2 import BytesValue

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.instrumentation import echo_service


def main() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers([echo_service.sync_handlers()])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stubs = echo_service.multicallables(channel)
        for index in range(3):
            print(stubs["Echo"](BytesValue(value=f"call-{index}".encode())).value.decode())
    server.stop(1).wait()


if __name__ == "__main__":
    main()
