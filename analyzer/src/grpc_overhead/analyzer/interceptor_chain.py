"""The server's interceptor chain around the servicer's own method, as SQL over a merged
``grpc_calls`` row: the parts of ``server_interceptors`` and ``post_processing``.

The instrumentation (``servicers.py``) times the servicer's method innermost
(handlerStarted, predictionsMade, handlerReturned after a mark) inside the chain our
interceptor wraps (serverCallStarted, serviceIntercepted, interceptorsEntered,
interceptorsReturned). The chain is measured where all of its edges were recorded; its
parts: the other interceptors' ``intercept_service`` calls (serverCallStarted ->
serviceIntercepted, which server_queue and pool_wait then leave out), its behaviour before
the method once the request was read (interceptorsEntered -> handlerStarted; a streaming
request's method starts before its first message, which server_queue covers) and after the
method returned (-> interceptorsReturned). ``phases`` builds the phases from these.
"""

from __future__ import annotations

#: Whether the chain was measured for the call (else server_interceptors is NULL).
CHAIN_MEASURED = (
    "service_intercepted_ns != 0 AND interceptors_entered_ns != 0 AND handler_started_ns != 0"
    " AND interceptors_returned_ns != 0 AND predictions_made_ns != 0"
    " AND server_call_started_ns != 0"
)
#: The chain's work before the method, after the request was read (processing leaves it out).
CHAIN_BEFORE = (
    "greatest(toInt64(0), handler_started_ns"
    " - greatest(interceptors_entered_ns, server_inbound_message_read_ns))"
)
_CHAIN_AFTER = (
    "interceptors_returned_ns"
    " - if(handler_returned_ns != 0, handler_returned_ns, predictions_made_ns)"
)
#: server_interceptors where measured (ns).
CHAIN_VALUE = f"(service_intercepted_ns - server_call_started_ns) + {CHAIN_BEFORE} + {_CHAIN_AFTER}"
#: Whether the handler marked predictionsMade (then handlerReturned ends post_processing).
POST_MEASURED = "handler_returned_ns != 0 AND predictions_made_ns != 0"
#: Where the server's own phases start: after the chain's intercept_service calls.
SERVER_ENTRY = f"if({CHAIN_MEASURED}, service_intercepted_ns, server_call_started_ns)"

# Each phase as (value, defined). The optional two are 0 where not measured, as
# server_dispatch is, so sums over the consecutive phases (the pages' stacked means)
# stay right; NULL in every output through ``defined``.
SERVER_QUEUE = (
    f"server_inbound_message_ns - {SERVER_ENTRY}",
    "server_inbound_message_ns != 0 AND server_call_started_ns != 0",
)
POOL_WAIT = (
    f"call_scheduled_ns - {SERVER_ENTRY}",
    "call_scheduled_ns != 0 AND server_call_started_ns != 0",
)
SERVER_INTERCEPTORS = (f"if({CHAIN_MEASURED}, {CHAIN_VALUE}, 0)", CHAIN_MEASURED)
#: The servicer's method up to predictionsMade (its mark, else its return), less the
#: chain's work before it where measured; it keeps the worker's handoff from the
#: deserializer (a GIL wait on a saturated server), as it always has.
PROCESSING = (
    "predictions_made_ns - server_inbound_message_read_ns"
    f" - if({CHAIN_MEASURED}, {CHAIN_BEFORE}, 0)",
    "predictions_made_ns != 0 AND server_inbound_message_read_ns != 0",
)
#: mark_predictions_made() -> the method's return; NULL without a mark.
POST_PROCESSING = (
    f"if({POST_MEASURED}, handler_returned_ns - predictions_made_ns, 0)",
    POST_MEASURED,
)
