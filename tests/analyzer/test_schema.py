"""otel_traces DDL: the exporter's own template text, rendered its way, runnable on chDB."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest

from grpc_overhead.analyzer import schema
from grpc_overhead.analyzer.intake.rows import COLUMNS
from grpc_overhead.analyzer.schema import SchemaOptions, go_quote, go_sprintf
from grpc_overhead.analyzer.store import open_store

MODULE = f"{schema.EXPORTER_MODULE}@{schema.EXPORTER_VERSION}"


def _module_dir(tmp: Path) -> Path:
    """The exporter module in the Go module cache, downloaded there if missing."""
    go = shutil.which("go")
    if go is None:
        pytest.fail(
            "the Go toolchain is needed to fetch the clickhouse exporter module "
            f"{MODULE} (run `make collector` or `make system-packages`)"
        )
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    cache = subprocess.run(
        [go, "env", "GOMODCACHE"], capture_output=True, text=True, check=True, env=env
    ).stdout.strip()
    escaped = re.sub(r"[A-Z]", lambda m: "!" + m.group().lower(), schema.EXPORTER_MODULE)
    directory = Path(cache) / f"{escaped}@{schema.EXPORTER_VERSION}"
    if not directory.is_dir():
        subprocess.run([go, "mod", "init", "fetch"], cwd=tmp, env=env, capture_output=True)
        fetched = subprocess.run(
            [go, "mod", "download", "-json", MODULE],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if fetched.returncode != 0 or not directory.is_dir():
            pytest.fail(f"cannot download {MODULE}: {fetched.stdout}{fetched.stderr}")
    return directory


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _module_dir(tmp_path_factory.mktemp("gomod")) / "internal" / "sqltemplates"


@pytest.mark.unit
@pytest.mark.parametrize(
    ("ours", "file_name"),
    [
        ("TRACES_TABLE_TEMPLATE", "traces_table.sql"),
        ("TRACES_ID_TS_TABLE_TEMPLATE", "traces_id_ts_lookup_table.sql"),
        ("TRACES_ID_TS_VIEW_TEMPLATE", "traces_id_ts_lookup_mv.sql"),
    ],
)
def test_templates_are_the_exporters_byte_for_byte(
    templates: Path, ours: str, file_name: str
) -> None:
    assert getattr(schema, ours) == (templates / file_name).read_text()


@pytest.mark.unit
def test_default_rendering_matches_the_module_template(templates: Path) -> None:
    table = (templates / "traces_table.sql").read_text()
    expected = go_sprintf(table, "default", "otel_traces", "", "MergeTree()", "")
    assert schema.render_traces_table(SchemaOptions()) == expected
    assert expected.startswith('CREATE TABLE IF NOT EXISTS "default"."otel_traces"  (\n')
    view = schema.render_trace_id_ts_view(SchemaOptions())
    assert 'TO "default"."otel_traces_trace_id_ts"' in view
    assert 'FROM "default"."otel_traces"' in view


@pytest.mark.unit
def test_cluster_engine_and_ttl_render_like_the_exporter() -> None:
    options = SchemaOptions(
        database="otel",
        traces_table="spans",
        cluster="my`cluster",
        engine="ReplicatedMergeTree",
        engine_params="'/clickhouse/tables/{shard}/spans', '{replica}'",
        ttl=timedelta(hours=72),
    )
    table = schema.render_traces_table(options)
    # config_test.go TestClusterString: my`cluster -> ON CLUSTER `my``cluster`
    assert table.startswith('CREATE TABLE IF NOT EXISTS "otel"."spans" ON CLUSTER `my``cluster` (')
    assert "ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/spans', '{replica}')" in table
    assert "\nTTL toDateTime(Timestamp) + toIntervalDay(3)\n" in table
    lookup = schema.render_trace_id_ts_table(options)
    assert "TTL toDateTime(Start) + toIntervalDay(3)" in lookup
    assert schema.render_create_database(options) == (
        'CREATE DATABASE IF NOT EXISTS "otel" ON CLUSTER `my``cluster`'
    )
    assert schema.render_create_database(SchemaOptions()) is None


@pytest.mark.unit
@pytest.mark.parametrize(
    ("ttl", "expression"),
    [
        (timedelta(days=2), "TTL t + toIntervalDay(2)"),
        (timedelta(hours=5), "TTL t + toIntervalHour(5)"),
        (timedelta(minutes=90), "TTL t + toIntervalMinute(90)"),
        (timedelta(seconds=61), "TTL t + toIntervalSecond(61)"),
        (timedelta(0), ""),
    ],
)
def test_ttl_expression_follows_generate_ttl_expr(ttl: timedelta, expression: str) -> None:
    assert schema.ttl_expression(ttl, "t") == expression


@pytest.mark.unit
def test_go_quote_is_strconv_quote() -> None:
    assert go_quote("otel_traces") == '"otel_traces"'
    assert go_quote('a"b\\c\n') == '"a\\"b\\\\c\\n"'
    assert go_quote("\x01é") == '"\\x01é"'


@pytest.mark.unit
def test_our_columns_are_the_exporters_insert_columns(templates: Path) -> None:
    insert = (templates / "traces_insert.sql").read_text()
    listed = insert.split("(", 1)[1].split(")", 1)[0]
    assert tuple(name.strip() for name in listed.split(",")) == COLUMNS


@pytest.mark.e2e
def test_schema_creation_is_idempotent_on_chdb(tmp_path: Path) -> None:
    with open_store(tmp_path / "store") as store:
        schema.create_schema(store)
        store.command("INSERT INTO otel_traces (TraceId, SpanName) VALUES ('ab', 'x')")
        schema.create_schema(store)  # again: nothing changes, nothing is lost
        schema.create_schema(store, SchemaOptions(database="otel", ttl=timedelta(days=7)))
        tables = store.query(
            "SELECT database, name, engine FROM system.tables "
            "WHERE database IN ('default', 'otel') ORDER BY database, name"
        )
        assert list(zip(tables["database"], tables["name"], tables["engine"], strict=True)) == [
            ("default", "otel_traces", "MergeTree"),
            ("default", "otel_traces_trace_id_ts", "MergeTree"),
            ("default", "otel_traces_trace_id_ts_mv", "MaterializedView"),
            ("otel", "otel_traces", "MergeTree"),
            ("otel", "otel_traces_trace_id_ts", "MergeTree"),
            ("otel", "otel_traces_trace_id_ts_mv", "MaterializedView"),
        ]
        assert store.query("SELECT count() AS n FROM otel_traces")["n"][0] == 1
        lookup = store.query("SELECT TraceId FROM otel_traces_trace_id_ts")
        assert list(lookup["TraceId"]) == ["ab"]
        created = store.query("SHOW CREATE TABLE otel.otel_traces")["statement"][0]
        assert "TTL toDateTime(Timestamp) + toIntervalDay(7)" in created
