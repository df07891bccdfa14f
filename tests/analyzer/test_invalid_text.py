"""Text that is not UTF-8 in the store never breaks a read path (issue 10).

``report`` (every format), ``sql`` (every format) and the SQL console read a
store holding such a call; the bytes themselves stay as stored.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpc_overhead.analyzer.insights import sql_console
from grpc_overhead.cli import report as report_command
from grpc_overhead.cli import sql as sql_command
from tests.analyzer.invalid_text import BAD_HEX, insert_call_with_invalid_text
from tests.analyzer.seed import analysis_store

pytestmark = pytest.mark.e2e

READABLE = "bad\ufffd"


@pytest.fixture
def store_dir(tmp_path: Path) -> str:
    directory = tmp_path / "store"
    with analysis_store(directory) as store:
        insert_call_with_invalid_text(store)
        found = sql_console.run(store, "SELECT SpanName, SpanAttributes FROM otel_traces")
        assert found["SpanName"].str.startswith(READABLE).all()
        raw = store.query("SELECT DISTINCT hex(SpanName) AS h FROM otel_traces")
        assert raw["h"].tolist() == [BAD_HEX]  # stored byte for byte
    return str(directory)


@pytest.mark.parametrize("output", ["table", "json", "csv"])
def test_report_reads_it(store_dir: str, output: str, capsys: pytest.CaptureFixture) -> None:
    assert report_command.main(["--store", store_dir, "--format", output]) == 0
    text = capsys.readouterr().out
    assert READABLE in text or "bad\\ufffd" in text
    if output == "json":
        assert json.loads(text)["calls"] == 1


@pytest.mark.parametrize("output", ["table", "json", "csv"])
def test_sql_reads_it(store_dir: str, output: str, capsys: pytest.CaptureFixture) -> None:
    statement = "SELECT * FROM otel_traces LIMIT 100"
    assert sql_command.main([statement, "--store", store_dir, "--format", output]) == 0
    assert READABLE in capsys.readouterr().out
