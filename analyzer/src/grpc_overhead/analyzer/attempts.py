"""One call per RPC from gRFC A72's call, attempt and server spans.

A72 describes one RPC with a call span (``Sent.``), one attempt span per try
(``Attempt.``, child of the call span) and, per attempt that reached a server, a
server span (``Recv.`` or ours) whose parent is the *attempt*. ``grpc_calls`` keys a
row by the span a server names as its parent, so an A72 call lands in several rows:
one for the call span and one per attempt (merged with its server half). Every one
of them carries ``CallSpanId``; this fold groups them back into one row per call, at
read time, for those rows only (our own spans and otelgrpc's have no ``CallSpanId``
and pass through untouched, so their reads cost what they did).

In the folded row the call span gives the call's start, end and outcome (``total``,
``status``), the attempts their count (``client_attempts``: the highest attempt
number, A72's ``previous-rpc-attempts`` + 1, so retries and hedges both count), and
the *chosen* attempt everything else: the last one that succeeded, else the last
one started. Its events and its server half are the phases' (a retried call's
phases are its successful try's; the failed tries show as attempts).
"""

from __future__ import annotations

from collections.abc import Sequence

#: Columns the call span fills (or that hold for the whole call): merged with ``max``.
#: The client's inbound events are here too: grpc-java records the client's
#: "Inbound message" on the call span, not on the attempt.
CALL_LEVEL: frozenset[str] = frozenset(
    {
        "client_start_ns",
        "client_end_ns",
        "client_status_code",
        "client_error",
        "client_attempts",
        "client_inbound_message_read_ns",
        "client_inbound_message_read_last_ns",
        "client_received_response_ns",
        "client_received_response_last_ns",
    }
)
#: Computed under other names before the GROUP BY: ClickHouse resolves a name to the
#: SELECT's alias first, and every column is re-aliased to its aggregate there.
_RANKED = "*, CallSpanId AS fold_key, (client_attempt_ok, client_attempt_start_ns) AS fold_rank"


def fold_attempts_sql(base: str, a72: str, columns: Sequence[str]) -> str:
    """``base`` (one row per key, every column of ``columns`` after TraceId and
    ClientSpanId) with each A72 call's rows folded into one, keyed by its call span;
    ``a72`` is ``base`` narrowed to the keys of A72 rows (what the fold reads)."""
    names = ", ".join(columns)
    folded = ", ".join(
        f"max({name}) AS {name}"
        if name in CALL_LEVEL or name == "CallSpanId"
        else f"argMax({name}, fold_rank) AS {name}"
        for name in columns
    )
    return (
        f"SELECT TraceId, ClientSpanId, {names} FROM ({base}) WHERE CallSpanId = ''\n"
        "UNION ALL\n"
        f"SELECT TraceId, fold_key AS ClientSpanId, {folded}"
        f" FROM (SELECT {_RANKED} FROM ({a72}) WHERE CallSpanId != '')"
        " GROUP BY TraceId, fold_key"
        # Attempts alone (no call span, no server half: a try that never reached a server,
        # read without its call span) are a fragment of a call, never a call of their own.
        " HAVING client_start_ns != 0 OR server_start_ns != 0"
    )
