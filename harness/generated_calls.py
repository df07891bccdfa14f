"""Calls generated inside the engine, a million in seconds: stores for benchmarks and tests
that need many calls (``bench.analysis``, ``bench.app``, the app command's background roll-up).

Calls are written as the two *halves* the materialized view writes (``INSERT INTO
grpc_calls SELECT ... FROM numbers(N)``, never through Python rows): one INSERT of
client halves, one of server halves, so a read must really merge them. Every value is
a deterministic function of the call number (hashes, not ``rand()``), so both halves
of a call agree and reruns see the same data. Distributions are latency-shaped
(log-normal) and realistic for a prediction service: four methods with different
payloads, four client hosts and three server hosts, one of which shares a host (and a
clock) with a client; the other two servers' clocks run +37 ms and -5 ms off.

    python -m harness.generated_calls DIR CALLS   # a new store at DIR (its own process)
"""

from __future__ import annotations

import sys

from grpc_overhead.analyzer.store.base import Store

BASE_NS = 1_790_000_000 * 1_000_000_000
CALL_SPACING_NS = 1_000_000  # 1k calls/s: 1 M calls span 17 minutes, 10 M 2.8 hours

# One deterministic uniform (0, 1) per (call, stream k).
_U = "((cityHash64(number, {k}) % 1000000) + 0.5) / 1000000"


def _lognormal(median_us: str, sigma: float, k: int) -> str:
    """A log-normal duration in ns with the given median (µs), from two uniforms (Box-Muller)."""
    u1, u2 = _U.format(k=k), _U.format(k=k + 1)
    z = f"sqrt(-2 * log({u1})) * cos(2 * pi() * {u2})"
    return f"toInt64(({median_us}) * 1000 * exp({sigma} * {z}))"


# Per call: method mix and its payload scale, hosts, clock skew, and the timeline.
_CALL = f"""
    number,
    {BASE_NS} + number * {CALL_SPACING_NS} AS t0,
    cityHash64(number, 1) % 100 AS pick,
    multiIf(pick < 60, 0, pick < 75, 1, pick < 90, 2, 3) AS m,
    ['predict.Predictor', 'predict.Predictor', 'predict.Predictor', 'features.FeatureStore'][m + 1]
        AS service,
    ['Predict', 'PredictBatch', 'Health', 'Lookup'][m + 1] AS method,
    [1., 20., 0.05, 0.5][m + 1] AS size_scale,
    toUInt64(1000 * size_scale * 64) AS request_bytes,
    toUInt64(1000 * size_scale * 8) AS response_bytes,
    cityHash64(number, 2) % 4 AS client_index,
    cityHash64(number, 3) % 3 AS server_index,
    if(client_index = 0, 'node-0', concat('client-', toString(client_index))) AS client_host,
    ['node-0', 'server-1', 'server-2'][server_index + 1] AS server_host,
    [0, 37000000, -5000000][server_index + 1] AS skew,
    t0 AS created,
    created + {_lognormal("20", 0.3, 10)} AS outbound,
    outbound + {_lognormal("15 * size_scale", 0.4, 12)} AS sent,
    sent + {_lognormal("150 + 2 * size_scale", 0.5, 14)} AS started,
    started + {_lognormal("20", 1.0, 16)} AS scheduled,
    scheduled + {_lognormal("10", 0.5, 18)} AS inbound,
    inbound + {_lognormal("12 * size_scale", 0.4, 20)} AS read,
    read + {_lognormal("2000 * size_scale", 0.6, 22)} AS made,
    made + {_lognormal("5", 0.3, 24)} AS server_outbound,
    server_outbound + {_lognormal("9 * size_scale", 0.4, 26)} AS server_sent,
    server_sent + {_lognormal("120 + size_scale", 0.5, 28)} AS received,
    received + {_lognormal("11 * size_scale", 0.4, 30)} AS client_read,
    client_read + {_lognormal("7", 0.3, 32)} AS client_end
"""

