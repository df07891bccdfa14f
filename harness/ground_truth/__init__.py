"""Ground truth: inject known causes into real runs and check the analyzer's report finds them.

Every scenario starts the real pipeline (``serve`` intake + chDB store, the
instrumented ``service``, ``load``; spans over OTLP), injects one cause whose
size is known independently of our instrumentation and of the analyzer
(``calibration``, the load generator's own clock, protobuf timed by a plain
grpcio client on the same payloads: ``serialize_probe``), then
compares the report's p50 phases with it (``checks``). ``make test`` runs each
scenario in its reduced profile (tests/ground_truth), ``make bench`` in full
(bench/accuracy.py -> bench/results/accuracy.json and the table in docs/benchmarks.md).

Scenarios:

========================== =====================================================
one_way_delay              toxiproxy latency on the request path, then the response path
asymmetric_delay           both at once (8 ms up, 2 ms down), one host: split exact
skew_with_asymmetric_delay the same to a libfaketime'd "other host": offset within
                           uncertainty, sum exact, split not recoverable
clock_skew                 server clock +40 ms / -30 ms: offset, corrected one-way phases
server_queue               1 worker, fixed model cost, 4 (8) closed-loop clients
serialization              payloads ~2.6 KB .. ~4 MB: (de)serialize phases vs protobuf
bandwidth                  5 MB/s toxic per direction, growing payloads: size / rate
compression                none vs gRPC gzip vs app-level zstd on a 5 MB/s request path
server_saturation          CPU-bound model, 2-4x more callers than workers, sync and aio:
                           network phases stay the idle run's, the server absorbs the wait
client_saturation          threads burning CPU in the client: request side exact, the
                           client's GIL wait in client_dispatch (an estimate: a limit)
stream_per_message         bidi streams in lockstep, 8 ms up / 6 ms down per message and a
                           10 ms model wait per message: per-message transfer and handler
server_interceptors        a user's interceptor sleeping before/after the handler (or in
                           intercept_service), a handler sleeping after its mark:
                           server_interceptors / post_processing, processing unchanged
connection_setup           a new channel per call (plaintext, TLS) and a call waiting for a
                           server started 1 s late: the wait is client_connect
========================== =====================================================
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.ground_truth.bandwidth import bandwidth, compression
from harness.ground_truth.checks import ScenarioResult
from harness.ground_truth.connect import connection_setup
from harness.ground_truth.delay import asymmetric_delay, one_way_delay, skew_with_asymmetric_delay
from harness.ground_truth.in_process import serialization, server_queue
from harness.ground_truth.interceptors import server_interceptors
from harness.ground_truth.profile import Profile
from harness.ground_truth.saturation import client_saturation, server_saturation
from harness.ground_truth.skew import clock_skew
from harness.ground_truth.streams import stream_per_message

Scenario = Callable[[Path, Profile], ScenarioResult]

SCENARIOS: dict[str, Scenario] = {
    "one_way_delay": one_way_delay,
    "asymmetric_delay": asymmetric_delay,
    "skew_with_asymmetric_delay": skew_with_asymmetric_delay,
    "clock_skew": clock_skew,
    "server_queue": server_queue,
    "serialization": serialization,
    "bandwidth": bandwidth,
    "compression": compression,
    "server_saturation": server_saturation,
    "client_saturation": client_saturation,
    "stream_per_message": stream_per_message,
    "server_interceptors": server_interceptors,
    "connection_setup": connection_setup,
}
