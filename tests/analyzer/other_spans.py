"""Spans as other instrumentations write them (gRFC A72 from grpc-go and grpc-java, in both
event-naming generations; otelgrpc v0.66.0's semconv message events), with known times, for
tests of the analyzer and the app. Shapes checked against real runs of the peers
(tests/pipeline/test_grpc_go_e2e.py, test_grpc_java_e2e.py).
"""

from __future__ import annotations

from tests.analyzer.seed import Span

T0 = 1_790_000_000_000_000_000
US = 1000
RESOURCE = {"host.name": "host-a", "telemetry.sdk.language": "go"}
NAME = "grpc_overhead.prediction.v1.Predictor.Predict"


def a72_call(
    *,
    java: bool = False,
    old_names: bool = False,
    attempts: int = 1,
    ids: int = 1,
) -> list[Span]:
    """A72 spans of one unary call: Sent, one Attempt per try (all but the last refused
    by the server), one Recv per attempt. Times in µs from T0, the last attempt at 100."""
    out, inbound = (
        ("Outbound message sent", "Inbound message received")
        if old_names
        else ("Outbound message", "Inbound message")
    )
    scope = "grpc-java" if java else "grpc-go"
    kind = "Internal" if java else "Client"
    resource = {**RESOURCE, "telemetry.sdk.language": "java" if java else "go"}
    trace = f"{ids:032x}"
    call_id = f"{ids:08x}00000001"

    def span(span_id, parent, kind, name, start, end, events, status="Ok", attributes=None):
        return Span(
            trace,
            span_id,
            parent,
            kind,
            T0 + start * US,
            T0 + end * US,
            "java-svc" if java else "go-svc",
            resource,
            attributes or {},
            [(n, T0 + t * US, a) for n, t, a in events],
            status,
            name,
            scope,
        )

    size = {"sequence-number": "0", "message-size": "900"}
    reply = {"sequence-number": "0", "message-size": "100"}
    # grpc-java records the client's inbound message on the call span.
    call_events = [(inbound, 1190, reply)] if java else []
    spans = [span(call_id, "", kind, f"Sent.{NAME}", 0, 1200, call_events)]
    for n in range(attempts):
        attempt_id, server_id = f"{ids:08x}{n + 1:04x}0002", f"{ids:08x}{n + 1:04x}0003"
        last = n == attempts - 1
        begin = 100 if last else 10 + n
        attempt_events = [(out, begin + 30, size)]
        if last and not java:
            attempt_events.append((inbound, begin + 1000, reply))
        spans.append(
            span(
                attempt_id,
                call_id,
                "Internal",
                f"Attempt.{NAME}",
                begin,
                begin + 1050,
                attempt_events,
                "Ok" if last else "Error",
                {"previous-rpc-attempts": str(n), "transparent-retry": "false"},
            )
        )
        server_events = [(inbound, begin + 300, size)]
        if last:
            server_events.append((out, begin + 800, reply))
        spans.append(
            span(
                server_id,
                attempt_id,
                kind if java else "Server",
                f"Recv.{NAME}",
                begin + 200,
                begin + 810,
                server_events,
                "Ok" if last else "Error",
            )
        )
    return spans


def semconv_call(ids: int = 9, *, older_names: bool = False, sizes: bool = True) -> list[Span]:
    """otelgrpc v0.66.0: one client and one server span, ``message`` events, new semconv.
    ``older_names``: the attributes without their ``rpc.`` prefix (``message.type``,
    ``message.id``, ...) and the older span attributes, as older otelgrpc and the
    OpenTelemetry Java agent 2.x send them (the agent: no sizes, ``sizes=False``)."""
    trace, client_id, server_id = f"{ids:032x}", f"{ids:08x}00000001", f"{ids:08x}00000002"
    attributes = {
        "rpc.system.name": "grpc",
        "rpc.method": "grpc_overhead.prediction.v1.Predictor/Predict",
        "rpc.response.status_code": "OK",
    }
    prefix = "" if older_names else "rpc."
    if older_names:  # the Java agent 2.33.1's span attributes
        attributes = {
            "rpc.system": "grpc",
            "rpc.service": "grpc_overhead.prediction.v1.Predictor",
            "rpc.method": "Predict",
            "rpc.grpc.status_code": "0",
        }

    def message(kind: str, at: int, size: int) -> tuple[str, int, dict[str, str]]:
        attributes = {f"{prefix}message.type": kind, f"{prefix}message.id": "1"}
        if sizes:
            attributes[f"{prefix}message.compressed_size"] = str(size)
            attributes[f"{prefix}message.uncompressed_size"] = str(size)
        return ("message", T0 + at * US, attributes)

    scope = "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
    if older_names and not sizes:
        scope = "io.opentelemetry.grpc-1.6"
    client = Span(
        trace,
        client_id,
        "",
        "Client",
        T0,
        T0 + 1000 * US,
        "otel-client",
        RESOURCE,
        attributes,
        [message("SENT", 30, 900), message("RECEIVED", 990, 100)],
        "Unset",
        "grpc_overhead.prediction.v1.Predictor/Predict",
        scope,
    )
    server = Span(
        trace,
        server_id,
        client_id,
        "Server",
        T0 + 200 * US,
        T0 + 810 * US,
        "otel-server",
        RESOURCE,
        attributes,
        [message("RECEIVED", 300, 900), message("SENT", 800, 100)],
        "Unset",
        "grpc_overhead.prediction.v1.Predictor/Predict",
        scope,
    )
    return [client, server]