_IDS = """
    lower(concat(hex(cityHash64(number, 101)), hex(cityHash64(number, 102)))) AS TraceId,
    lower(hex(cityHash64(number, 103))) AS ClientSpanId"""

CLIENT_HALVES = f"""
INSERT INTO grpc_calls (TraceId, ClientSpanId, service, method, call_type, run_id,
    client_service, client_host, client_instance, server_address, compression,
    client_status_code, client_start_ns, client_end_ns, client_events, request_created_ns,
    client_outbound_message_ns, client_outbound_message_sent_ns,
    client_outbound_message_sent_last_ns, client_received_response_ns,
    client_received_response_last_ns, client_inbound_message_read_ns,
    client_inbound_message_read_last_ns, request_messages, request_uncompressed_bytes,
    request_compressed_bytes, response_messages, response_uncompressed_bytes,
    server_residence_ns)
SELECT {_IDS}, service, method, 'unary_unary', 'bench', 'load-generator', client_host,
    concat(client_host, '-load'), concat(server_host, ':50051'), '', toInt16(0), created,
    client_end, 1, created, outbound, sent, sent, received, received, client_read,
    client_read, 1, request_bytes, request_bytes, 1, response_bytes, server_sent - started
FROM (SELECT {_CALL} FROM numbers({{offset:UInt64}}, {{count:UInt64}}))
"""

SERVER_HALVES = f"""
INSERT INTO grpc_calls (TraceId, ClientSpanId, ServerSpanId, service, method, call_type,
    run_id, server_service, server_host, server_instance, client_address, compression,
    server_status_code, server_start_ns, server_end_ns, server_events, server_call_started_ns,
    call_scheduled_ns, server_inbound_message_ns, server_inbound_message_read_ns,
    server_inbound_message_read_last_ns, predictions_made_ns, server_outbound_message_ns,
    server_outbound_message_sent_ns, server_outbound_message_sent_last_ns, request_messages,
    request_uncompressed_bytes, response_messages, response_uncompressed_bytes,
    response_compressed_bytes, server_residence_ns)
SELECT {_IDS}, lower(hex(cityHash64(number, 104))), service, method, 'unary_unary', 'bench',
    'prediction-service', server_host, concat(server_host, '-svc'), '10.0.0.1', '',
    toInt16(0), started + skew, server_sent + skew, 1, started + skew, scheduled + skew,
    inbound + skew, read + skew, read + skew, made + skew, server_outbound + skew,
    server_sent + skew, server_sent + skew, 1, request_bytes, 1, response_bytes,
    response_bytes, server_sent - started
FROM (SELECT {_CALL} FROM numbers({{offset:UInt64}}, {{count:UInt64}}))
"""

_CHUNK = 60_000  # one minute of calls per INSERT pair


def generate(store: Store, calls: int) -> None:
    """``calls`` calls as the view writes them: per chunk of consecutive calls (one
    minute at 1k calls/s), one INSERT of client halves, then one of server halves, in
    time order, so parts hold contiguous time ranges as in a live store."""
    for table in ("grpc_calls", "grpc_phase_rollup", "grpc_offset_rollup", "grpc_settled_calls"):
        store.command(f"TRUNCATE TABLE IF EXISTS {table}")
    for offset in range(0, calls, _CHUNK):
        count = min(_CHUNK, calls - offset)
        for statement in (CLIENT_HALVES, SERVER_HALVES):
            store.command(statement, {"offset": offset, "count": count})


def main(argv: list[str] | None = None) -> int:
    from grpc_overhead.analyzer.calls import create_calls
    from grpc_overhead.analyzer.options import CallsOptions
    from grpc_overhead.analyzer.schema import create_schema
    from grpc_overhead.analyzer.store import open_store

    directory, calls = argv if argv is not None else sys.argv[1:]
    with open_store(directory) as store:
        create_schema(store)
        create_calls(store, CallsOptions())
        generate(store, int(calls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
