"""Traces from a Jaeger query API into ``otel_traces``: analyze an existing Jaeger's traces.

API v3 (``/api/v3/services``, ``/api/v3/traces?query.*``, Jaeger >= 1.35 and
v2) answers OTLP as JSON; it becomes an ``ExportTraceServiceRequest`` and
goes through the intake's own mapping (``intake.rows.request_rows``), so an
imported span is stored exactly as if the collector had sent it. API v1
(``/api/services``, ``/api/traces``; every Jaeger) answers Jaeger's own JSON
model, mapped back to OTLP the way Jaeger maps OTLP to it (``span.kind``,
``otel.status_code``, ``otel.scope.name`` tags; logs' ``event`` field as the
event name). v1 times are microseconds, so v1 imports lose the sub-µs part.

Imports are idempotent: spans whose (TraceId, SpanId) are stored already are
skipped, so running the same import twice, or over a range that overlaps an
earlier one, stores every span once. The time range is read in windows; a
window that returns as many traces as asked for is split in two (down to a
second) so no trace is silently left behind.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from grpc_overhead.analyzer.errors import AnalyzerError, BadInput
from grpc_overhead.analyzer.intake.rows import COLUMNS, Rows, request_rows
from grpc_overhead.analyzer.store.base import Store

API_VERSIONS = ("auto", "v3", "v1")
#: Traces asked for per window; a full window is split.
PAGE = 500
MIN_WINDOW = timedelta(seconds=1)
_KINDS = {"internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}
_STATUS = {"ok": 1, "error": 2}


class JaegerUnavailable(AnalyzerError):
    """The Jaeger query API cannot be reached or answered something unusable."""


@dataclass
class ImportResult:
    traces: int = 0
    spans: int = 0
    stored: int = 0
    already: int = 0
    rejected: int = 0
    services: list[str] = field(default_factory=list)
    api: str = ""


class JaegerQuery:
    """A Jaeger query service's HTTP API (``url`` = its base, e.g. http://host:16686)."""

    def __init__(self, url: str, *, api: str = "auto", timeout_s: float = 30.0) -> None:
        if api not in API_VERSIONS:
            raise BadInput(f"Jaeger API must be one of {', '.join(API_VERSIONS)}, not {api!r}")
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise BadInput(f"bad Jaeger URL {url!r}: expected http://HOST:PORT (its query port)")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.api = api if api != "auto" else self._detect()

    def _get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        url = f"{self.url}{path}{query}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            body = error.read().decode(errors="replace")
            if error.code == 404 and "No traces found" in body:
                return None
            raise JaegerUnavailable(
                f"Jaeger: GET {url} -> HTTP {error.code}: {body[:300]}"
            ) from None
        except (urllib.error.URLError, OSError) as error:
            raise JaegerUnavailable(f"Jaeger at {self.url} is unreachable: {error}") from None
        except json.JSONDecodeError:
            raise JaegerUnavailable(
                f"Jaeger: GET {url} did not answer JSON: is {self.url} the query port (16686)?"
            ) from None

    def _detect(self) -> str:
        try:
            self._get("/api/v3/services")
            return "v3"
        except JaegerUnavailable as error:
            if "HTTP 404" not in str(error):
                raise
        self._get("/api/services")
        return "v1"

    def services(self) -> list[str]:
        if self.api == "v3":
            return sorted((self._get("/api/v3/services") or {}).get("services") or [])
        return sorted((self._get("/api/services") or {}).get("data") or [])

    def traces(self, service: str, start: datetime, end: datetime) -> tuple[int, Any]:
        """(number of traces, an ``ExportTraceServiceRequest``) started in [start, end]."""
        if self.api == "v3":
            answer = self._get(
                "/api/v3/traces",
                {
                    "query.service_name": service,
                    "query.start_time_min": _rfc3339(start),
                    "query.start_time_max": _rfc3339(end),
                    "query.num_traces": PAGE,
                },
            )
            data = (answer or {}).get("result") or {"resourceSpans": []}
            request = otlp_json_request(data)
            ids = {
                span.trace_id
                for rs in request.resource_spans
                for ss in rs.scope_spans
                for span in ss.spans
            }
            return len(ids), request
        micros = {"start": _micros(start), "end": _micros(end)}
        answer = self._get("/api/traces", {"service": service, "limit": PAGE, **micros})
        traces = (answer or {}).get("data") or []
        return len(traces), v1_request(traces)


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _micros(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000)


