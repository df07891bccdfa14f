"""What ``GrpcOverheadInstrumentor`` patched, as it was before: the patch registry.

A module of its own so that the factories (``server.py``) reach the unpatched
``grpc.server`` without importing the instrumentor, which imports them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ORIGINALS: dict[str, Callable[..., Any]] = {}
"""What we patched, as it was before (restored by uninstrument)."""
