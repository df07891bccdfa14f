"""A phase as SQL: the ``Phase`` pair of expressions and the two ways phases are built.

Kept apart from ``phases`` (which re-exports ``Phase``) so that the phase list
stays readable there.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from grpc_overhead.analyzer.result_columns import ALL_PHASES


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


def references(phase: Phase) -> set[str]:
    """The other phases ``phase`` is computed from (``{name}_value``, ``{name}_defined``)."""
    return set(phases_read(phase.value, phase.defined)) - {phase.name}


def needed(phases: Sequence[Phase], wanted: Collection[str]) -> frozenset[str]:
    """``wanted`` and the phases of ``phases`` they are computed from (one level: derived
    phases are computed from base ones only); ValueError for an unknown name."""
    unknown = set(wanted) - set(ALL_PHASES)
    if unknown:
        raise ValueError(f"unknown phases: {', '.join(sorted(unknown))}")
    by_name = {phase.name: phase for phase in phases}
    return frozenset(set(wanted).union(*(references(by_name[name]) for name in wanted)))


def phases_read(*sql: str) -> frozenset[str]:
    """The phases SQL text reads (``{name}_value``, ``{name}_defined``): what a query
    over ``per_call_sql`` rows passes as its ``phases`` (why: ``per_call_sql``)."""
    found = re.findall(r"\b(\w+)_(?:value|defined)\b", " ".join(sql))
    return frozenset(name for name in found if name in ALL_PHASES)


def inline_own_value(phase: Phase) -> str:
    """``phase.defined`` with its own ``{name}_value`` written out (``phase_bounds`` refers
    to it by alias, which one query level up would name the placeholder below)."""
    return re.sub(rf"\b{phase.name}_value\b", f"({phase.value})", phase.defined)
