"""The server's dispatch wait, timed per call from the deadline gRPC core carries.

A saturated Python server sees a call late: after gRPC core parsed its headers,
the serving thread (or the event loop) must win the GIL back before our
interceptor runs, and meanwhile it polls nothing. That wait is the server's,
not the network's, but no grpcio API timestamps the moment core saw the call.
Except one: the deadline. Core turns the grpc-timeout header into the call's
deadline when it parses the headers, on its own threads, outside the GIL. The
client sends its remaining time as that header, so

    dispatch = (what the client had left when it sent the request, as core
               encoded it) - (what the server had left at serverCallStarted)

with no clock agreement needed (both are durations on one clock each). The
instrumentation records both budgets (``grpc_overhead.deadline_budget_ns``);
this module turns them into the wait. Its precision is gRPC core's: deadlines
are kept in whole milliseconds, see ``dispatch_estimate_sql``. Measured against
ground truth in harness/ground_truth/saturation.py.
"""

from __future__ import annotations

_MS = 1_000_000
#: Below this client budget core sends the remaining time in 1 ms steps.
_FINE_BUDGET_NS = 998 * _MS
_BUDGETS_DEFINED = "client_deadline_budget_ns > 0 AND server_deadline_budget_ns > 0"
#: Slack around the plausible range [0, request gap] when choosing a candidate.
_SLACK_NS = 3 * _MS // 2
#: A compressed request is compressed by the client's gRPC core after its budget was
#: taken and before the headers go out (tens of ms for an MB): the budgets' difference
#: would call the client's CPU the server's wait, so such calls have no estimate (the
#: wait stays in request_network, as gRPC core's compression does).
REQUEST_COMPRESSED = "(compression NOT IN ('', 'identity', 'none'))"


def grpc_timeout_sql(millis: str) -> str:
    """The duration (ms) gRPC core sends as grpc-timeout for ``millis`` left.

    Core's ``Timeout::FromMillis`` keeps at most five digits and rounds up:
    1 ms steps below 1 s, then 10 ms, 100 ms, 1 s, 10 s, 100 s, 10 min,
    100 min and 1 h (grpc src/core/lib/transport/timeout_encoding.cc). Its
    promotions between units happen only on exact multiples, and rounding up
    twice equals rounding up once to the coarser unit, so rounding up to the
    unit of the value's range gives core's duration.
    """
    steps = (
        (1_000, 1),
        (10_000, 10),
        (100_000, 100),
        (1_000_000, 1_000),
        (10_000_000, 10_000),
        (100_000_000, 100_000),
        (600_000_000, 600_000),
        (6_000_000_000, 6_000_000),
    )
    unit = "multiIf(" + ", ".join(f"{millis} < {limit}, {size}" for limit, size in steps)
    unit += ", 3600000)"
    return f"({unit}) * intDiv({millis} + ({unit}) - 1, {unit})"


def _candidate(shift: int) -> str:
    millis = f"(intDiv(client_deadline_budget_ns, {_MS}) + ({shift}))"
    return f"({grpc_timeout_sql(millis)}) * {_MS} - server_deadline_budget_ns - {_MS // 2}"


#: Two candidates per call, computed once in the merged-calls CTE (the choice
#: between them needs the clock-corrected request gap, known only later):
#:
#: * client budget below 1 s: both cores keep it to the millisecond, so the wait
#:   is b_c - b_s + 0.5 ms (the mean of core's roundings: the client's deadline
#:   and clock rounded to 1 ms, the server's clock floored). Error within about
#:   -1.5..+1.5 ms per call, none on average; ``dispatch_high_ns`` is NULL.
#: * from 1 s on core rounds the budget up to a coarser unit. The sent duration
#:   is then exact, but near a unit boundary it may be either of two multiples
#:   (the client's own rounding moves it by up to 2 ms): one candidate each.
#:   The error is the server's 1 ms flooring: +-0.5 ms.
DISPATCH_CANDIDATE_COLUMNS: tuple[str, ...] = (
    f"multiIf(NOT ({_BUDGETS_DEFINED}), NULL,"
    f" client_deadline_budget_ns < {_FINE_BUDGET_NS},"
    f" client_deadline_budget_ns - server_deadline_budget_ns + {_MS // 2},"
    f" {_candidate(-2)}) AS dispatch_low_ns",
    f"if(({_BUDGETS_DEFINED}) AND client_deadline_budget_ns >= {_FINE_BUDGET_NS},"
    f" {_candidate(2)}, NULL) AS dispatch_high_ns",
)


def dispatch_estimate_sql(request_gap: str, low_slack: str = "0") -> str:
    """The wait (ns, Float64 or NULL) from the two candidates and ``request_gap``
    (clock-corrected serverCallStarted - client outboundMessageSent).

    A candidate fits when it lies in [0, request gap] give or take 1.5 ms; of
    two distinct candidates the one that fits alone is taken, and a call where
    both or neither fit gets none (then the wait stays inside request_network).
    ``low_slack`` (ns, SQL) widens the lower bound further: the client's budget is
    taken after its connection wait, which its watch sees a thread wake-up late, so a
    call that waited may read a candidate that much below 0 (phases passes the wait,
    at most 5 ms: wider would let both of a >= 1 s budget's candidates fit; the value
    is then clamped to 0 by the phase).
    """

    def fits(candidate: str) -> str:
        return (
            f"({candidate} >= -{_SLACK_NS} - {low_slack}"
            f" AND {candidate} <= {request_gap} + {_SLACK_NS})"
        )

    low, high = "dispatch_low_ns", "dispatch_high_ns"
    return (
        f"multiIf({low} IS NULL OR {REQUEST_COMPRESSED}, NULL,"
        f" {high} IS NULL OR {high} = {low}, toNullable(toFloat64({low})),"
        f" {fits(low)} AND NOT {fits(high)}, toNullable(toFloat64({low})),"
        f" {fits(high)} AND NOT {fits(low)}, toNullable(toFloat64({high})), NULL)"
    )
