"""Comparisons kept out of the engine's AND-chain optimizer (``analysis_cost``)."""

from __future__ import annotations

import pytest

from grpc_overhead.analyzer.analysis_cost import unchained_comparisons
from grpc_overhead.analyzer.phases import per_call_sql

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("a != 0 AND b != 0", "toUInt8(a != 0) AND toUInt8(b != 0)"),
        ("(a >= 0) AND NOT (b < -1.5)", "(toUInt8(a >= 0)) AND NOT (toUInt8(b < -1.5))"),
        ("if(x = 1, y, z) AS w", "if(toUInt8(x = 1), y, z) AS w"),
        ("c > {since_ns:Int64} OR d <= 2", "toUInt8(c > {since_ns:Int64}) OR toUInt8(d <= 2)"),
        ("multiIf(a > 0, 1, b < 0, 2, 3)", "multiIf(toUInt8(a > 0), 1, toUInt8(b < 0), 2, 3)"),
    ],
)
def test_whole_operands_compared_with_a_constant_are_wrapped(expression, expected):
    assert unchained_comparisons(expression) == expected


@pytest.mark.parametrize(
    "expression",
    [
        "a - b > 0",  # (a - b) > 0: wrapping b > 0 would change what binds
        "a > 0 + 1",  # a > (0 + 1)
        "arr[k] > 0 AND f(x) != 0",  # not an identifier: left as it is
        "k -> k > 1",  # inside a lambda: left as it is
        "a > b AND c = d",  # no constant
        "name = 'x'",  # strings are the engine's own pass's business
        "lower_bound > 0.5e3",  # not a plain number
    ],
)
def test_anything_else_is_left_as_it_is(expression):
    assert unchained_comparisons(expression) == expression


def test_the_phase_expressions_are_given_to_it():
    assert "toUInt8(client_start_ns != 0)" in per_call_sql(clock=False)
