"""Next to OpenTelemetry's gRPC instrumentation: each RPC is one call, however many spans.

With opentelemetry-instrumentation-grpc active next to ours, every RPC has four
spans: theirs and ours, on each side. Our instrumentation recognises theirs at
run time and marks them (``grpc_overhead.instrumentation.coexistence``):

* ``grpc_overhead.folded_into`` on *their* span of a call we recorded: the
  view skips the span (``SKIP_FOLDED``), so the call counts once, with our
  transport events; the span is still in ``otel_traces`` (and in Jaeger).
* ``grpc_overhead.call_span_id`` on *our* client span when the request carried
  their ``traceparent`` (their interceptor ran inside ours and replaced ours):
  the server halves are keyed by that span (their parent), so the client half
  is too (``CLIENT_KEY``) and the halves still meet.

Their spans of calls we did not record (not sampled by us, or a side we are not
attached to) carry neither and count as before: every RPC once.
"""

from __future__ import annotations

FOLDED_INTO = "grpc_overhead.folded_into"
CALL_SPAN_ID = "grpc_overhead.call_span_id"

#: A client span's key in ``grpc_calls``: the span its request named in ``traceparent``.
CLIENT_KEY = f"if(SpanAttributes['{CALL_SPAN_ID}'] = '', SpanId, SpanAttributes['{CALL_SPAN_ID}'])"
#: The view's condition: spans folded into one of ours are not call halves.
SKIP_FOLDED = f"SpanAttributes['{FOLDED_INTO}'] = ''"
