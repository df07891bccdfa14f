"""What Grafana and its ClickHouse datasource do to a panel's rawSql before ClickHouse runs it.

No Grafana can be built here (its modules are refused by the Go module proxy and
no registry ships it), so the tests run each panel's SQL through a port of the
three steps a query takes, each from the source named beside it (datasource
v4.x, the line that v4.19+ ships):

1. the frontend's ``applyConditionalAll`` (grafana/clickhouse-datasource
   ``src/data/CHDatasource.ts``): every ``$__conditionalAll(cond, $var)``, last
   first, becomes ``1=1`` when ``$var`` is All or empty, else ``cond``;
2. Grafana's ``templateSrv.replace`` with the datasource's ``format`` function
   (same file): ``$var``/``${var}`` and ``${var:singlequote}``; a multi-value
   (or All) selection is ``'a','b'``; Grafana's ``singlequote`` escapes ``'`` as
   ``\\'`` (public/app/features/templating/formatRegistry.ts); unknown names
   (the datasource's own ``$__`` macros) stay as they are;
3. the backend's macros (``pkg/macros/macros.go``) through the plugin SDK's
   ``sqlutil.Interpolate`` (``data/sqlutil/macros.go``: names longest first,
   ``\\$__name\\b``, an argument list only where "(" follows the name, split
   on depth-1 commas), with the SDK's defaults for the names the datasource
   leaves out.

Only what the dashboards use must be exact; anything else they might use raises.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

ALL = "$__all"


@dataclass
class Variable:
    """A dashboard variable's current selection (``current.value``) and its options."""

    name: str
    value: str | list[str]
    options: list[str] = field(default_factory=list)

    def values(self) -> str | list[str]:
        """What templateSrv substitutes: All (no custom allValue) means every option."""
        if self.value == ALL or self.value == [ALL]:
            return list(self.options)
        return self.value


@dataclass(frozen=True)
class QueryContext:
    """The request the backend gets: the time range and the panel's interval."""

    time_from: datetime
    time_to: datetime
    interval: timedelta = timedelta(seconds=1)


# -- 1. $__conditionalAll (frontend) --------------------------------------------------------------

_CONDITIONAL = "$__conditionalAll("
_VARIABLE_IN_ARGUMENT = re.compile(r"(?<=\$\{)[\w\d]+(?=\})|(?<=\$)[\w\d]+")


def _macro_arguments(query: str, index: int) -> list[str]:
    """CHDatasource.getMacroArgs: ``index`` is at the '('; split on depth-1 commas."""
    arguments: list[str] = []
    depth = 0
    last = 1
    rest = query[index:]
    for match in re.finditer(r"\(|\)|,", rest):
        token, end = match.group(0), match.end()
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        if token == "," and depth == 1:
            arguments.append(rest[last : end - 1])
            last = end
        if depth == 0:
            arguments.append(rest[last : end - 1])
            return arguments
    return []


def apply_conditional_all(raw: str, variables: Mapping[str, Variable]) -> str:
    index = raw.rfind(_CONDITIONAL)
    while index != -1:
        arguments = _macro_arguments(raw, index + len(_CONDITIONAL) - 1)
        if len(arguments) != 2:
            return raw
        phrase = arguments[0]
        found = _VARIABLE_IN_ARGUMENT.search(arguments[1].strip())
        if found:
            variable = variables.get(found.group(0))
            value = variable.value if variable else None
            text = ",".join(value) if isinstance(value, list) else value
            if text in ("", ALL):
                phrase = "1=1"
        # String.prototype.replace with a string pattern: the first occurrence only.
        raw = raw.replace(f"{_CONDITIONAL}{arguments[0]},{arguments[1]})", phrase, 1)
        index = raw.rfind(_CONDITIONAL)
    return raw


# -- 2. templateSrv.replace (Grafana) --------------------------------------------------------------

# Grafana's variableRegex (public/app/features/variables/utils.ts).
_VARIABLE = re.compile(
    r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^\}]+))?(?::([^\}]+))?\}"
)


def _singlequote(value: str | list[str]) -> str:
    if isinstance(value, list):
        return ",".join(_singlequote(item) for item in value)
    return "'" + value.replace("'", "\\'") + "'"


def _datasource_format(value: str | list[str]) -> str:
    """CHDatasource.format: arrays as 'a','b' (no escaping), scalars as they are."""
    if isinstance(value, list):
        return "'" + "','".join(value) + "'"
    return value


