"""The client of the ``connection_setup`` scenario: warm calls, calls on a new channel each,
and calls that wait (``wait_for_ready``) for a server started late; prints its own timings.

Run as ``python -m harness.ground_truth.connect_client SPEC_JSON``, exporting spans to the
intake named by ``OTEL_EXPORTER_OTLP_ENDPOINT``. Each call's latency is timed here,
around the stub call, on this process's clock: a cold call's extra latency over the
warm calls interleaved with it is its connection wait, known without the
instrumentation; a late call's is the server's start delay (plus the last reconnect
attempt's slop, kept small by short reconnect backoffs). The spec gives the targets
(``plain``, ``tls`` with its ``tls_ca``), ``rounds``, and the late server's ``delay_s``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import grpc

from grpc_overhead.instrumentation import call_attributes, default_pipeline, instrument_channel
from grpc_overhead.instrumentation.vocabulary import RUN_ID
from grpc_overhead.load_generator.workload import Workload, WorkloadSpec
from grpc_overhead.prediction.protos import prediction_pb2_grpc as pb_grpc
from grpc_overhead.prediction.server import ServiceConfig, build_server
from grpc_overhead.processes import free_port

TIMEOUT_S = 10.0
#: A waiting channel retries the connection this often (ms): the late call's slop.
RECONNECT_MS = 20
_OPTIONS = [("grpc.use_local_subchannel_pool", 1)]
#: (Not grpc.min_reconnect_backoff_ms: gRPC core also uses it as the connect timeout.)
_RETRY_OPTIONS = [
    *_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", RECONNECT_MS),
    ("grpc.max_reconnect_backoff_ms", RECONNECT_MS),
]


def _channel(target: str, tls_ca: str | None, options: list = _OPTIONS) -> grpc.Channel:
    if tls_ca:
        credentials = grpc.ssl_channel_credentials(Path(tls_ca).read_bytes())
        raw = grpc.secure_channel(target, credentials, options)
    else:
        raw = grpc.insecure_channel(target, options)
    return instrument_channel(raw, target, pipeline=default_pipeline())


def _timed_call(stub: Any, request: Any, run_id: str, wait_for_ready: bool = False) -> float:
    """One Predict call under ``run_id``; its latency in microseconds (this clock)."""
    with call_attributes({RUN_ID: run_id}):
        started = time.perf_counter_ns()
        stub.Predict(request, timeout=TIMEOUT_S, wait_for_ready=wait_for_ready)
        return (time.perf_counter_ns() - started) / 1000


def _late_call(request: Any, delay_s: float, run_id: str) -> dict[str, float]:
    """A call that waits for a server which starts ``delay_s`` after the call was made
    (``delay_s`` < 0: started that long before the call, the control: a new server's
    first call, without the wait)."""
    port = free_port()
    target = f"127.0.0.1:{port}"
    started_at: list[int] = []

    def start_late(call_made: int) -> None:
        time.sleep(max(0.0, call_made / 1e9 + delay_s - time.perf_counter_ns() / 1e9))
        late, _ = build_server(ServiceConfig(workers=2, port=port), pipeline=default_pipeline())
        late.start()
        started_at.append(time.perf_counter_ns())
        servers.append(late)

    servers: list[grpc.Server] = []
    channel = _channel(target, None, _RETRY_OPTIONS)
    stub = pb_grpc.PredictorStub(channel)
    if delay_s < 0:
        start_late(0)
        time.sleep(-delay_s)
    made = time.perf_counter_ns()
    starter = threading.Thread(target=start_late, args=(made,), daemon=True)
    if delay_s >= 0:
        starter.start()
    latency_us = _timed_call(stub, request, run_id, wait_for_ready=True)
    if delay_s >= 0:
        starter.join()
    channel.close()
    for late in servers:
        late.stop(None)
    return {"latency_us": latency_us, "server_started_after_us": (started_at[0] - made) / 1000}


def main(spec: dict[str, Any]) -> dict[str, Any]:
    request = Workload(WorkloadSpec(entities=20, features=8))._payloads[0]
    out: dict[str, Any] = {"warm": {}, "cold": {}, "late": [], "fresh": []}
    warm_channels = {}
    for mode, (target, tls_ca) in spec["targets"].items():
        warm_channels[mode] = _channel(target, tls_ca)
        stub = pb_grpc.PredictorStub(warm_channels[mode])
        for _ in range(3):  # connect and warm up, unrecorded by the checks
            _timed_call(stub, request, f"connect-warmup-{mode}")
        out["warm"][mode], out["cold"][mode] = [], []
    for _ in range(spec["rounds"]):
        for mode, (target, tls_ca) in spec["targets"].items():
            for _ in range(spec["calls"]):  # interleaved: a warm call, then a cold one
                warm = pb_grpc.PredictorStub(warm_channels[mode])
                out["warm"][mode].append(_timed_call(warm, request, f"connect-warm-{mode}"))
                channel = _channel(target, tls_ca)
                cold = _timed_call(pb_grpc.PredictorStub(channel), request, f"connect-cold-{mode}")
                out["cold"][mode].append(cold)
                channel.close()
        for _ in range(spec["late_calls"]):  # each after its control
            out["fresh"].append(_late_call(request, -spec["delay_s"], "connect-fresh-server"))
            out["late"].append(_late_call(request, spec["delay_s"], "connect-late"))
    for channel in warm_channels.values():
        channel.close()
    default_pipeline().shutdown()
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
