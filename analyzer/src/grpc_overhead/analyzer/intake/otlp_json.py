"""OTLP's JSON encoding of a trace export, turned into the protobuf bytes the intake stores.

The OTLP/HTTP specification's JSON mapping is protobuf's canonical JSON with three
differences, all handled here before ``json_format`` parses the rest:

* ``traceId``, ``spanId`` and ``parentSpanId`` (in spans and in links) are hex strings,
  not base64 (other ``bytes`` values, such as an attribute's ``bytesValue``, stay base64);
* enums may be integers or names (``json_format`` takes both);
* field names are lowerCamelCase; protobuf's own snake_case names are taken too, and
  unknown fields are ignored, as receivers MUST.

64-bit integers may be strings or numbers (``json_format`` takes both). Anything else
that does not fit raises ``Malformed`` with the path of the offending value, so the
sender hears what to fix (HTTP 400) and nothing of the request is stored.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from grpc_overhead.analyzer.intake.receiver import Malformed

#: Fields whose JSON form is hex, with the byte length the specification gives them.
_HEX_IDS = {
    "traceId": 16,
    "trace_id": 16,
    "spanId": 8,
    "span_id": 8,
    "parentSpanId": 8,
    "parent_span_id": 8,
}


def request_from_json(body: bytes) -> bytes:
    """The protobuf encoding of the ``ExportTraceServiceRequest`` ``body`` spells in JSON."""
    try:
        document = json.loads(body)
    except UnicodeDecodeError as error:
        raise Malformed(
            f"the JSON body is not UTF-8: {error.reason} at byte {error.start}"
        ) from None
    except json.JSONDecodeError as error:
        raise Malformed(
            f"invalid JSON at line {error.lineno} column {error.colno}: {error.msg}"
        ) from None
    except RecursionError:
        raise Malformed("the JSON body nests too deeply") from None
    if not isinstance(document, dict):
        raise Malformed(
            f"the JSON body must be an object (an ExportTraceServiceRequest), "
            f"not {type(document).__name__}"
        )
    resource_spans = document.get("resourceSpans", document.get("resource_spans", []))
    if not isinstance(resource_spans, list):
        raise Malformed("resourceSpans must be an array")
    for r, resource in enumerate(resource_spans):
        for s, scope in enumerate(
            _list(resource, ("scopeSpans", "scope_spans"), f"resourceSpans[{r}]")
        ):
            where = f"resourceSpans[{r}].scopeSpans[{s}]"
            for n, span in enumerate(_list(scope, ("spans",), where)):
                _hex_to_base64(span, f"{where}.spans[{n}]")
                for k, link in enumerate(_list(span, ("links",), f"{where}.spans[{n}]")):
                    _hex_to_base64(link, f"{where}.spans[{n}].links[{k}]")
    message = ExportTraceServiceRequest()
    try:
        json_format.ParseDict(document, message, ignore_unknown_fields=True)
    except json_format.ParseError as error:
        raise Malformed(f"not an OTLP ExportTraceServiceRequest: {error}") from None
    except RecursionError:
        raise Malformed("the JSON body nests too deeply") from None
    return message.SerializeToString()


def _list(parent: Any, names: tuple[str, ...], where: str) -> list[Any]:
    if not isinstance(parent, dict):
        raise Malformed(f"{where} must be an object")
    for name in names:
        if name in parent:
            value = parent[name]
            if not isinstance(value, list):
                raise Malformed(f"{where}.{name} must be an array")
            return value
    return []


def _hex_to_base64(item: Any, where: str) -> None:
    """Rewrite ``item``'s hex ids in place into the base64 ``json_format`` expects."""
    if not isinstance(item, dict):
        raise Malformed(f"{where} must be an object")
    for name, size in _HEX_IDS.items():
        value = item.get(name)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise Malformed(f"{where}.{name} must be a hex string, got {type(value).__name__}")
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            raise Malformed(
                f"{where}.{name} is not hex: {value[:40]!r} (OTLP/JSON spells ids in hex, "
                f"{size * 2} digits)"
            ) from None
        # A wrong length is the span's fault, not the request's: the exporter rejects
        # that span alone (partial success), as it does for protobuf.
        item[name] = base64.b64encode(raw).decode("ascii")


def response_json(message: Any) -> bytes:
    """A response message in OTLP's JSON (camelCase names, int64 as strings)."""
    return json_format.MessageToJson(message, indent=None).encode()
