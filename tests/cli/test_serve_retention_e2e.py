"""``serve --retention --max-store-gb`` on a real serve process, flooded over OTLP/gRPC.

Spans carry 1 KB of hex noise each (it compresses by half, no more), stamped from 25
minutes ago to now: about twice a 2 MB budget. Spans two hours old go with a 30-minute
retention. Every export must be acknowledged (the budget makes room, it never refuses),
the store must come back within its budget, and the newest spans must all be there, before
and after a pass: a flood against a budget keeps storing new spans.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request

import grpc
import pytest

from grpc_overhead.processes import free_port
from harness.ground_truth.pipeline import ServeProcess
from tests.analyzer.otlp_requests import attributes, request, span, stub

pytestmark = pytest.mark.e2e

BUDGET_GB = 0.002
REQUESTS = 80
SPANS_PER_REQUEST = 100
MINUTE_NS = 60 * 10**9


def _query(url: str, sql: str) -> list[list]:
    """Rows through serve's ClickHouse HTTP interface (serve owns the store)."""
    asked = urllib.request.Request(url + "/", data=f"{sql} FORMAT JSONCompact".encode())
    with urllib.request.urlopen(asked, timeout=30) as answer:
        return json.loads(answer.read())["data"]


def _spans(first: int, started_ns: int) -> bytes:
    """One request: ``SPANS_PER_REQUEST`` spans numbered from ``first``, 1 KB of noise each."""
    return request(
        *(
            span(
                first + index,
                start_time_unix_nano=started_ns + index,
                end_time_unix_nano=started_ns + index + 5_000,
                attributes=attributes(noise=os.urandom(512).hex()),
            )
            for index in range(SPANS_PER_REQUEST)
        ),
        service="flood",
    )


def _stored(url: str, first: int) -> int:
    names = ", ".join(f"'span-{first + index}'" for index in range(SPANS_PER_REQUEST))
    return int(_query(url, f"SELECT count() FROM otel_traces WHERE SpanName IN ({names})")[0][0])


def _size(url: str) -> int:
    sql = "SELECT sum(bytes_on_disk) FROM system.parts WHERE active AND database = 'default'"
    return int(_query(url, sql)[0][0] or 0)


def test_a_flood_against_a_disk_budget_keeps_storing_new_spans(tmp_path):
    http_port, intake_port = free_port(), free_port()
    serve = ServeProcess(
        tmp_path / "store",
        intake_port,
        clickhouse_http_port=http_port,
        extra_args=["--retention", "30m", "--max-store-gb", str(BUDGET_GB)],
    )
    budget = int(BUDGET_GB * 1e9)
    try:
        url = serve.clickhouse_url
        channel, export = stub(intake_port)
        with channel:
            now = time.time_ns()
            export(_spans(10**6, now - 120 * MINUTE_NS), timeout=30)  # past the retention
            for number in range(REQUESTS):
                started = now - (25 - 25 * number // REQUESTS) * MINUTE_NS
                export(_spans(number * SPANS_PER_REQUEST, started), timeout=30)  # acknowledged
            newest = (REQUESTS - 1) * SPANS_PER_REQUEST
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and _size(url) > budget:
                time.sleep(1)
            assert _size(url) <= budget, "the store did not come back within its budget"
            assert _stored(url, newest) == SPANS_PER_REQUEST  # the newest spans all stay
            assert _stored(url, 0) == 0  # the oldest of the flood went first
            assert _stored(url, 10**6) == 0  # two hours old: past the 30-minute retention
            # After the pass, new spans are stored as before.
            export(_spans(10**7, time.time_ns()), timeout=30)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and _stored(url, 10**7) < SPANS_PER_REQUEST:
                time.sleep(0.5)
            assert _stored(url, 10**7) == SPANS_PER_REQUEST
    except grpc.RpcError as error:
        pytest.fail(f"an export was refused under a disk budget: {error.code()} {error.details()}")
    finally:
        serve.stop()
    said = serve.process.stdout.read()
    assert "retention: raw data 30m, rollups kept, disk budget 0.002 GB" in said
    assert "dropped the spans and calls that started before" in said
