"""What to change for each kind, and how to prove the change worked.

``ACTIONS`` names the concrete option or code in grpcio, grpc-java and grpc-go;
``VERIFY`` is an experiment file for ``grpc-overhead experiment`` where our
prediction service can stand in for the user's (it has the knob: workers,
instances, connection age, a narrow path, payload encoding), else a
``compare`` of two runs recorded before and after the change. Text only:
the kinds fill in their numbers where the advice needs them.
"""

from __future__ import annotations

#: Recorded before and after a change the prediction service cannot play.
COMPARE = (
    "record a run before and after the change (`grpc-overhead load ... --run-id before`, "
    "then `--run-id after`), then `grpc-overhead compare before after`: {phase} must drop "
    "by about the saving, with a bootstrap interval that excludes 0"
)


def experiment_file(
    name: str, top: str, matrix: str, baseline: str = "", saving_us: float | None = None
) -> str:
    """A ``grpc-overhead experiment`` file: ``top`` settings, then the ``matrix`` whose two
    cells are without and with the change; ``baseline`` (``setting: value``) the cell as the
    service is now, and ``saving_us`` what the finding predicts the other saves at the p50
    (``expect:``: the experiment says whether it materialized)."""
    text = f"name: {name}\nduration: 20\n{top}matrix:\n{matrix}"
    if baseline:
        text += f"baseline: {{{baseline}}}\n"
    if saving_us is not None and saving_us > 0:
        text += f"expect: {{saving_us: {saving_us:.0f}}}\n"
    return text


def run_experiment(name: str, text: str) -> str:
    """The verify step of an experiment file: run it, then compare its two cells (the
    compression kinds write their file per finding, with the messages' size and path)."""
    return (
        f"grpc-overhead experiment {name}.yaml, with:\n{text}"
        "then `grpc-overhead compare` the two cells' run ids"
    )


