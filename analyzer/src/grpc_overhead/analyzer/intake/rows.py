"""OTLP -> ``otel_traces`` columns in Python: the exporter's mapping, line by line.

This is the readable statement of ``exporter_traces.go`` (``pushTraceData``,
``convertEvents``, ``convertLinks``) and the conversion used for stores that
cannot parse protobuf themselves (a ClickHouse server over the native
protocol). ``protobuf_sql`` does the same inside chDB, faster; the tests hold
the two to the same rows.

Differences from the Go exporter, by necessity:

* Maps are Python dicts, so a key repeated within one attribute list keeps
  its last value only (Go keeps every pair).
* The generated protobuf classes refuse strings that are not UTF-8; such a
  request is rejected as a whole (INVALID_ARGUMENT) instead of stored raw.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grpc_overhead.analyzer.intake.values import InvalidValue, any_value_string

COLUMNS = (
    "Timestamp",
    "TraceId",
    "SpanId",
    "ParentSpanId",
    "TraceState",
    "SpanName",
    "SpanKind",
    "ServiceName",
    "ResourceAttributes",
    "ScopeName",
    "ScopeVersion",
    "SpanAttributes",
    "Duration",
    "StatusCode",
    "StatusMessage",
    "Events.Timestamp",
    "Events.Name",
    "Events.Attributes",
    "Links.TraceId",
    "Links.SpanId",
    "Links.TraceState",
    "Links.Attributes",
)

SPAN_KINDS = ("Unspecified", "Internal", "Server", "Client", "Producer", "Consumer")
STATUS_CODES = ("Unset", "Ok", "Error")
_UINT64 = (1 << 64) - 1
_INT64_SIGN = 1 << 63


@dataclass
class Rows:
    """Column-oriented rows for ``Store.insert(table, COLUMNS, rows.columns)``."""

    columns: list[list[Any]] = field(default_factory=lambda: [[] for _ in COLUMNS])
    rejected: int = 0
    errors: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.columns[0])

    def extend(self, other: Rows) -> None:
        for mine, theirs in zip(self.columns, other.columns, strict=True):
            mine.extend(theirs)
        self.rejected += other.rejected
        self.errors.extend(other.errors)


def attributes_map(attributes: Any) -> dict[str, str]:
    """``internal.AttributesToMap``, sorted by key like clickhouse-go's ordered map."""
    pairs = {kv.key: any_value_string(kv.value) for kv in attributes}
    return dict(sorted(pairs.items()))


def hex_id(raw: bytes) -> str:
    """``traceutil.*IDToHexOrEmptyString``: '' for absent or all-zero ids."""
    return raw.hex() if raw.strip(b"\0") else ""


def timestamp_ns(value: int) -> int:
    """pcommon.Timestamp.AsTime(): ``time.Unix(0, int64(ts))`` wraps above 2**63."""
    return value - (1 << 64) if value >= _INT64_SIGN else value


def span_problem(span: Any) -> str | None:
    """Why pdata would not decode this span (wrong id length), or None."""
    for name, value, sizes in (
        ("trace_id", span.trace_id, (0, 16)),
        ("span_id", span.span_id, (0, 8)),
        ("parent_span_id", span.parent_span_id, (0, 8)),
    ):
        if len(value) not in sizes:
            return f"span {span.name!r}: {name} has {len(value)} bytes, expected {sizes[1]}"
    for link in span.links:
        if len(link.trace_id) not in (0, 16) or len(link.span_id) not in (0, 8):
            return f"span {span.name!r}: a link has a malformed trace or span id"
    return None


def request_rows(request: Any) -> Rows:
    """Rows for one ``ExportTraceServiceRequest``; invalid spans counted, not stored."""
    rows = Rows()
    (
        timestamps,
        trace_ids,
        span_ids,
        parent_ids,
        trace_states,
        names,
        kinds,
        services,
        resource_maps,
        scope_names,
        scope_versions,
        span_maps,
        durations,
        status_codes,
        status_messages,
        event_times,
        event_names,
        event_maps,
        link_trace_ids,
        link_span_ids,
        link_states,
        link_maps,
    ) = rows.columns
    for resource_spans in request.resource_spans:
        try:
            resource = attributes_map(resource_spans.resource.attributes)
        except InvalidValue as error:  # no span of this resource can be stored
            count = sum(len(scope_spans.spans) for scope_spans in resource_spans.scope_spans)
            rows.rejected += count
            _note(rows, f"resource attributes: {error}")
            continue
        service = next(
            (
                any_value_string(kv.value)
                for kv in resource_spans.resource.attributes
                if kv.key == "service.name"
            ),
            "",
        )
        for scope_spans in resource_spans.scope_spans:
            scope_name, scope_version = scope_spans.scope.name, scope_spans.scope.version
            for span in scope_spans.spans:
                problem = span_problem(span)
                if problem is None:
                    try:
                        span_map = attributes_map(span.attributes)
                        event_map = [attributes_map(event.attributes) for event in span.events]
                        link_map = [attributes_map(link.attributes) for link in span.links]
                    except InvalidValue as error:
                        problem = f"span {span.name!r}: {error}"
                if problem:
                    rows.rejected += 1
                    _note(rows, problem)
                    continue
                start = span.start_time_unix_nano
                timestamps.append(timestamp_ns(start))
                trace_ids.append(hex_id(span.trace_id))
                span_ids.append(hex_id(span.span_id))
                parent_ids.append(hex_id(span.parent_span_id))
                trace_states.append(span.trace_state)
                names.append(span.name)
                kinds.append(SPAN_KINDS[span.kind] if 0 <= span.kind < 6 else "")
                services.append(service)
                resource_maps.append(resource)
                scope_names.append(scope_name)
                scope_versions.append(scope_version)
                span_maps.append(span_map)
                durations.append((span.end_time_unix_nano - start) & _UINT64)
                code = span.status.code
                status_codes.append(STATUS_CODES[code] if 0 <= code < 3 else "")
                status_messages.append(span.status.message)
                events = span.events
                event_times.append([timestamp_ns(event.time_unix_nano) for event in events])
                event_names.append([event.name for event in events])
                event_maps.append(event_map)
                links = span.links
                link_trace_ids.append([hex_id(link.trace_id) for link in links])
                link_span_ids.append([hex_id(link.span_id) for link in links])
                link_states.append([link.trace_state for link in links])
                link_maps.append(link_map)
    return rows


def _note(rows: Rows, problem: str) -> None:
    if len(rows.errors) < 5:
        rows.errors.append(problem)
