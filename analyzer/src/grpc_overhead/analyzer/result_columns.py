"""What per-call and aggregate answers are made of: the call columns and the quantile function.

Data only, shared by ``phases`` (which re-exports every name), the rollups and
the insights.
"""

from __future__ import annotations

from grpc_overhead.analyzer.sample_columns import specs as _sample_specs
from grpc_overhead.analyzer.span_sources import SOURCE_KEYS

#: The design's phase table, in its order (a contract: names never change).
DESIGN_PHASES: tuple[str, ...] = (
    "client_serialize",
    "client_connect",
    "request_network",
    "server_dispatch",
    "server_queue",
    "request_deserialize",
    "server_interceptors",
    "processing",
    "post_processing",
    "response_serialize",
    "response_network",
    "client_dispatch",
    "client_deserialize",
    "total",
    "server_residence",
    "network_overhead",
    "unattributed",
)
#: The phases that follow each other through a call (everything before ``total``).
CONSECUTIVE_PHASES: tuple[str, ...] = DESIGN_PHASES[: DESIGN_PHASES.index("total")]
#: Consecutive phases not every call measures (no watched channel, no deadline, no
#: innermost handler timing, no mark, no lag probe, other instrumentations): NULL where
#: not measured, counted 0 in unattributed.
OPTIONAL_PHASES: tuple[str, ...] = (
    "client_connect",
    "server_dispatch",
    "server_interceptors",
    "post_processing",
    "client_dispatch",
)
#: A stream's own phases (per-call medians of the per-message phases, then two spans).
STREAM_PHASES: tuple[str, ...] = (
    "request_message_serialize",
    "request_message_transfer",
    "request_message_deserialize",
    "response_message_handler",
    "response_message_serialize",
    "response_message_transfer",
    "response_message_deserialize",
    "time_to_first_response",
    "stream_duration",
)
#: Beyond the design table.
EXTRA_PHASES: tuple[str, ...] = (
    "pool_wait",
    "server_duration",
    "client_server_gap",
    "request_network_raw",
    "response_network_raw",
    "request_network_corrected",
    "response_network_corrected",
    # The coarser phases gRPC's own tracing (A72) and semconv message events define
    # (one event per message: after serialization when sent, after deserialization
    # when read); ours define them too, as sums of finer phases.
    "client_pre_send",
    "server_receive",
    "server_handler",
    "server_tail",
    "request_receive",
    "response_receive",
    "network_round_trip",
    # Streams (client-, server-streaming, bidi), per call: the median over the call's
    # messages of each per-message phase (``messages``), time to first response and
    # stream duration. NULL for unary calls, whose finer phases above say the same.
    *STREAM_PHASES,
)
ALL_PHASES: tuple[str, ...] = DESIGN_PHASES + EXTRA_PHASES


#: Who called what: the columns that identify a call's method, run and both parties
#: (``calls()`` and the explorer's call summary both lead with them).
CALL_IDENTITY: tuple[str, ...] = (
    "service",
    "method",
    "call_type",
    "run_id",
    "client_service",
    "client_host",
    "client_instance",
    "server_service",
    "server_host",
    "server_instance",
)

#: Columns ``calls()`` returns besides the phases.
CALL_COLUMNS: tuple[str, ...] = (
    "TraceId",
    "ClientSpanId",
    "ServerSpanId",
    *CALL_IDENTITY,
    "server_address",
    "client_address",
    "compression",
    "payload_codec",
    "request_messages",
    "request_uncompressed_bytes",
    "request_compressed_bytes",
    "response_messages",
    "response_uncompressed_bytes",
    "response_compressed_bytes",
    "client_events",
    "server_events",
    "client_domain",
    "server_domain",
    *SOURCE_KEYS,
    "client_attempts",
    "client_sampling_weight",
    "server_sampling_weight",
    "client_sampling_reason",
    "server_sampling_reason",
    # A sampled message's measured compressibility (-1: none; sample_columns).
    *(name for name, *_ in _sample_specs()),
)

#: How many calls a call stands for (tail-aware or head sampling: the inverse of the
#: probability it was kept with): the smaller of its halves' weights, since a call is
#: stored as soon as one half was kept; 1 for a half without a weight (other sources,
#: stores from before weights) and for a call with neither half's.
CALL_WEIGHT = (
    "multiIf(client_sampling_weight > 0 AND server_sampling_weight > 0,"
    " least(client_sampling_weight, server_sampling_weight),"
    " client_sampling_weight > 0, client_sampling_weight,"
    " server_sampling_weight > 0, server_sampling_weight, 1.0)"
)


#: ``quantilesTDigest``, chosen for accuracy per cost: against exact quantiles
#: (pandas) over every method and phase of the benchmark its largest relative
#: error was 0.1 % at p50 and p99 (bench/results/analysis.md), and its states
#: merge (rollups). ``quantilesBFloat16`` was about a third cheaper to feed
#: but rounds every value to 8 significant bits (up to 0.4 %); ``quantiles``
#: samples 8192 values per group, so its p99 moves between runs;
#: ``quantilesExact`` keeps every value in memory.
QUANTILE_FUNCTION = "quantilesTDigest"
QUANTILE_LEVELS = "0.5, 0.9, 0.99"
QUANTILES = f"{QUANTILE_FUNCTION}({QUANTILE_LEVELS})"
#: The t-digest of a phase's states (rollups, and the raw states merged with them):
#: weighted, each call counting as the calls it stands for under sampling (``weight``,
#: ``CALL_WEIGHT``), in whole calls (``QUANTILE_WEIGHT``; the same digest as
#: ``QUANTILE_FUNCTION``'s where every weight is 1). Merge with ``{this}IfMerge``.
QUANTILE_STATE_FUNCTION = "quantilesTDigestWeighted"
QUANTILE_WEIGHT = "toUInt64(round(weight))"
#: The type of a phase's quantile state (rollup columns).
QUANTILE_STATE_TYPE = (
    f"AggregateFunction({QUANTILE_STATE_FUNCTION}If({QUANTILE_LEVELS}), Float64, UInt64, UInt8)"
)
