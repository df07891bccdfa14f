"""``python -m harness.ground_truth.serialize_probe TARGET ENTITIES FEATURES CALLS``: the
serialization truth, timed the way a real client runs it.

Why a separate, uninstrumented client: protobuf's cost for an MB-sized
message depends on where it runs. Timed in a warm loop in the harness process
(the same message again and again), upb reuses freed memory and a 4.4 MB
request serializes in ~1.5 ms. In a gRPC client each call serializes into
fresh memory (upb's arena plus the bytes object, which grpcio copies and
drops): measured in the load generator, every 4.4 MB call took ~3,160 minor
page faults (~12 MB touched for the first time) and 8.5 ms of CPU, and on
this shared 2-core machine a burst that long is preempted a few times by
other work, so its wall time stretches further; a ~1 ms burst mostly is not.
Both are real costs of the call, so the truth must include them.

So this client makes real unary ``Predict`` calls to the service with the
load generator's own payloads (``Workload``: same seed, same variants, same
cycling, same channel options) from a worker thread, over a *plain* grpcio
channel whose serializer and deserializer are protobuf's wrapped only by two
clock reads. No spans, no analyzer: what it prints is what protobuf costs a
client in these conditions, at the same time of day as the load run it
follows. The server-side phases cannot be timed without instrumenting the
server, so request deserialization is timed here too, on the bytes just
sent, into a fresh message each call (as the server does).

Prints one JSON object: per phase the per-call samples (wall µs, thread CPU
µs, minor page faults), plus the message sizes; ``summary`` gives medians.
"""

from __future__ import annotations

import json
import resource
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from grpc_overhead.load_generator.workload import VARIANTS, Workload, WorkloadSpec
from grpc_overhead.prediction.protos import prediction_pb2 as pb

PREDICT = "/grpc_overhead.prediction.v1.Predictor/Predict"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # as the harness's loads: --max-message-mb 64
PHASES = ("client_serialize", "request_deserialize", "response_serialize", "client_deserialize")
Sample = tuple[float, float, int]  # wall µs, thread CPU µs, minor faults


def _timed(function: Callable[[Any], Any], into: list[Sample]) -> Callable[[Any], Any]:
    """``function`` with its wall time, thread CPU time and minor faults recorded."""

    def wrapper(value: Any) -> Any:
        faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        cpu = time.thread_time_ns()
        begin = time.perf_counter_ns()
        result = function(value)
        wall = time.perf_counter_ns() - begin
        cpu = time.thread_time_ns() - cpu
        faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - faults
        into.append((wall / 1e3, cpu / 1e3, faults))
        return result

    return wrapper


def summary(samples: list[Sample]) -> dict[str, float]:
    """Medians of a phase's samples (pooled over rounds by the caller)."""
    return {
        "p50_us": round(statistics.median(s[0] for s in samples), 1),
        "cpu_p50_us": round(statistics.median(s[1] for s in samples), 1),
        "minor_faults_p50": statistics.median(s[2] for s in samples),
        "samples": len(samples),
    }


def _in_thread(target: Callable[[], object], name: str) -> None:
    thread = threading.Thread(target=target, name=name)
    thread.start()
    thread.join()


def _deserialize_all(requests: list[Any], calls: int, timed: Callable[[bytes], Any]) -> None:
    """Each call's request bytes, deserialized into a fresh message that is then dropped."""
    for index in range(calls):
        data = requests[index % len(requests)].SerializeToString()  # untimed: the wire bytes
        timed(data)
        del data


def probe(target: str, entities: int, features: int, calls: int) -> dict[str, Any]:
    """Time ``calls`` real Predict calls' (de)serializations (see the module docstring)."""
    workload = Workload(WorkloadSpec(entities=entities, features=features))
    samples: dict[str, list[Sample]] = {phase: [] for phase in PHASES}
    sent: list[bytes] = []
    received: list[pb.PredictResponse] = []

    requests: list[pb.PredictRequest] = []  # the workload's own variants, in call order

    def serialize(message: pb.PredictRequest) -> bytes:
        if len(requests) < VARIANTS:
            requests.append(message)
        data = message.SerializeToString()
        sent.append(data)
        return data

    def deserialize(data: bytes) -> pb.PredictResponse:
        response = pb.PredictResponse.FromString(data)
        received.append(response)
        return response

    options = [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.use_local_subchannel_pool", 1),
    ]
    request_deserialize = _timed(pb.PredictRequest.FromString, samples["request_deserialize"])
    response_serialize = _timed(pb.PredictResponse.SerializeToString, samples["response_serialize"])
    sizes: dict[str, int] = {}
    failure: list[BaseException] = []
    with grpc.insecure_channel(target, options) as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        predict = channel.unary_unary(
            PREDICT,
            request_serializer=_timed(serialize, samples["client_serialize"]),
            response_deserializer=_timed(deserialize, samples["client_deserialize"]),
            _registered_method=True,
        )

        class Stub:  # what Workload.call expects: stub.Predict(request, timeout=...)
            Predict = predict

        def client() -> None:  # a worker thread, as the load generator's "load-0"
            try:
                for index in range(calls):
                    workload.call(Stub, index, 60.0)
                    data, response = sent.pop(), received.pop()
                    sizes["request_bytes"] = len(data)
                    sizes["response_bytes"] = len(response_serialize(response))
                    del data, response  # nothing outlives the call: the heap stays the client's
            except BaseException as error:  # reported by the caller
                failure.append(error)

        _in_thread(client, "probe-client")
    # The server deserializes in its own pool thread (its own malloc arena): so here,
    # after the calls, so that this memory churn cannot change the client thread's heap.
    _in_thread(lambda: _deserialize_all(requests, calls, request_deserialize), "probe-server")
    if failure:
        raise failure[0]
    return {"samples": samples, **sizes}


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(
            "usage: python -m harness.ground_truth.serialize_probe TARGET ENTITIES FEATURES CALLS",
            file=sys.stderr,
        )
        return 2
    target, entities, features, calls = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    print(json.dumps(probe(target, entities, features, calls)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
