"""``python -m harness.read_calls STORE``: every call of a stopped store, one JSON object per
call (``phases.calls``: identity, sources, sizes and every ``<phase>_us``, null where the
phase is undefined), with the raw event times the network phases are differences of
(``EVENT_COLUMNS``, Unix ns, 0 where absent: a test tells a phase its events put out of
order from one that is missing), taken from the very rows the phases are computed from
(``calls.calls_source``: an A72 call's attempts folded into its chosen one, whose events
are the phases'; the call span's own row has none of the message events). A subprocess,
because a chDB directory belongs to one process and the caller may already own another.
"""

from __future__ import annotations

import json
import sys

from grpc_overhead.analyzer.calls import calls_source, create_calls
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.phases import calls
from grpc_overhead.analyzer.store import open_store

#: Events of both halves (``phase_bounds``: the network phases' terms).
EVENT_COLUMNS = (
    "client_outbound_message_sent_ns",
    "client_received_response_ns",
    "client_inbound_message_read_ns",
    "server_call_started_ns",
    "server_inbound_message_ns",
    "server_inbound_message_read_ns",
    "server_outbound_message_sent_ns",
)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m harness.read_calls STORE", file=sys.stderr)
        return 2
    with open_store(argv[0]) as store:
        create_calls(store, CallsOptions())
        # A stopped store: no half is in flight, so nothing is held back (a client-only
        # call to no server is a call at once, not after the live grace period).
        at_rest = CallFilters().at_rest()
        frame = calls(store, at_rest)
        events = store.query(
            f"SELECT TraceId, ClientSpanId, {', '.join(EVENT_COLUMNS)}"
            f" FROM ({calls_source(CallsOptions())})",
            at_rest.parameters(),
        )
    frame = frame.merge(events, on=["TraceId", "ClientSpanId"], how="left", validate="1:1")
    frame = frame.drop(columns=["start"]).astype(object).where(frame.notna(), None)
    print(json.dumps(frame.to_dict(orient="records"), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