# -- API v3: OTLP JSON -> protobuf ---------------------------------------------------------------


def _id_bytes(text: str, size: int) -> str:
    """OTLP JSON ids are hex (the spec); protobuf's JSON mapping wants base64 for bytes."""
    if len(text) == 2 * size and all(c in "0123456789abcdefABCDEF" for c in text):
        return base64.b64encode(bytes.fromhex(text)).decode()
    return text


def _fix_ids(value: Any) -> Any:
    if isinstance(value, dict):
        fixed = {key: _fix_ids(item) for key, item in value.items()}
        for key, size in (("traceId", 16), ("spanId", 8), ("parentSpanId", 8)):
            if isinstance(fixed.get(key), str) and fixed[key]:
                fixed[key] = _id_bytes(fixed[key], size)
        return fixed
    if isinstance(value, list):
        return [_fix_ids(item) for item in value]
    return value


def otlp_json_request(data: dict[str, Any]) -> Any:
    request = ExportTraceServiceRequest()
    try:
        json_format.ParseDict(_fix_ids(data), request, ignore_unknown_fields=True)
    except json_format.ParseError as error:
        raise JaegerUnavailable(
            f"Jaeger answered OTLP JSON this importer cannot read: {error}"
        ) from None
    return request


# -- API v1: Jaeger's JSON model -> OTLP --------------------------------------------------------


def _value(tag: dict[str, Any]) -> dict[str, Any]:
    kind, value = tag.get("type", "string"), tag.get("value")
    if kind == "bool":
        return {"boolValue": bool(value)}
    if kind == "int64":
        return {"intValue": str(value)}
    if kind == "float64":
        return {"doubleValue": value}
    if kind == "binary":
        return {"bytesValue": value}
    return {"stringValue": str(value)}


