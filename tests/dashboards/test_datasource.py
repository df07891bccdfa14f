"""The port of the datasource's query expansion, against the examples its sources document."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.dashboards.datasource import (
    ALL,
    QueryContext,
    Variable,
    apply_conditional_all,
    expand,
    interpolate_macros,
    replace_variables,
)

pytestmark = pytest.mark.unit

CONTEXT = QueryContext(
    datetime(2026, 9, 21, 12, 0, 0, 999_000, tzinfo=UTC),
    datetime(2026, 9, 21, 13, 0, 0, tzinfo=UTC),
    timedelta(milliseconds=500),
)


def test_conditional_all_as_the_datasources_docs_describe_it() -> None:
    # docs/sources/template-variables.md, "Using the All option with $__conditionalAll".
    sql = (
        "SELECT count() FROM system.tables\n"
        "WHERE $__conditionalAll(database IN (${database:singlequote}), $database)"
    )
    every = {"database": Variable("database", ALL, ["db1", "db2"])}
    assert apply_conditional_all(sql, every).endswith("WHERE 1=1")
    some = {"database": Variable("database", ["db1", "db2"], ["db1", "db2", "db3"])}
    assert expand(sql, some, CONTEXT).endswith("WHERE database IN ('db1','db2')")
    # ${var} in the second argument works too; an empty value counts as All.
    braced = "$__conditionalAll(x = '$v', ${v})"
    assert apply_conditional_all(braced, {"v": Variable("v", "")}) == "1=1"
    assert apply_conditional_all(braced, {"v": Variable("v", "a")}) == "x = '$v'"


def test_variables_and_their_formats() -> None:
    variables = {
        "one": Variable("one", "it's"),
        "many": Variable("many", ["a", "b"]),
        "every": Variable("every", ALL, ["x", "y"]),
    }
    assert replace_variables("${one:singlequote}", variables) == "'it\\'s'"
    assert replace_variables("$one ${many} $every", variables) == "it's 'a','b' 'x','y'"
    assert replace_variables("${many:singlequote}", variables) == "'a','b'"
    # Names Grafana does not know (the backend's macros) are left for the backend.
    assert replace_variables("$__timeFilter(t) $__interval_s", variables) == (
        "$__timeFilter(t) $__interval_s"
    )
    with pytest.raises(NotImplementedError):
        replace_variables("${many:regex}", variables)


def test_macros_as_pkg_macros_expands_them() -> None:
    assert interpolate_macros("WHERE $__timeFilter(Timestamp)", CONTEXT) == (
        "WHERE Timestamp >= toDateTime(1789992000) AND Timestamp <= toDateTime(1789995600)"
    )
    # The interval is whole seconds, at least one.
    assert interpolate_macros("INTERVAL $__interval_s second", CONTEXT) == "INTERVAL 1 second"
    assert interpolate_macros("$__timeInterval(t)", CONTEXT) == (
        "toStartOfInterval(toDateTime(t), INTERVAL 1 second)"
    )
    # A macro without "(" right after its name takes no arguments, whatever follows.
    assert interpolate_macros("toUnixTimestamp($__fromTime) + f(1)", CONTEXT) == (
        "toUnixTimestamp(toDateTime(1789992000)) + f(1)"
    )
    with pytest.raises(NotImplementedError):
        interpolate_macros("$__timeFilter_ms(t)", CONTEXT)
    with pytest.raises(ValueError, match="expected 1 argument"):
        interpolate_macros("$__timeFilter(a, b)", CONTEXT)
    with pytest.raises(ValueError, match="missing close bracket"):
        interpolate_macros("$__timeFilter(a", CONTEXT)