_FORMATS: dict[str, Callable[[str | list[str]], str]] = {"singlequote": _singlequote}


def replace_variables(raw: str, variables: Mapping[str, Variable]) -> str:
    def substitute(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(4)
        fmt = match.group(3) or match.group(6)
        if match.group(5):
            raise NotImplementedError(f"field path in {match.group(0)}")
        variable = variables.get(name)
        if variable is None:
            return match.group(0)  # templateSrv leaves unknown names (our $__ macros) alone
        if fmt is None:
            return _datasource_format(variable.values())
        if fmt not in _FORMATS:
            raise NotImplementedError(f"variable format {fmt!r} in {match.group(0)}")
        return _FORMATS[fmt](variable.values())

    return _VARIABLE.sub(substitute, raw)


# -- 3. backend macros (sqlutil.Interpolate + pkg/macros) ------------------------------------------


def _unix(moment: datetime) -> int:
    return math.floor(moment.astimezone(UTC).timestamp())


def _expect(arguments: Sequence[str], count: int) -> None:
    if len(arguments) != count:
        raise ValueError(
            f"unexpected number of arguments: expected {count} argument, received {len(arguments)}"
        )


def _time_filter(context: QueryContext, arguments: Sequence[str]) -> str:
    _expect(arguments, 1)
    column = arguments[0]
    start, end = _unix(context.time_from), _unix(context.time_to)
    return f"{column} >= toDateTime({start}) AND {column} <= toDateTime({end})"


def _time_interval(context: QueryContext, arguments: Sequence[str]) -> str:
    _expect(arguments, 1)
    seconds = int(max(context.interval.total_seconds(), 1))
    return f"toStartOfInterval(toDateTime({arguments[0]}), INTERVAL {seconds} second)"


def _interval_seconds(context: QueryContext, arguments: Sequence[str]) -> str:
    return str(int(max(context.interval.total_seconds(), 1)))


MacroFunction = Callable[[QueryContext, Sequence[str]], str]

#: The datasource's macros the dashboards use (pkg/macros/macros.go); anything else raises.
MACROS: dict[str, MacroFunction] = {
    "fromTime": lambda context, _: f"toDateTime({_unix(context.time_from)})",
    "toTime": lambda context, _: f"toDateTime({_unix(context.time_to)})",
    "timeFilter": _time_filter,
    "timeInterval": _time_interval,
    "interval_s": _interval_seconds,
}
#: Names the backend knows but these tests do not port: a dashboard using one fails the test.
UNPORTED = (
    "fromTime_ms",
    "toTime_ms",
    "timeFilter_ms",
    "dateFilter",
    "dateTimeFilter",
    "dt",
    "timeInterval_ms",
    "timeFrom",
    "timeTo",
    "timeGroup",
    "table",
    "column",
    "interval",
    "interval_ms",
)


def _parse_arguments(rest: str) -> tuple[list[str] | None, int]:
    """sqlutil.parseArgs: an argument list only where "(" follows the name at once;
    commas split arguments at depth 1 only. Length -1: no closing bracket."""
    if not rest.startswith("("):
        return None, 0
    arguments: list[str] = []
    depth = 0
    current: list[str] = []
    for index, char in enumerate(rest):
        if char == "(":
            depth += 1
            if depth == 1:
                continue
        elif char == ")":
            depth -= 1
            if depth == 0:
                arguments.append("".join(current).strip())
                return arguments, index + 1
        elif char == "," and depth == 1:
            arguments.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    return None, -1


def interpolate_macros(sql: str, context: QueryContext) -> str:
    """sqlutil.Interpolate: longest names first, every occurrence of a match replaced."""
    for name in UNPORTED:
        if re.search(rf"\$__{name}\b", sql):
            raise NotImplementedError(f"$__{name} is not ported to the tests")
    for name in sorted(MACROS, key=len, reverse=True):
        function = MACROS[name]
        matches = []
        for match in re.finditer(rf"\$__{name}\b", sql):
            arguments, length = _parse_arguments(sql[match.end() :])
            if length < 0:
                raise ValueError("failed to parse macro arguments (missing close bracket?)")
            matches.append((sql[match.start() : match.end() + length], arguments or []))
        for text, arguments in matches:
            sql = sql.replace(text, function(context, arguments))
    return sql


def expand(raw: str, variables: Mapping[str, Variable], context: QueryContext) -> str:
    """A panel's rawSql as ClickHouse receives it."""
    return interpolate_macros(
        replace_variables(apply_conditional_all(raw, variables), variables), context
    )
