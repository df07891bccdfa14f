"""The ClickHouse HTTP interface driven by the real curl binary, on a real chDB store."""

from __future__ import annotations

import io
import json
import subprocess
import time
import tracemalloc
import zlib
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from grpc_overhead.analyzer.http_interface import Answerer, Credentials, HttpInterface
from grpc_overhead.analyzer.store.base import Store
from grpc_overhead.analyzer.store.user_statements import QueryLimits
from tests.analyzer import seed
from tests.analyzer.seed import module_store_fixture, store_fixture  # noqa: F401

# curl comes with `make test` (scripts/system-packages.sh); without it these fail, loudly.
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def url(module_store: Store) -> Iterator[str]:
    interface = HttpInterface(Answerer(module_store), port=0).start()
    yield interface.url
    interface.stop()


@pytest.fixture(scope="module")
def secured(module_store: Store) -> Iterator[str]:
    answerer = Answerer(
        module_store,
        credentials=Credentials("reader", "s3cret"),
        limits=QueryLimits().lowered(max_result_rows=1000),
    )
    interface = HttpInterface(answerer, port=0).start()
    yield interface.url
    interface.stop()


@pytest.fixture
def calls(store: Store) -> int:
    spans = [span for _ in range(4) for span in seed.synthetic_call()]
    seed.insert_spans(store, spans)
    return 4


def curl(*args: str, timeout_s: float = 60) -> tuple[int, dict[str, str], bytes]:
    """(HTTP status, headers in lower case, body) of ``curl ARGS``."""
    done = subprocess.run(
        ["curl", "-sS", "-g", "-D", "-", *args], capture_output=True, timeout=timeout_s, check=True
    )
    head, _, body = done.stdout.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body


def test_ping_and_root_answer_ok_like_clickhouse(url):
    assert curl(f"{url}/ping")[::2] == (200, b"Ok.\n")
    assert curl(f"{url}/")[::2] == (200, b"Ok.\n")
    status, _, body = curl(f"{url}/nowhere")
    assert status == 404 and b"/ping" in body


def test_get_and_post_queries_with_the_default_and_asked_formats(url, calls):
    status, headers, body = curl(f"{url}/?query=SELECT%20count()%20FROM%20grpc_call_phases")
    assert (status, body) == (200, b"4\n")
    assert headers["x-clickhouse-format"] == "TabSeparated"
    # POST: the statement in the body, or split between the query parameter and the body.
    assert curl(url, "--data-binary", "SELECT 1 + 1")[2] == b"2\n"
    assert curl(f"{url}/?query=SELECT", "--data-binary", "40 + 2")[2] == b"42\n"
    # default_format, and the statement's own FORMAT winning over it.
    as_json = f"{url}/?default_format=JSONEachRow"
    sql = "SELECT rpc_method, count() AS calls FROM grpc_call_phases GROUP BY rpc_method"
    assert json.loads(curl(as_json, "--data-binary", sql)[2]) == {
        "rpc_method": "Predict",
        "calls": 4,
    }
    assert curl(as_json, "--data-binary", "SELECT 7 AS x FORMAT CSV")[2] == b"7\n"


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("TabSeparatedWithNames", b"n\ttext\n1\ta\n"),
        ("TSVRaw", b"1\ta\n"),
        ("CSVWithNames", b'"n","text"\n1,"a"\n'),
        ("JSONEachRow", b'{"n":1,"text":"a"}\n'),
        ("JSONCompactEachRow", b'[1, "a"]\n'),
    ],
)
def test_text_formats_are_the_engines_own(url, output, expected):
    assert curl(url, "--data-binary", f"SELECT 1 AS n, 'a' AS text FORMAT {output}")[2] == expected


def test_json_pretty_arrow_and_parquet(url, calls):
    sql = "SELECT rpc_method, total_us FROM grpc_call_phases"
    answer = json.loads(curl(url, "--data-binary", f"{sql} FORMAT JSON")[2])
    assert answer["rows"] == calls and answer["meta"][0]["name"] == "rpc_method"
    pretty = curl(url, "--data-binary", f"{sql} FORMAT PrettyCompact")[2].decode()
    assert "rpc_method" in pretty and "Predict" in pretty
    _, headers, arrow = curl(url, "--data-binary", f"{sql} FORMAT Arrow")
    assert headers["content-type"] == "application/octet-stream"
    assert pa.ipc.open_file(pa.BufferReader(arrow)).read_all().num_rows == calls
    parquet = curl(f"{url}/?default_format=Parquet", "--data-binary", sql)[2]
    table = pq.read_table(io.BytesIO(parquet))
    assert table.column("total_us").to_pylist() == [seed.Truth().expected_phases_us()["total"]] * 4


