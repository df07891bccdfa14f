"""Every environment variable grpc-overhead reads, documented in one place.

The standard ``OTEL_*`` variables (endpoint, service name, resource attributes,
sampler) are read by the OpenTelemetry SDK itself and keep their documented
meaning; the ones below are ours. docs/variables.md's table must list exactly
``DOCUMENTED`` (tests/test_readme.py), so adding a variable here and not there
fails the suite.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass

_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class Variable:
    name: str
    default: str
    meaning: str


INSTRUMENTATION_DISABLED = "GRPC_OVERHEAD_DISABLED"
MAX_QUEUE_SIZE = "GRPC_OVERHEAD_MAX_QUEUE_SIZE"
EXPORT_BATCH_SIZE = "GRPC_OVERHEAD_EXPORT_BATCH_SIZE"
EXPORT_INTERVAL_MS = "GRPC_OVERHEAD_EXPORT_INTERVAL_MS"
#: A busy service fills its batches long before this (they leave by size); it is how long
#: a quiet one's last calls wait, which is most of the time a call takes to show in the
#: app. 1 s cost 0.5 s of that at the median; at 0.25 s a quiet process sends at most 4
#: small requests a second.
EXPORT_INTERVAL_DEFAULT_MS = 250
RUN_ID = "GRPC_OVERHEAD_RUN_ID"
SAMPLING = "GRPC_OVERHEAD_SAMPLING"
SAMPLING_RATE = "GRPC_OVERHEAD_SAMPLING_RATE"
SAMPLING_RATE_DEFAULT = 0.01
SLOW_MS = "GRPC_OVERHEAD_SLOW_MS"
COMPRESSED_SIZE_EVERY = "GRPC_OVERHEAD_COMPRESSED_SIZE_EVERY"
COMPRESSIBILITY_INTERVAL_S = "GRPC_OVERHEAD_COMPRESSIBILITY_INTERVAL_S"
COMPRESSIBILITY_MAX_BYTES = "GRPC_OVERHEAD_COMPRESSIBILITY_MAX_BYTES"
RESIDENCE_TRAILER = "GRPC_OVERHEAD_RESIDENCE_TRAILER"
JAEGER_URL = "GRPC_OVERHEAD_JAEGER_URL"
TIMING_DEADLINE_S = "GRPC_OVERHEAD_TIMING_DEADLINE_S"
# serve's ClickHouse HTTP interface, and the readers that go through it
HTTP_USER = "GRPC_OVERHEAD_HTTP_USER"
HTTP_PASSWORD = "GRPC_OVERHEAD_HTTP_PASSWORD"
# The analyzer's readers (grpc_overhead.analyzer.options.HOLD_BACK_ENV: the same name)
HOLD_BACK_S = "GRPC_OVERHEAD_HOLD_BACK_S"
# `streamlit run app/streamlit_app.py`: the store it reads
STORE = "GRPC_OVERHEAD_STORE"
CLICKHOUSE_URL = "GRPC_OVERHEAD_CLICKHOUSE_URL"
# Read by the collector driver (grpc_overhead.collector) and its YAML configs.
COLLECTOR_BIN = "GRPC_OVERHEAD_COLLECTOR_BIN"
JAEGER_ENDPOINT = "GRPC_OVERHEAD_JAEGER_ENDPOINT"
COLLECTOR_OTLP_PORT = "GRPC_OVERHEAD_COLLECTOR_OTLP_PORT"
COLLECTOR_OTLP_HTTP_PORT = "GRPC_OVERHEAD_COLLECTOR_OTLP_HTTP_PORT"
COLLECTOR_HEALTH_PORT = "GRPC_OVERHEAD_COLLECTOR_HEALTH_PORT"
INTAKE_ENDPOINT = "GRPC_OVERHEAD_INTAKE_ENDPOINT"
INTAKE_CA = "GRPC_OVERHEAD_INTAKE_CA"
INTAKE_TOKEN_FILE = "GRPC_OVERHEAD_INTAKE_TOKEN_FILE"
INTAKE_SERVER_NAME = "GRPC_OVERHEAD_INTAKE_SERVER_NAME"
COLLECTOR_STORAGE_DIR = "GRPC_OVERHEAD_COLLECTOR_STORAGE_DIR"

DOCUMENTED: tuple[Variable, ...] = (
    Variable(
        INSTRUMENTATION_DISABLED,
        "false",
        "true: the instrumentor and the factories leave gRPC untouched",
    ),
    Variable(
        MAX_QUEUE_SIZE,
        "8192",
        "calls waiting to be turned into spans; beyond it calls are dropped and counted",
    ),
    Variable(EXPORT_BATCH_SIZE, "512", "spans per OTLP export request"),
    Variable(
        EXPORT_INTERVAL_MS,
        str(EXPORT_INTERVAL_DEFAULT_MS),
        "longest a finished call waits before export",
    ),
    Variable(
        RUN_ID,
        "(unset)",
        "run identifier put on every span of the process as grpc_overhead.run_id"
        " (a call's own, e.g. the load generator's --run-id, wins)",
    ),
    Variable(
        SAMPLING,
        "(unset)",
        "which calls become spans: always, head (a share of traces, decided at the start), "
        "tail (every call is timed, the decision is taken at its end: slow and failed calls "
        "always, the rest at the base rate; spans carry grpc_overhead.sampling.weight). "
        "Unset: OTEL_TRACES_SAMPLER decides (default: every call)",
    ),
    Variable(
        SAMPLING_RATE,
        str(SAMPLING_RATE_DEFAULT),
        "head and tail: the base probability a call is kept with, by trace id (client and "
        "server agree when both use the same rate)",
    ),
    Variable(
        SLOW_MS,
        "(adaptive)",
        "tail: calls at least this many milliseconds long are always kept; unset: above "
        "the method's running p95 on that side",
    ),
    Variable(
        COMPRESSED_SIZE_EVERY,
        "16",
        "with gRPC gzip/deflate, every Nth message is re-compressed off the hot path "
        "to record its exact compressed size (0 = never)",
    ),
    Variable(
        COMPRESSIBILITY_INTERVAL_S,
        "5",
        "seconds: per method, at most one sent message per interval (client: requests, "
        "server: responses) is measured off the hot path for its gzip/deflate ratio and CPU "
        "cost per MB, as span attributes grpc_overhead.compressibility.* (0 = never)",
    ),
    Variable(
        COMPRESSIBILITY_MAX_BYTES,
        "262144",
        "bytes of a sampled message that are measured (a prefix of larger ones; 0 = never)",
    ),
    Variable(
        RESIDENCE_TRAILER,
        "true",
        "server returns its residence time in trailing metadata (x-server-residence-ns)",
    ),
    Variable(
        TIMING_DEADLINE_S,
        "(unset)",
        "seconds: a deadline the client instrumentation gives calls that have none, so the "
        "server's dispatch wait is timed per call (server_dispatch); e.g. 86400000 "
        "(1000 days). Servers then see a deadline where there was none",
    ),
    Variable(
        JAEGER_URL,
        "(unset)",
        "Jaeger UI base URL for serve/app/demo: the call explorer links calls to URL/trace/ID "
        "(--jaeger-url)",
    ),
    Variable(
        HTTP_USER,
        "default",
        "user of serve's ClickHouse HTTP interface (--http-user); readers (report, sql, app, "
        "streamlit run) send it",
    ),
    Variable(
        HTTP_PASSWORD,
        "(unset)",
        "password of serve's ClickHouse HTTP interface (or --http-password-file); unset: none "
        "asked. "
        "Readers send it",
    ),
    Variable(
        HOLD_BACK_S,
        "10",
        "seconds a call seen from one side only is held back from pages, report, "
        "grpc_call_phases and dashboards while its other half may still arrive; then it "
        "counts as one-sided (0 = no hold-back)",
    ),
    Variable(
        STORE,
        "./grpc-overhead-data",
        "store directory `streamlit run app/streamlit_app.py` reads (-- --store DIR); "
        "read through serve while serve owns it",
    ),
    Variable(
        CLICKHOUSE_URL,
        "(unset)",
        "ClickHouse URL `streamlit run app/streamlit_app.py` reads instead (-- --clickhouse "
        "URL): clickhouse://host:9000/db or a serve's http://127.0.0.1:8123",
    ),
    # The collector (collector/*.yaml read these through the collector's ${env:NAME:-default})
    Variable(
        COLLECTOR_BIN,
        "collector/dist/otelcol-grpc-overhead",
        "collector binary to run instead of the one make collector builds",
    ),
    Variable("GRPC_OVERHEAD_GO", "go on PATH", "the go command collector/build.sh uses"),
    Variable(
        "GRPC_OVERHEAD_COLLECTOR_OTLP_HOST",
        "127.0.0.1 (embedded), 0.0.0.0 (clickhouse)",
        "address the collector's OTLP receiver binds",
    ),
    Variable(COLLECTOR_OTLP_PORT, "4317", "the collector's OTLP/gRPC port"),
    Variable(
        COLLECTOR_OTLP_HTTP_PORT,
        "4318 (a free port when the OTLP/gRPC port is chosen)",
        "the collector's OTLP/HTTP port (/v1/traces, protobuf and JSON)",
    ),
    Variable(COLLECTOR_HEALTH_PORT, "13133", "health_check extension port"),
    Variable("GRPC_OVERHEAD_COLLECTOR_LOG_LEVEL", "info", "the collector's own log level"),
    Variable(
        "GRPC_OVERHEAD_COLLECTOR_METRICS_LEVEL",
        "none",
        "the collector's own metrics (none: nothing listens, so collectors never clash)",
    ),
    Variable("GRPC_OVERHEAD_COLLECTOR_METRICS_PORT", "8888", "port of those metrics when enabled"),
    Variable(
        COLLECTOR_STORAGE_DIR,
        "~/.local/state/grpc-overhead/collector-CONFIG-PORT (collector run), "
        "/var/lib/otelcol/grpc-overhead (the binary run directly)",
        "directory of the collector's on-disk sending queue (file_storage): what it "
        "acknowledged survives a kill -9 and is sent on its next start; created if missing",
    ),
    Variable(
        INTAKE_ENDPOINT,
        "127.0.0.1:4327",
        "where the embedded collector config sends spans (the analyzer intake)",
    ),
    Variable(
        INTAKE_CA,
        "/etc/grpc-overhead/intake-ca.pem",
        "the team collector config: PEM file of the CA that signed serve's certificate",
    ),
    Variable(
        INTAKE_TOKEN_FILE,
        "/etc/grpc-overhead/intake-token",
        "the team collector config: file holding the token it sends serve (one line)",
    ),
    Variable(
        INTAKE_SERVER_NAME,
        "(the endpoint's host)",
        "the team collector config: the name serve's certificate is for, when the endpoint "
        "names serve otherwise (an address)",
    ),
    Variable(
        "GRPC_OVERHEAD_SERVE_HOST",
        "(none)",
        "Grafana's environment, for dashboards/provisioning/datasources/grpc-overhead-serve.yaml: "
        "the host of serve's HTTPS interface (the name its certificate is for)",
    ),
    Variable(
        "GRPC_OVERHEAD_CLICKHOUSE_ENDPOINT",
        "tcp://127.0.0.1:9000?dial_timeout=10s",
        "ClickHouse server for the clickhouse collector config",
    ),
    Variable("GRPC_OVERHEAD_CLICKHOUSE_DATABASE", "otel", "its database"),
    Variable("GRPC_OVERHEAD_CLICKHOUSE_USERNAME", "default", "its user"),
    Variable("GRPC_OVERHEAD_CLICKHOUSE_PASSWORD", "(empty)", "its password"),
    Variable("GRPC_OVERHEAD_CLICKHOUSE_TTL", "72h", "how long otel_traces keeps rows"),
    Variable(
        JAEGER_ENDPOINT,
        "127.0.0.1:14317",
        "Jaeger's OTLP/gRPC address: the embedded-jaeger config's second exporter "
        "(commented out in clickhouse.yaml)",
    ),
)


def instrumentation_disabled() -> bool:
    """``GRPC_OVERHEAD_DISABLED`` set: the instrumentor and the explicit factories
    (instrumented servers, channel wrappers) leave gRPC untouched."""
    return os.environ.get(INSTRUMENTATION_DISABLED, "").strip().lower() in ("1", "true", "yes")


def environment_number(
    name: str, default: float, minimum: float = 0.0, maximum: float | None = None
) -> float:
    """A numeric variable: ``default`` when unset or empty, and (with a warning) when it
    is not a number; never below ``minimum``. With ``maximum``, a value outside
    [minimum, maximum] is refused too (``default``, warned): a probability of 2 is a
    mistake, not a request for 1. Telemetry settings never stop a service."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if maximum is not None and not minimum <= value <= maximum:  # NaN fails both
        _LOGGER.warning(
            "%s=%r is not a number in [%g, %g]; using %g", name, raw, minimum, maximum, default
        )
        return default
    if math.isnan(value):
        _LOGGER.warning("%s=%r is not a number; using %g", name, raw, default)
        return default
    return max(minimum, value)
