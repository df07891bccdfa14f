"""The shipped configs: names, and what the real collector binary says about them."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpc_overhead.collector import (
    CONFIG_NAMES,
    CollectorConfigError,
    config_path,
    resolve_config,
    validate_config,
)


@pytest.mark.e2e
@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_shipped_config_is_valid(collector_bin: Path, name: str) -> None:
    validate_config(config_path(name), binary=collector_bin)


@pytest.mark.e2e
def test_clickhouse_config_with_overrides_is_valid(collector_bin: Path) -> None:
    validate_config(
        config_path("clickhouse"),
        binary=collector_bin,
        env={
            "GRPC_OVERHEAD_CLICKHOUSE_ENDPOINT": "http://ch.example:8123",
            "GRPC_OVERHEAD_CLICKHOUSE_DATABASE": "traces",
            "GRPC_OVERHEAD_CLICKHOUSE_TTL": "0s",
            "GRPC_OVERHEAD_COLLECTOR_METRICS_LEVEL": "basic",
            "GRPC_OVERHEAD_COLLECTOR_METRICS_PORT": "18888",
        },
    )


@pytest.mark.e2e
def test_clickhouse_config_commented_cluster_and_jaeger_examples_are_valid(
    collector_bin: Path, tmp_path: Path
) -> None:
    """The commented-out examples must work once a user uncomments them."""
    text = config_path("clickhouse").read_text()
    uncommented = []
    in_jaeger = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# otlp_grpc/jaeger:"):
            in_jaeger = True
        elif in_jaeger and not stripped.startswith("#"):
            in_jaeger = False
        example = stripped.startswith(("# cluster_name:", "# table_engine:", "#   name:"))
        example |= stripped.startswith("#   params:") or in_jaeger
        if stripped.startswith("# exporters: [clickhouse, otlp_grpc/jaeger]"):
            example = True
        elif stripped == "exporters: [clickhouse]":
            continue
        uncommented.append(line.replace("# ", "", 1) if example else line)
    config = tmp_path / "clickhouse-cluster.yaml"
    config.write_text("\n".join(uncommented) + "\n")
    content = config.read_text()
    assert "\n      name: ReplicatedMergeTree" in content
    assert "\n    cluster_name: my_cluster" in content
    assert "\n  otlp_grpc/jaeger:" in content
    assert "exporters: [clickhouse, otlp_grpc/jaeger]" in content
    validate_config(config, binary=collector_bin)


@pytest.mark.e2e
def test_unknown_key_is_rejected_with_collectors_message(
    collector_bin: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        config_path("embedded")
        .read_text()
        .replace("    compression: none", "    compression: none\n    no_such_key: 1")
    )
    with pytest.raises(CollectorConfigError, match="no_such_key"):
        validate_config(bad, binary=collector_bin)


@pytest.mark.unit
def test_config_path_names() -> None:
    assert config_path("embedded").name == "embedded.yaml"
    assert config_path("clickhouse").is_file()


@pytest.mark.unit
def test_config_path_unknown_name_lists_valid_names() -> None:
    with pytest.raises(CollectorConfigError) as caught:
        config_path("prod")
    message = str(caught.value)
    assert "'prod'" in message
    assert "embedded" in message and "clickhouse" in message


@pytest.mark.unit
def test_resolve_config_accepts_paths(tmp_path: Path) -> None:
    own = tmp_path / "mine.yaml"
    own.write_text("receivers: {}\n")
    assert resolve_config(str(own)) == own
    assert resolve_config("embedded") == config_path("embedded")
    with pytest.raises(CollectorConfigError, match="neither a shipped config"):
        resolve_config(str(tmp_path / "missing.yaml"))


@pytest.mark.unit
@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_configs_avoid_fixed_telemetry_port(name: str) -> None:
    """Two collectors on one machine must not both claim localhost:8888."""
    text = config_path(name).read_text()
    assert "level: ${env:GRPC_OVERHEAD_COLLECTOR_METRICS_LEVEL:-none}" in text
    assert "port: ${env:GRPC_OVERHEAD_COLLECTOR_METRICS_PORT:-8888}" in text