def test_database_and_query_parameters(url):
    body = curl(f"{url}/?database=system", "--data-binary", "SELECT currentDatabase()")[2]
    assert body == b"system\n"
    # Values as ClickHouse clients send them: text, escaped the way ClickHouse parses it.
    query = (
        "SELECT {text:String} AS t, {n:UInt32} + 1 AS n, {xs:Array(UInt8)} AS xs FORMAT JSONEachRow"
    )
    values = "param_text=it%27s%5Cta%5Cttab&param_n=41&param_xs=%5B1,2%5D"
    body = curl(f"{url}/?{values}", "--data-binary", query)[2]
    assert json.loads(body) == {"t": "it's\ta\ttab", "n": 42, "xs": [1, 2]}


@pytest.mark.parametrize(
    ("sql", "status", "code", "words"),
    [
        ("SELEC 1", 400, 62, "Syntax error"),
        ("SELECT * FROM no_such_table", 404, 60, "no_such_table"),
        ("SELECT 1 FORMAT NoSuchFormat", 404, 73, "UNKNOWN_FORMAT"),
        ("DROP TABLE grpc_calls", 500, 164, "DROP statements are refused"),
        ("INSERT INTO grpc_calls (TraceId) VALUES ('x')", 500, 164, "refused"),
        ("KILL QUERY WHERE 1", 500, 164, "KILL"),
        ("SELECT 1 INTO OUTFILE '/tmp/x'", 500, 164, "INTO OUTFILE"),
        ("SELECT 1 SETTINGS readonly = 0", 500, 164, "readonly"),
        # chDB's Python layer makes objects of these, not bytes (UNKNOWN_EXCEPTION before)
        ("SELECT 1 FORMAT DataFrame", 404, 73, "UNKNOWN_FORMAT"),
        ("SELECT 1 FORMAT ArrowTable", 404, 73, "UNKNOWN_FORMAT"),
    ],
)
def test_errors_look_like_clickhouses(url, sql, status, code, words):
    got_status, headers, body = curl(url, "--data-binary", sql)
    text = body.decode()
    assert got_status == status, text
    assert headers["x-clickhouse-exception-code"] == str(code)
    assert text.startswith(f"Code: {code}. DB::Exception: ") and words in text
    assert text.rstrip().endswith(")") and "Traceback" not in text


def test_bodies_that_cannot_be_read_get_clickhouse_errors(url, tmp_path):
    """Hostile or careless bodies: each a ClickHouse-style error, and a gzip bomb is never
    inflated whole in memory (200 MB from 200 KB: it was, before the size check)."""
    inflater = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b" " * (1 << 20)
    bomb = tmp_path / "bomb.gz"
    bomb.write_bytes(b"".join([inflater.compress(chunk) for _ in range(200)] + [inflater.flush()]))
    gzip_header = ["-H", "Content-Encoding: gzip", url, "--data-binary"]
    tracemalloc.start()
    try:
        status, headers, body = curl(*gzip_header, f"@{bomb}")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (status, headers["x-clickhouse-exception-code"]) == (413, "229"), body
    assert peak < 50 << 20, f"{peak >> 20} MiB held for a 200 MiB gzip body"
    cases = [
        ([*gzip_header, "SELECT 1"], 400, "CANNOT_DECOMPRESS"),
        (["-H", "Content-Encoding: br", url, "--data-binary", "SELECT 1"], 415, "br"),
        (["-H", "Content-Length: -5", url, "--data-binary", ""], 400, "Content-Length -5"),
        (["-X", "PUT", url, "--data-binary", "SELECT 1"], 501, "GET or POST"),  # was HTML
    ]
    for args, status, words in cases:
        got, headers, body = curl(*args, timeout_s=20)  # -5 used to wait for EOF: a hang
        assert got == status and "x-clickhouse-exception-code" in headers, body
        assert body.startswith(b"Code: ") and words.encode() in body
    assert curl(url, "--data-binary", "SELECT 7")[2] == b"7\n"  # still serving


