"""How applications add their own facts to a call's span (payload codec, entity count, run).

Client: ``with call_attributes({...}):`` around calls; the attributes are read
once per call from a contextvar (cheap, and correct across threads and
asyncio tasks). Server: ``annotate_call(key, value)`` inside a handler.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

from grpc_overhead.instrumentation.server_calls import CURRENT_SERVER_CALL

CALL_ATTRIBUTES: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "grpc_overhead_call_attributes", default=None
)


@contextlib.contextmanager
def call_attributes(attributes: Mapping[str, Any]) -> Iterator[None]:
    """Attributes for every client call started inside the block (nested blocks merge)."""
    outer = CALL_ATTRIBUTES.get()
    merged = {**outer, **attributes} if outer else dict(attributes)
    token = CALL_ATTRIBUTES.set(merged)
    try:
        yield
    finally:
        CALL_ATTRIBUTES.reset(token)


def annotate_call(key: str, value: Any) -> bool:
    """Add an attribute to the server span of the call being handled; False outside one."""
    record = CURRENT_SERVER_CALL.get()
    if record is None:
        return False
    if record.attributes is None:
        record.attributes = {}
    record.attributes[key] = value
    return True
