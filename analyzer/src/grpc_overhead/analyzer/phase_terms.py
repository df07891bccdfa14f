"""A phase as SQL: the ``Phase`` pair of expressions and the two ways phases are built.

Kept apart from ``phases`` (which re-exports ``Phase``) so that the phase list
stays readable there.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Phase:
    """A phase as two SQL expressions over a merged call row.

    ``value`` is in nanoseconds and meaningful only where ``defined`` (a
    UInt8 condition) holds. Keeping the two apart lets aggregates skip
    undefined calls with ``-If`` combinators instead of Nullable columns,
    which costs less per row; ``calls()`` turns them into NULLs.
    Expressions may refer to earlier phases as ``{name}_value`` and
    ``{name}_defined``.
    """

    name: str
    value: str
    defined: str
    #: The phase exists only with a clock-offset estimate: a query without it
    #: (``per_call_sql(clock=False)``) leaves the phase out. None does today: the
    #: one-way phases fall back to offset 0 (``unclocked_calls``).
    only_with_clock: bool = False


def between(name: str, later: str, earlier: str) -> Phase:
    """``later - earlier`` when both events were recorded."""
    return Phase(name, f"{later} - {earlier}", f"{later} != 0 AND {earlier} != 0")


def derived(name: str, value: str, *needs: str) -> Phase:
    """From earlier phases (``needs``); ``clock`` among them means the clock offset."""
    defined = " AND ".join(f"{need}_defined" for need in needs)
    return Phase(name, value, defined, only_with_clock="clock" in needs)
