"""How the pages write numbers: durations in the unit a reader expects, shares, rates, sizes.

One place, so a p99 reads the same on every page and in tests that check
what a page shows against the data.
"""

from __future__ import annotations

import math

MISSING = "n/a"


def duration(us: float | None) -> str:
    """µs -> '850 µs', '2.69 ms', '1.23 s' (three significant digits); 'n/a' when missing."""
    if us is None or not math.isfinite(us):
        return MISSING
    us = float(f"{us:.3g}")  # round first, so 999.7 µs reads '1 ms', not '1000 µs'
    magnitude = abs(us)
    if magnitude < 1_000:
        return f"{_significant(us)} µs"
    if magnitude < 1_000_000:
        return f"{_significant(us / 1_000)} ms"
    return f"{_significant(us / 1_000_000)} s"


def share(fraction: float | None) -> str:
    """0.2562 -> '25.6 %'; 'n/a' when missing."""
    if fraction is None or not math.isfinite(fraction):
        return MISSING
    return f"{fraction * 100:.1f} %"


def rate(per_second: float | None) -> str:
    """Calls per second: '12.3/s', '1,234/s'; 'n/a' when missing (fewer than two calls)."""
    if per_second is None or not math.isfinite(per_second):
        return MISSING
    if per_second >= 100:
        return f"{per_second:,.0f}/s"
    return f"{_significant(per_second)}/s"


def size(num_bytes: float | None) -> str:
    """Bytes -> '512 B', '250 kB', '1.5 MB' (decimal units, as the cost per MB)."""
    if num_bytes is None or not math.isfinite(num_bytes):
        return MISSING
    num_bytes = float(f"{num_bytes:.3g}")
    for unit, factor in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(num_bytes) >= factor:
            return f"{_significant(num_bytes / factor)} {unit}"
    return f"{num_bytes:.0f} B"


def count(value: int) -> str:
    return f"{int(value):,}"


def _significant(value: float) -> str:
    """Three significant digits without scientific notation or trailing zeros."""
    if value == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    text = f"{value:.{digits}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text
