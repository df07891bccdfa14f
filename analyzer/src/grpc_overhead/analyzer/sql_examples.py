"""Questions users ask of the store, each with the SQL that answers it over ``grpc_call_phases``.

One list for the README ("Querying with SQL"), ``grpc-overhead sql --help``
and the app's SQL page, so the examples a user copies are the ones the tests
run (tests/analyzer/test_sql_examples.py runs every one, and checks the
README shows each). Plain ClickHouse SQL: no ``FINAL`` (the view merges), no
parameters, the same text on chDB, through ``serve``'s HTTP interface and on
a ClickHouse server.
"""

from __future__ import annotations

from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.phase_view import PHASES_VIEW

#: (question, SQL), in the order the README lists them.
EXAMPLES: tuple[tuple[str, str], ...] = (
    (
        "Where does the time of a call go, per method (median of every phase)?",
        """SELECT rpc_service, rpc_method, count() AS calls,
    round(median(client_serialize_us), 1) AS client_serialize,
    round(median(request_network_us), 1) AS request_network,
    round(median(server_dispatch_us), 1) AS server_dispatch,
    round(median(server_queue_us), 1) AS server_queue,
    round(median(request_deserialize_us), 1) AS request_deserialize,
    round(median(processing_us), 1) AS processing,
    round(median(response_serialize_us), 1) AS response_serialize,
    round(median(response_network_us), 1) AS response_network,
    round(median(client_deserialize_us), 1) AS client_deserialize,
    round(median(total_us), 1) AS total
FROM grpc_call_phases
GROUP BY rpc_service, rpc_method
ORDER BY calls DESC""",
    ),
    (
        "What are p50 and p99 of total, of the network and of everything but processing, "
        "per method?",
        """SELECT rpc_method, count() AS calls,
    round(quantileTDigest(0.5)(total_us), 1) AS total_p50_us,
    round(quantileTDigest(0.99)(total_us), 1) AS total_p99_us,
    round(quantileTDigest(0.5)(request_network_us + response_network_us), 1) AS network_p50_us,
    round(quantileTDigest(0.99)(request_network_us + response_network_us), 1) AS network_p99_us,
    round(quantileTDigest(0.5)(network_overhead_us), 1) AS not_processing_p50_us,
    round(quantileTDigest(0.99)(network_overhead_us), 1) AS not_processing_p99_us
FROM grpc_call_phases
GROUP BY rpc_method
ORDER BY total_p99_us DESC""",
    ),
    (
        "Which were the 20 slowest calls in the last hour, and where did their time go?",
        """SELECT start_time, trace_id, rpc_method, server_instance, status_code,
    total_us, processing_us, server_queue_us, request_network_us, response_network_us
FROM grpc_call_phases
WHERE start_time >= now64() - INTERVAL 1 HOUR
ORDER BY total_us DESC
LIMIT 20""",
    ),
    (
        "How many calls ended with each gRPC status code, per method?",
        """SELECT rpc_method, status_code, count() AS calls,
    round(100 * calls / sum(calls) OVER (PARTITION BY rpc_method), 2) AS percent
FROM grpc_call_phases
GROUP BY rpc_method, status_code
ORDER BY rpc_method, calls DESC""",
    ),
    (
        "Does compression pay: serialization plus network time per compression?",
        """SELECT compression_algorithm, count() AS calls,
    round(avg(request_bytes) / 1024, 1) AS request_kib,
    round(avg(client_serialize_us + response_serialize_us), 1) AS serialize_us,
    round(avg(request_network_us + response_network_us), 1) AS network_us,
    round(avg(total_us), 1) AS total_us
FROM grpc_call_phases
GROUP BY compression_algorithm
ORDER BY compression_algorithm""",
    ),
    (
        "Which server instance is slowest, and is it the handler or the queue?",
        """SELECT server_instance, server_host, count() AS calls,
    round(quantileTDigest(0.99)(total_us), 1) AS total_p99_us,
    round(quantileTDigest(0.99)(processing_us), 1) AS processing_p99_us,
    round(quantileTDigest(0.99)(server_queue_us), 1) AS queue_p99_us
FROM grpc_call_phases
WHERE server_instance != ''
GROUP BY server_instance, server_host
ORDER BY total_p99_us DESC""",
    ),
    (
        "How did server queuing evolve, minute by minute?",
        """SELECT toStartOfMinute(start_time) AS minute, count() AS calls,
    round(quantileTDigest(0.99)(server_queue_us), 1) AS queue_p99_us,
    round(quantileTDigest(0.99)(pool_wait_us), 1) AS pool_wait_p99_us
FROM grpc_call_phases
GROUP BY minute
ORDER BY minute""",
    ),
    (
        "What share of each method's time is the network, and what share is anything but "
        "processing?",
        """SELECT rpc_method,
    round(100 * sum(request_network_us + response_network_us) / sum(total_us), 1)
        AS network_percent,
    round(100 * sum(network_overhead_us) / sum(total_us), 1) AS not_processing_percent,
    round(100 * sum(processing_us) / sum(total_us), 1) AS processing_percent,
    round(100 * sum(unattributed_us) / sum(total_us), 1) AS unattributed_percent
FROM grpc_call_phases
WHERE total_us > 0 AND processing_us IS NOT NULL
    AND request_network_us IS NOT NULL AND response_network_us IS NOT NULL
GROUP BY rpc_method""",
    ),
    (
        "How does total time grow with request size (64 KiB buckets)?",
        """SELECT intDiv(request_bytes, 65536) * 64 AS request_kib_from, count() AS calls,
    round(median(total_us), 1) AS total_p50_us,
    round(median(client_serialize_us + request_deserialize_us), 1) AS codec_p50_us
FROM grpc_call_phases
GROUP BY request_kib_from
ORDER BY request_kib_from""",
    ),
    (
        "Which client and server hosts disagree on the time, and by how much?",
        """SELECT client_host, server_host, count() AS calls,
    round(avg(clock_offset_us), 1) AS clock_offset_us,
    round(min(clock_uncertainty_us), 1) AS uncertainty_us,
    round(median(request_network_raw_us), 1) AS request_network_raw_p50_us,
    round(median(request_network_us), 1) AS request_network_p50_us
FROM grpc_call_phases
GROUP BY client_host, server_host
ORDER BY calls DESC""",
    ),
)


def examples_for(options: CallsOptions | None = None) -> dict[str, str]:
    """``EXAMPLES`` by question, the view named in ``options``' database (default: as is)."""
    options = options or CallsOptions()
    view = options.qualified(PHASES_VIEW) if options.database else PHASES_VIEW
    return {question: sql.replace(PHASES_VIEW, view) for question, sql in EXAMPLES}