ACTIONS: dict[str, str] = {
    "post_processing": (
        "send the response before the work that follows the prediction: move logging, "
        "metrics and cache writes after mark_predictions_made() off the request path "
        "(grpcio: hand them to a background `concurrent.futures.ThreadPoolExecutor(max_workers=1)"
        ".submit(...)` and return; grpc-java: call `responseObserver.onNext(...)` and "
        "`onCompleted()` first; grpc-go: return the response and do it in a goroutine)"
    ),
    "server_interceptors": (
        "take the slow work out of the server's interceptors: what they do around the handler "
        "(logging, auditing, metrics, auth look-ups) runs inside every call; hand logging and "
        "metrics to a background `concurrent.futures.ThreadPoolExecutor` and cache look-ups "
        "(grpc-java: the `ServerInterceptor`'s `ServerCall.Listener` callbacks; grpc-go: the "
        "`grpc.UnaryInterceptor` function, a goroutine for the slow part)"
    ),
    "server_pool_saturated": (
        "give the server more workers than concurrent calls: grpcio "
        "`grpc.server(futures.ThreadPoolExecutor(max_workers=N))` with N above the calls in "
        "flight (and `maximum_concurrent_rpcs` to shed load instead of queueing), or more "
        "server processes; grpc-java `ServerBuilder.executor(...)` with a larger pool; "
        "grpc-go serves each call on its own goroutine: look for a semaphore or worker pool in "
        "the handler"
    ),
    "server_cpu_saturated": (
        "the server process cannot run calls as fast as they arrive (GIL, a blocked event "
        "loop): run more server processes (grpcio: one per core on one port with "
        "`options=[('grpc.so_reuseport', 1)]`), move CPU-bound work to a "
        "`concurrent.futures.ProcessPoolExecutor`, never block a `grpc.aio` event loop; "
        "grpc-java: more Netty event-loop threads (`NettyServerBuilder.workerEventLoopGroup`); "
        "grpc-go: raise GOMAXPROCS or the CPU limit"
    ),
    "client_busy": (
        "the client process is too busy to read its responses (GIL, event loop): fewer "
        "concurrent calls per process and more client processes, no CPU work on the "
        "`grpc.aio` event loop (`loop.run_in_executor`), or callbacks instead of threads "
        "blocking on futures; grpc-java: a separate executor for callbacks "
        "(`ManagedChannelBuilder.executor(...)`); grpc-go: raise GOMAXPROCS"
    ),
    "connection_setup": (
        "stop paying connection setup per call: create one channel and reuse it for every "
        "call (grpcio: one `grpc.insecure_channel`/`grpc.secure_channel` per target for the "
        "process's life, not per request; grpc-java: one `ManagedChannel`; grpc-go: one "
        "`grpc.NewClient`), warm it at start (`grpc.channel_ready_future(channel).result()`) "
        "and keep it alive across idle periods (`grpc.keepalive_time_ms`, "
        "`grpc.keepalive_permit_without_calls`; grpc-java `keepAliveTime`; grpc-go "
        "`keepalive.ClientParameters`)"
    ),
    "network_latency": (
        "the round trip dominates small calls: run the client next to the server (same zone "
        "or host), send several predictions per call (a batch in one request, or a stream: "
        "grpcio `stub.Method.future` for overlap, `stream_stream` for a session), and pick the "
        "nearest instance (`round_robin` over a zone-local DNS name)"
    ),
    "serialization_cost": (
        "make messages cheaper to encode: packed repeated scalars (`repeated float x = 1 "
        "[packed = true]`, proto3's default) instead of one message per feature, one bytes "
        "field holding a packed array (numpy `tobytes()`) for large tensors, fewer nested "
        "messages; serialize once and cache where the same payload is sent repeatedly"
    ),
    "load_imbalance": (
        "calls stay on the instance their long-lived connection reached: recycle connections "
        "on the server (grpcio `options=[('grpc.max_connection_age_ms', 30000), "
        "('grpc.max_connection_age_grace_ms', 5000)]`; grpc-java "
        "`NettyServerBuilder.maxConnectionAge`; grpc-go `keepalive.ServerParameters"
        "{MaxConnectionAge}`) and balance per call on the client "
        "(`options=[('grpc.lb_policy_name', 'round_robin')]` on a `dns:///` target that "
        'resolves every instance; grpc-java/go: `{"loadBalancingConfig": [{"round_robin": '
        "{}}]}`)"
    ),
    "slow_upload": (
        "requests cross a narrow path: send fewer bytes (gRPC compression, "
        "`compression=grpc.Compression.Gzip` on the call or channel; packed encodings), or move "
        "the client onto a faster path to the server (same zone, no proxy or VPN in between)"
    ),
    "slow_download": (
        "responses cross a narrow path: send fewer bytes (grpcio server "
        "`grpc.server(..., compression=grpc.Compression.Gzip)` or "
        "`context.set_compression(...)`; grpc-java `ServerCallStreamObserver.setCompression`; "
        "grpc-go `grpc.UseCompressor` on the client), return only the fields the caller "
        "reads, or move the client onto a faster path"
    ),
    "compression_would_help": (
        "compress these messages: grpcio `grpc.insecure_channel(target, "
        "compression=grpc.Compression.Gzip)` for every call of a channel, or per call "
        "`stub.Method(request, compression=grpc.Compression.Gzip)`; for responses the server "
        "`grpc.server(executor, compression=grpc.Compression.Gzip)` (the "
        "`grpc.default_compression_algorithm` option) or `context.set_compression(...)`; "
        'grpc-java `stub.withCompression("gzip")` (server: `ServerCallStreamObserver'
        '.setCompression("gzip")`); grpc-go `grpc.UseCompressor(gzip.Name)` with '
        '`import _ "google.golang.org/grpc/encoding/gzip"` (a server answers in the '
        "compressor it was called with)"
    ),
    "compression_costs_more": (
        "stop compressing these messages: grpcio drop `compression=` from the channel, call "
        "or server (and the `grpc.default_compression_algorithm` option), or per call "
        "`compression=grpc.Compression.NoCompression`, `context.set_compression("
        "grpc.Compression.NoCompression)` or `context.disable_next_message_compression()` "
        'on the server; grpc-java: no `withCompression(...)`, `setCompression("identity")`; '
        "grpc-go: no `grpc.UseCompressor(gzip.Name)`; or keep it only for the large, "
        "compressible messages"
    ),
    "tail": (
        "the slowest calls are slow in one phase: fix what that phase's slow calls share "
        "(the instance, the payload size or the moments named in the evidence); for a slow "
        "instance, take it out of rotation or recycle its connections "
        "(`grpc.max_connection_age_ms`); for large payloads, split them; for bursts, find "
        "what runs then (a GC pause, a batch job, a deploy)"
    ),
    "clock_uncertain": (
        "the one-way split of the network time is unreliable across these hosts: synchronise "
        "their clocks (chrony or PTP; `chronyc tracking` shows the offset), read "
        "request_network + response_network (exact on any clocks) or network_round_trip "
        "instead of either direction, and keep calls to run on a low-latency path so the "
        "offset estimate tightens"
    ),
}