def test_settings_lower_the_limits_never_raise_them(url, calls):
    status, headers, body = curl(
        f"{url}/?max_result_rows=2", "--data-binary", "SELECT * FROM numbers(5)"
    )
    assert status == 500 and b"TOO_MANY_ROWS" in body  # the engine enforced the lowered limit
    # Above the ceiling: the ceiling holds (no error, no raise).
    assert curl(f"{url}/?max_result_rows=1e12", "--data-binary", "SELECT 1")[2] == b"1\n"
    status, headers, body = curl(f"{url}/?allow_ddl=1", "--data-binary", "SELECT 1")
    assert (status, headers["x-clickhouse-exception-code"]) == (500, "164")
    assert b"Cannot modify 'allow_ddl' setting in readonly mode" in body


def test_native_framing_clickhouse_go_asks_for_is_refused_clearly(url):
    status, headers, body = curl(
        f"{url}/?default_format=Native&client_protocol_version=54460",
        "--data-binary",
        "SELECT 1",
    )
    assert (status, headers["x-clickhouse-exception-code"]) == (501, "48")
    assert b"client_protocol_version" in body
    assert curl(f"{url}/?default_format=Native", "--data-binary", "SELECT 1 AS x")[0] == 200


def test_credentials_by_basic_auth_headers_or_parameters(secured):
    status, headers, body = curl(secured, "--data-binary", "SELECT 1")
    assert (status, headers["x-clickhouse-exception-code"]) == (401, "194")
    assert "www-authenticate" in headers
    status, headers, body = curl("-u", "reader:wrong", secured, "--data-binary", "SELECT 1")
    assert (status, headers["x-clickhouse-exception-code"]) == (403, "516")
    assert b"Authentication failed" in body
    assert curl("-u", "reader:s3cret", secured, "--data-binary", "SELECT 1")[2] == b"1\n"
    headers_ok = ["-H", "X-ClickHouse-User: reader", "-H", "X-ClickHouse-Key: s3cret"]
    assert curl(*headers_ok, secured, "--data-binary", "SELECT 2")[2] == b"2\n"
    assert curl(f"{secured}/?user=reader&password=s3cret&query=SELECT%203")[2] == b"3\n"
    assert curl(f"{secured}/ping")[0] == 200  # health checks need no credentials


def test_wrong_passwords_lock_their_source_out_and_the_right_one_then_waits(module_store):
    """Five wrong passwords are free; the sixth earns a lockout, during which even the
    right password is refused unchecked (429, Retry-After); after it, the right one works
    and clears the count. No password at all is not a guess."""
    answerer = Answerer(module_store, credentials=Credentials("reader", "s3cret"))
    interface = HttpInterface(answerer, port=0).start()
    try:
        query = ["--data-binary", "SELECT 1"]
        for _ in range(3):
            assert curl(interface.url, *query)[0] == 401  # asked, not counted
        for attempt in range(6):
            status, headers, body = curl("-u", "reader:guess", interface.url, *query)
            assert status == 403, (attempt, body)
        status, headers, body = curl("-u", "reader:s3cret", interface.url, *query)
        assert status == 429, body
        assert headers["retry-after"] == "5" and headers["x-clickhouse-exception-code"] == "516"
        assert b"too many wrong passwords from 127.0.0.1" in body and b"s3cret" not in body
        time.sleep(5.2)
        assert curl("-u", "reader:s3cret", interface.url, *query)[2] == b"1\n"
        assert curl("-u", "reader:guess", interface.url, *query)[0] == 403  # a fresh count
    finally:
        interface.stop()


def test_a_client_that_hangs_up_gets_its_query_killed(url, store):
    marker = "hang_up_marker_7361"
    done = subprocess.run(
        [
            "curl",
            "-sS",
            "--max-time",
            "1",
            url,
            "--data-binary",
            f"SELECT count() FROM numbers(1000000000000) WHERE '{marker}' != ''",
        ],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 28  # curl gave up after a second
    deadline = time.monotonic() + 20
    running = 1
    while time.monotonic() < deadline:
        found = store.query(
            "SELECT count() AS n FROM system.processes WHERE query LIKE {marker:String}"
            " AND query NOT LIKE '%system.processes%'",
            {"marker": f"%{marker}%"},
        )
        running = int(found["n"].iloc[0])
        if not running:
            break
        time.sleep(0.2)
    assert running == 0
