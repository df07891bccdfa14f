"""Ending a process's span pipeline without letting an absent collector hold the exit.

The OTLP exporter retries a failed export with exponential backoff until its
timeout (``OTEL_EXPORTER_OTLP_TIMEOUT``, 10 s by default), so with no collector
listening an unbounded flush at exit waits ~7-10 s. ``close_pipeline`` gives the
flush a bounded time and, if spans are still pending then, says so in one line
on stderr and shuts the pipeline down with a short timeout (its shutdown stops
the exporter, which interrupts the retry backoff); what is left is dropped.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

FLUSH_TIMEOUT_S = 3.0


def close_pipeline(pipeline: Any, timeout_s: float = FLUSH_TIMEOUT_S, label: str = "") -> bool:
    """Flush and shut down ``pipeline``; True if everything queued was exported in time."""
    try:
        flushed = bool(pipeline.force_flush(timeout_s=timeout_s))
    except TypeError:  # a pipeline whose force_flush takes no timeout
        flushed = bool(pipeline.force_flush())
    if not flushed:
        queued = getattr(pipeline, "queued_calls", None)
        what = f" ({queued} calls still queued)" if queued else ""
        prefix = f"{label}: " if label else ""
        print(
            f"{prefix}spans not exported within {timeout_s:g} s{what}; dropping them "
            "(is a collector listening at OTEL_EXPORTER_OTLP_ENDPOINT?)",
            file=sys.stderr,
            flush=True,
        )
    with contextlib.suppress(Exception):
        pipeline.shutdown(timeout_s=2.0 if flushed else 0.5)
    return flushed
