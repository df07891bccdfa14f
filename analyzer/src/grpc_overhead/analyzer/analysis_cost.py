"""What the engine's query analysis costs, and the two rewrites that keep it low.

A comparison with a constant inside an ``AND`` (``server_call_started_ns != 0 AND ...``)
is visited by the analyzer's ``LogicalExpressionOptimizer`` pass, which groups an AND's
comparisons by the expression compared, keyed by its tree hash; a column's hash takes in
its source, and the source of every column the phases read is the whole merged-calls
subquery. Each such comparison cost ~10 ms of analysis (chDB 26.x, measured on two cores):
the ~200 in the per-call SQL were 0.7 of the 0.9 s the engine spent analyzing any query
over unsettled calls, whatever their number (20 or a million), on every page run.
Wrapped in ``toUInt8`` (the identity on a comparison's UInt8, NULL kept) a comparison is
no longer one to that pass: the same values and types, analyzed in a quarter of the time.

Only our own expressions are rewritten, never a user's SQL, and only where the rewrite
cannot change what binds to what: an identifier compared with a number or a bound
parameter, as a whole operand (after ``(``, ``,``, ``AND``, ``OR``, ``NOT``, ``WHEN``,
``THEN``, ``ELSE`` or the start, and before ``)``, ``,``, ``AND``, ``OR``, ``THEN``,
``AS`` or the end): ``a - b > 0`` is left as it is. WHERE clauses are not given to it
(a wrapped comparison would hide a key condition from the primary index).

``GROUP BY GROUPING SETS`` has the same cost in another pass (``GroupingFunctionsResolve``:
each grouping key and each ``grouping()`` argument hashed, sources included): 0.4 s of the
Overview's 0.8 s over one call. Its rows read through ``view(...)`` (``grouping_source``)
are columns of a table function, whose hash does not take in the subquery: 0.4 -> 0.04 s.
Only for a query whose filters are all inside the rows: the view is planned on its own,
and a condition outside it is not pushed into it. Not everywhere either: the view's query
is analyzed once more when it is planned, which costs more than it saves in a query
without grouping sets.
"""

from __future__ import annotations

import re

_BEFORE = r"(?:(?<=\()|(?<=, )|(?<=AND )|(?<=OR )|(?<=NOT )|(?<=WHEN )|(?<=THEN )|(?<=ELSE )|^)"
_COMPARISON = r"([a-z_][a-z_0-9]*) (!=|>=|<=|>|<|=) (-?\d+(?:\.\d+)?|\{[a-z_]+:[A-Za-z0-9]+\})"
_AFTER = r"(?=\)|,| AND | OR | THEN | AS |$)"
_CONSTANT_COMPARISON = re.compile(_BEFORE + _COMPARISON + _AFTER, re.MULTILINE)


def unchained_comparisons(expression: str) -> str:
    """``expression`` with each comparison of a column with a constant that stands as a
    whole operand wrapped in ``toUInt8``: the same value, cheap to analyze (see module)."""
    return _CONSTANT_COMPARISON.sub(
        lambda found: f"toUInt8({found.group(1)} {found.group(2)} {found.group(3)})", expression
    )


def grouping_source(rows: str) -> str:
    """``rows`` (a SELECT) as the FROM of a ``GROUPING SETS`` query: ``view(rows)``, so
    that the engine does not hash the whole subquery for each grouping key (see module)."""
    return f"view({rows})"
