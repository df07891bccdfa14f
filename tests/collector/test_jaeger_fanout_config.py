"""``collector/embedded-jaeger.yaml`` is ``embedded.yaml`` plus the Jaeger exporter, nothing else.

Run end to end against a real Jaeger in tests/jaeger/test_jaeger.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit

COLLECTOR = Path(__file__).resolve().parents[2] / "collector"


def test_the_fanout_config_is_the_embedded_one_plus_jaeger() -> None:
    embedded = yaml.safe_load((COLLECTOR / "embedded.yaml").read_text())
    fanout = yaml.safe_load((COLLECTOR / "embedded-jaeger.yaml").read_text())
    jaeger = fanout["exporters"].pop("otlp_grpc/jaeger")
    assert jaeger["endpoint"] == "${env:GRPC_OVERHEAD_JAEGER_ENDPOINT:-127.0.0.1:14317}"
    # Its own queue, in memory: never the store's on-disk queue.
    assert jaeger["sending_queue"]["enabled"] and "storage" not in jaeger["sending_queue"]
    exporters = fanout["service"]["pipelines"]["traces"]["exporters"]
    assert exporters == ["otlp_grpc/intake", "otlp_grpc/jaeger"]
    fanout["service"]["pipelines"]["traces"]["exporters"] = ["otlp_grpc/intake"]
    assert fanout == embedded
