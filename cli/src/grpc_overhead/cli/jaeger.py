"""A real Jaeger v2 (``tools/bin/jaeger``, built by ``scripts/build-jaeger.sh``) on chosen ports.

Jaeger v2 is an OpenTelemetry Collector distribution: one YAML config names
its OTLP receivers, the ``jaeger_storage`` extension (here in-memory) and the
``jaeger_query`` extension that serves the HTTP APIs (``/api/traces/{id}``,
``/api/v3/...``) and the UI routes on one port. ``config_text`` writes that
config for the given ports (all loopback), so tests and ``demo --jaeger`` run
it beside a developer's own Jaeger on 4317/4318/16686 without clashing:

    with Jaeger(JaegerPorts.free()) as jaeger:
        jaeger.otlp_grpc   # host:port for an OTLP/gRPC exporter
        jaeger.url         # http://127.0.0.1:PORT, the query API and UI base

The module does not publish the UI's built assets, so ``/`` and ``/trace/{id}``
answer with Jaeger's placeholder page; ``extensions.jaeger_query.ui.assets_path``
points a user's own build of jaeger-ui at it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpc_overhead.processes import free_port, stop_process

ROOT = Path(__file__).resolve().parents[4]
BINARY = ROOT / "tools" / "bin" / "jaeger"
BUILD_SCRIPT = ROOT / "scripts" / "build-jaeger.sh"


class JaegerError(RuntimeError):
    """Jaeger is missing, did not start, or an API call failed."""


@dataclass(frozen=True)
class JaegerPorts:
    otlp_grpc: int = 4317
    otlp_http: int = 4318
    query_http: int = 16686
    query_grpc: int = 16685

    @classmethod
    def free(cls) -> JaegerPorts:
        return cls(free_port(), free_port(), free_port(), free_port())


def config_text(ports: JaegerPorts, host: str = "127.0.0.1", max_traces: int = 100_000) -> str:
    """Jaeger v2's config: OTLP in, memory storage, query APIs; its own telemetry off."""
    return f"""\
# Jaeger v2 (v1.76.0) for grpc-overhead: OTLP in, traces in memory, query APIs and UI routes.
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    logs:
      level: warn
    metrics:
      level: none

extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: {host}:{ports.query_http}
    grpc:
      endpoint: {host}:{ports.query_grpc}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: {max_traces}

receivers:
  otlp:
    protocols:
      grpc:
        endpoint: {host}:{ports.otlp_grpc}
      http:
        endpoint: {host}:{ports.otlp_http}

processors:
  batch:
    timeout: 200ms

exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


def build(binary: Path = BINARY) -> Path:
    """The binary, built (and cached) by the project's script when missing or stale."""
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    if done.returncode != 0 or not binary.is_file():
        raise JaegerError(
            f"building Jaeger failed (exit {done.returncode}):\n{done.stderr[-2000:]}"
        )
    return binary


def get_json(url: str, timeout_s: float = 10.0) -> Any:
    """GET a Jaeger API URL; JaegerError (with the body) for anything but 200 and JSON."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        body = error.read().decode(errors="replace")[:500]
        raise JaegerError(f"GET {url} -> HTTP {error.code}: {body}") from None
    except (urllib.error.URLError, OSError, json.JSONDecodeError) as error:
        raise JaegerError(f"GET {url} failed: {error}") from None


class Jaeger:
    """A running Jaeger v2; stopped (SIGTERM, then SIGKILL) when the block ends."""

    def __init__(
        self,
        ports: JaegerPorts | None = None,
        *,
        binary: Path = BINARY,
        log: Path | None = None,
        startup_timeout_s: float = 30.0,
    ) -> None:
        if not binary.is_file():
            raise JaegerError(f"{binary} is missing: run `make jaeger` first")
        self.ports = ports or JaegerPorts.free()
        self.binary = binary
        self.startup_timeout_s = startup_timeout_s
        self._directory = tempfile.TemporaryDirectory(prefix="grpc-overhead-jaeger-")
        self.config = Path(self._directory.name) / "jaeger.yaml"
        self.log = log or Path(self._directory.name) / "jaeger.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports.query_http}"

    @property
    def otlp_grpc(self) -> str:
        return f"127.0.0.1:{self.ports.otlp_grpc}"

    def start(self) -> Jaeger:
        self.config.write_text(config_text(self.ports))
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [str(self.binary), "--config", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "GOMAXPROCS": os.environ.get("GOMAXPROCS", "2")},
                start_new_session=True,
            )
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise JaegerError(f"jaeger exited with {self.process.returncode}:\n{self.tail()}")
            try:
                get_json(f"{self.url}/api/services", timeout_s=1.0)
                return self
            except JaegerError:
                time.sleep(0.1)
        self.stop()
        raise JaegerError(f"jaeger's query API did not answer in {self.startup_timeout_s:g} s")

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def trace(self, trace_id: str) -> dict[str, Any]:
        """The trace from API v3 (OTLP JSON: ``{"result": {"resourceSpans": [...]}}``)."""
        return get_json(f"{self.url}/api/v3/traces/{trace_id}")

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, timeout_s=10.0)
            self.process = None

    def __enter__(self) -> Jaeger:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
        self._directory.cleanup()