_TOP = "concurrency: 16\n"
#: The prediction service's request per entity at its default 32 features (repeated
#: float32 and the entity's framing): how many entities make a similar payload.
BYTES_PER_ENTITY = 140


def upload_experiment(request_bytes: float, us_per_mb: float, saving_us: float = 0.0) -> str:
    """slow_upload's verify: the prediction service with requests of about this size, on a
    free path and on one limited to the fitted rate (toxiproxy, the baseline: the path as it
    is): the free cell must be faster by about the saving (``expect:``)."""
    entities = max(1, round(request_bytes / BYTES_PER_ENTITY))
    kb_s = max(1, round(1e9 / us_per_mb)) if us_per_mb > 0 else 5000
    text = experiment_file(
        "upload",
        _TOP + f"entities: {entities}\n",
        f"  bandwidth_kb_s: [null, {kb_s}]\n",
        baseline=f"bandwidth_kb_s: {kb_s}",
        saving_us=saving_us,
    )
    return (
        f"{run_experiment('upload', text)}: the free cell must be faster than the limited one "
        "by about the saving (its expectation says whether it materialized; then fewer bytes "
        "or a faster path recovers it)"
    )


#: kind -> (file name, the experiment file) where our prediction service can stand in.
EXPERIMENTS: dict[str, tuple[str, str]] = {
    "server_pool_saturated": (
        "pool",
        experiment_file("pool", _TOP + "model_cost_ms: 5\n", "  workers: [4, 32]\n"),
    ),
    "server_cpu_saturated": (
        "processes",
        experiment_file("processes", _TOP + "model_cost_ms: 2\n", "  instances: [1, 2]\n"),
    ),
    "network_latency": ("latency", experiment_file("latency", _TOP, "  latency_ms: [null, 5]\n")),
    "serialization_cost": (
        "encoding",
        experiment_file("encoding", _TOP + "entities: 2000\n", "  encoding: [repeated, packed]\n"),
    ),
    "load_imbalance": (
        "connection-age",
        experiment_file(
            "connection-age",
            _TOP + "instances: 3\nchannels: 2\n",
            "  max_connection_age_s: [null, 5]\n",
        ),
    ),
}
VERIFY: dict[str, str] = {
    "post_processing": COMPARE.format(phase="post_processing"),
    "server_interceptors": COMPARE.format(phase="server_interceptors"),
    "client_busy": COMPARE.format(phase="client_dispatch"),
    "connection_setup": COMPARE.format(phase="client_connect"),
    # Our service's responses are a few bytes per entity: it cannot stand in for a download.
    "slow_download": COMPARE.format(phase="response_network"),
    "tail": COMPARE.format(phase="total (p99)"),
    "clock_uncertain": (
        "after synchronising the clocks, `grpc-overhead report --format json`: the offsets' "
        "uncertainty per host pair must fall below the one-way phases' p50"
    ),
    **{kind: run_experiment(name, text) for kind, (name, text) in EXPERIMENTS.items()},
}
