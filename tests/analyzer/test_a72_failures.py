"""Failed calls traced by gRFC A72 (grpc-go, grpc-java), on a real chDB store: what an SRE
met attaching a Go or Java fleet (docs/notes/qa-polyglot.md).

* A72 spans carry no status-code attribute, only the span status and its message:
  grpc-java writes "CODE: description", grpc-go only the description. Failed calls must
  still count as errors with the code where the message names one, and a client that
  failed must never read as OK because the server answered.
* An attempt that reached no server (connection refused while an instance restarts) is a
  row with neither half's start: it must not become a call of its own in the rollups
  (a report then counted it twice, once in 1970) nor stretch the pages' time axis.
* Spans without ``host.name`` (Java's SDK, Go's default resource) get per-service clock
  domains: the report says what to set.
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

from grpc_overhead.analyzer import rollup
from grpc_overhead.analyzer.breakdown_frame import BREAKDOWN_COLUMNS
from grpc_overhead.analyzer.insights import instances, rows
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.phases import calls
from grpc_overhead.analyzer.report import Report, build_report, render_table, to_json
from tests.analyzer import seed
from tests.analyzer.other_spans import T0, a72_call
from tests.analyzer.seed import module_store_fixture, store_fixture  # noqa: F401

pytestmark = pytest.mark.unit

HOUR_NS = 3600 * 10**9


def failed_call(
    ids: int,
    message: str,
    *,
    java: bool = False,
    reached_server: bool = True,
    server_status: str = "Error",
) -> list[seed.Span]:
    """One A72 call whose client saw ``message`` (grpc-java: "CODE: description"); its
    server span ended with ``server_status`` (and the same message), or is absent."""
    spans = a72_call(java=java, ids=ids)
    out = []
    for span in spans:
        role = span.name.split(".", 1)[0]
        if role == "Recv":
            if not reached_server:
                continue
            span.status = server_status
            span.status_message = message if server_status == "Error" else ""
        else:
            span.status, span.status_message = "Error", message
            if not reached_server:
                span.events = [event for event in span.events if "Outbound" in event[0]]
        out.append(span)
    return out


#: (client's status message, grpc-java?, server span status, the call's code)
FAILURES = [
    ("UNAVAILABLE: io exception", True, "Error", 14),
    ("DEADLINE_EXCEEDED: deadline exceeded after 0.019s", True, "Error", 4),
    ("context deadline exceeded while waiting for connections to become ready", False, "Error", 4),
    ("context canceled", False, "Error", 1),
    # A server restarting: grpc-go's transport error, always UNAVAILABLE.
    (
        'connection error: desc = "transport: Error while dialing: connect: refused"',
        False,
        "Error",
        14,
    ),
    # grpc-go's message for a server's error names no code: failed, code not recorded.
    ("first attempt refused", False, "Error", -2),
    # The client's deadline passed while the server answered OK: not an OK call.
    ("context deadline exceeded", False, "Ok", 4),
    ("connection reset", False, "Ok", -2),
]


def test_failed_a72_calls_are_errors_with_their_code(store):
    for ids, (message, java, server_status, _) in enumerate(FAILURES, start=20):
        seed.insert_spans(store, failed_call(ids, message, java=java, server_status=server_status))
    frame = calls(store).set_index("TraceId")
    for ids, (message, _, server_status, code) in enumerate(FAILURES, start=20):
        call = frame.loc[f"{ids:032x}"]
        assert (int(call["status_code"]), int(call["error"])) == (code, 1), (message, server_status)
    report = to_json(build_report(store))
    (method,) = report["methods"]
    assert method["errors"] == len(FAILURES), method["status_codes"]
    assert {row["status"]: row["calls"] for row in method["status_codes"]} == {
        "DEADLINE_EXCEEDED": 3,
        "failed (no code)": 2,
        "UNAVAILABLE": 2,
        "CANCELLED": 1,
    }


def test_a_retried_call_that_succeeded_is_ok(store):
    # The refused first try carries "UNAVAILABLE: ..." in grpc-java: the call's outcome
    # is its call span's, not its attempts'.
    spans = a72_call(java=True, attempts=2, ids=8)
    for span in spans:
        if span.status == "Error":
            span.status_message = "UNAVAILABLE: first attempt refused"
    seed.insert_spans(store, spans)
    frame = calls(store)
    assert (int(frame["status_code"].iloc[0]), int(frame["error"].iloc[0])) == (0, 0)


def test_an_attempt_that_reached_no_server_is_one_call_after_settling(store):
    seed.insert_spans(
        store, failed_call(9, "UNAVAILABLE: io exception", java=True, reached_server=False)
    )
    seed.insert_spans(store, a72_call(ids=10))
    options = CallsOptions()
    rollup.settle(store, options, delay=timedelta(minutes=5), now_ns=T0 + HOUR_NS)
    report = to_json(build_report(store))
    (method,) = report["methods"]
    assert method["calls"] == 2, method
    assert method["phases"]["total"]["calls"] == 2
    assert {row["code"]: row["calls"] for row in method["status_codes"]} == {0: 1, 14: 1}
    # Read with its call: the refused try is the call's attempt (its pre-send phase).
    refused = calls(store).set_index("TraceId").loc[f"{9:032x}"]
    assert refused["client_attempts"] == 1 and refused["client_pre_send_us"] == 30
    # Time axes start at the calls, not at 1970.
    first, _ = instances.time_span(store, CallFilters(), options)
    assert first >= T0
    first, _, _ = rows.halves(store, CallFilters(), options)
    assert first >= T0


def test_the_report_says_what_to_set_when_spans_have_no_host():
    offsets = pd.DataFrame(
        {
            "client_host": ["service:java-client", "vm"],
            "server_host": ["service:java-server", "vm"],
            "offset_us": [-423.8, 0.0],
            "uncertainty_us": [163.1, 0.0],
            "calls": [50, 9],
            "windows": [1, 1],
            "offset_min_us": [-423.8, 0.0],
            "offset_max_us": [-423.8, 0.0],
        }
    )
    empty = pd.DataFrame(columns=list(BREAKDOWN_COLUMNS))
    text = render_table(Report(empty, offsets), width=200)
    assert "no host.name on the spans of java-client, java-server" in text
    assert "OTEL_RESOURCE_ATTRIBUTES=host.name=" in text
    assert "no host.name" not in render_table(Report(empty, offsets.iloc[1:]), width=200)
