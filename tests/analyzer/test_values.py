"""AsString rules of pdata, one by one (values.py is the reference both paths follow)."""

from __future__ import annotations

import math

import pytest

from grpc_overhead.analyzer.intake.values import (
    any_value_string,
    complex_value_json,
    go_float,
    go_json,
    go_json_string,
)
from tests.analyzer.otlp_requests import value

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (0.0, "0"),
        (-0.0, "-0"),
        (1.0, "1"),
        (0.1, "0.1"),
        (123456789.125, "123456789.125"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (1.2345e25, "1.2345e+25"),
        (1e-6, "0.000001"),
        (9.999e-7, "9.999e-7"),
        (1.5e-7, "1.5e-7"),
        (2.5e-300, "2.5e-300"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (1e16, "10000000000000000"),
        (math.nan, "NaN"),
        (math.inf, "Infinity"),
        (-math.inf, "-Infinity"),
    ],
)
def test_go_float(number: float, text: str) -> None:
    assert go_float(number) == text


def test_json_strings_escape_like_encoding_json() -> None:
    assert go_json_string('a"b\\c\n\t\r\b\f') == '"a\\"b\\\\c\\n\\t\\r\\b\\f"'
    assert go_json_string("\x01\x1f\x7f<>&") == '"\\u0001\\u001f\x7f<>&"'
    assert go_json_string("\u2028\u2029é✓") == '"\\u2028\\u2029é✓"'
    assert go_json_string(b"a\xffb".decode("utf-8", "surrogateescape")) == '"a\\ufffdb"'


def test_json_values() -> None:
    assert go_json([1, 2.5, True, None, b"\x00", "s", {"b": 1, "a": [None]}]) == (
        '[1,2.5,true,null,"AA==","s",{"a":[null],"b":1}]'
    )
    assert go_json([1.0, math.inf]) == ""  # encoding/json refuses: AsString gives ''


def test_any_value_string_for_every_type() -> None:
    assert any_value_string(value("text")) == "text"
    assert any_value_string(value(-7)) == "-7"
    assert any_value_string(value(2.0)) == "2"
    assert any_value_string(value(False)) == "false"
    assert any_value_string(value(b"\xff\xfe")) == "//4="
    assert any_value_string(value(None)) == ""
    assert any_value_string(value(["x", 1])) == '["x",1]'
    assert any_value_string(value({"z": 1, "a": "b"})) == '{"a":"b","z":1}'


def test_complex_values_keep_go_behaviour_for_bad_utf8() -> None:
    array = value(["PLACEHOLDER", 3]).array_value.SerializeToString()
    array = array.replace(b"PLACEHOLDER", b"bad\xff-bytes!")
    assert complex_value_json("array", array) == '["bad\\ufffd-bytes!",3]'
    kvlist = value({"k": 1, "k2": "v"}).kvlist_value.SerializeToString()
    assert complex_value_json("kvlist", kvlist) == '{"k":1,"k2":"v"}'
    duplicated = kvlist + value({"k": 2}).kvlist_value.SerializeToString()
    assert complex_value_json("kvlist", duplicated) == '{"k":2,"k2":"v"}'  # last one wins