def _attributes(tags: list[dict[str, Any]], skip: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    return [{"key": tag["key"], "value": _value(tag)} for tag in tags if tag["key"] not in skip]


def _span(span: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(scope name, OTLP JSON span) for one v1 span."""
    tags = {tag["key"]: tag.get("value") for tag in span.get("tags") or []}
    parent = next(
        (ref["spanID"] for ref in span.get("references") or [] if ref.get("refType") == "CHILD_OF"),
        "",
    )
    start = int(span["startTime"]) * 1000
    status = _STATUS.get(str(tags.get("otel.status_code", "")).lower(), 0)
    if status == 0 and tags.get("error") is True:
        status = 2
    events = []
    for log in span.get("logs") or []:
        fields = log.get("fields") or []
        name = next((f["value"] for f in fields if f["key"] == "event"), "")
        events.append(
            {
                "timeUnixNano": str(int(log["timestamp"]) * 1000),
                "name": name,
                "attributes": _attributes(fields, ("event",)),
            }
        )
    reserved = (
        "span.kind",
        "otel.status_code",
        "otel.status_description",
        "error",
        "otel.scope.name",
        "otel.scope.version",
        "w3c.tracestate",
    )
    otlp = {
        "traceId": span["traceID"].rjust(32, "0"),
        "spanId": span["spanID"].rjust(16, "0"),
        "parentSpanId": parent.rjust(16, "0") if parent else "",
        "traceState": str(tags.get("w3c.tracestate", "")),
        "name": span.get("operationName", ""),
        "kind": _KINDS.get(str(tags.get("span.kind", "")).lower(), 0),
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + int(span.get("duration", 0)) * 1000),
        "attributes": _attributes(span.get("tags") or [], reserved),
        "events": events,
        "status": {"code": status, "message": str(tags.get("otel.status_description", ""))},
    }
    return str(tags.get("otel.scope.name", "")), otlp


def v1_request(traces: list[dict[str, Any]]) -> Any:
    """One request: a resource per (trace, process), a scope per scope name."""
    resources: list[dict[str, Any]] = []
    for trace in traces:
        processes = trace.get("processes") or {}
        grouped: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for span in trace.get("spans") or []:
            scope, otlp = _span(span)
            grouped.setdefault(span.get("processID", ""), {}).setdefault(scope, []).append(otlp)
        for process_id, scopes in grouped.items():
            process = processes.get(process_id) or {}
            attributes = [
                {"key": "service.name", "value": {"stringValue": process.get("serviceName", "")}}
            ]
            attributes += _attributes(process.get("tags") or [], ("service.name",))
            resources.append(
                {
                    "resource": {"attributes": attributes},
                    "scopeSpans": [
                        {"scope": {"name": name}, "spans": spans} for name, spans in scopes.items()
                    ],
                }
            )
    return otlp_json_request({"resourceSpans": resources})


# -- into the store -----------------------------------------------------------------------------


def _new_rows(store: Store, rows: Rows, table: str, handled: set[str]) -> tuple[Rows, int]:
    """The rows whose (TraceId, SpanId) the store does not hold yet, and how many it did.

    Traces in ``handled`` came in earlier in this import (a trace spans services,
    and each service's query returns it whole): skipped without being counted.
    """
    trace_ids = sorted(set(rows.columns[1]) - handled)
    if not trace_ids:
        return Rows(), 0
    found = store.query(
        f"SELECT DISTINCT TraceId, SpanId FROM {table} WHERE TraceId IN {{ids:Array(String)}}",
        {"ids": trace_ids},
    )
    stored = set(zip(found["TraceId"], found["SpanId"], strict=True)) if len(found) else set()
    fresh = Rows()
    seen: set[tuple[str, str]] = set()
    already = 0
    for index in range(len(rows)):
        key = (rows.columns[1][index], rows.columns[2][index])
        if key[0] in handled or key in seen:
            continue
        seen.add(key)
        if key in stored:
            already += 1
            continue
        for mine, theirs in zip(fresh.columns, rows.columns, strict=True):
            mine.append(theirs[index])
    return fresh, already


def _windows(
    start: datetime, end: datetime, size: timedelta
) -> Iterator[tuple[datetime, datetime]]:
    while start < end:
        yield start, min(start + size, end)
        start += size


def import_traces(
    store: Store,
    jaeger: JaegerQuery,
    *,
    since: datetime,
    until: datetime,
    services: list[str] | None = None,
    window: timedelta = timedelta(minutes=5),
    table: str = "otel_traces",
    progress: Callable[[str], None] = lambda _: None,
) -> ImportResult:
    """Copy every span of ``services`` (default: all Jaeger knows) started in [since, until]."""
    if until <= since:
        raise BadInput(
            f"nothing to import: --since {since:%Y-%m-%d %H:%M:%S} is not before --until"
        )
    result = ImportResult(api=jaeger.api)
    handled: set[str] = set()
    known = jaeger.services()
    result.services = services or known
    for service in result.services:
        if service not in known:
            progress(f"{service}: Jaeger has no traces of this service (it knows {known})")
            continue
        pending = list(_windows(since, until, window))
        while pending:
            start, end = pending.pop(0)
            count, request = jaeger.traces(service, start, end)
            if count >= PAGE and end - start > MIN_WINDOW:
                middle = start + (end - start) / 2
                pending[:0] = [(start, middle), (middle, end)]
                continue
            rows = request_rows(request)
            fresh, already = _new_rows(store, rows, table, handled)
            if len(fresh):
                store.insert(table, COLUMNS, fresh.columns)
            new_traces = set(rows.columns[1]) - handled
            handled |= new_traces
            result.traces += len(new_traces)
            result.spans += len(fresh) + already
            result.stored += len(fresh)
            result.already += already
            result.rejected += rows.rejected
            if count:
                progress(
                    f"{service} {start:%H:%M:%S}-{end:%H:%M:%S}: {count} traces"
                    f" ({len(new_traces)} not seen in this import), {len(fresh)} new spans,"
                    f" {already} already stored"
                )
    return result
