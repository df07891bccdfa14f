"""The real gRPC peers as test and benchmark processes: the grpc-go peer
(``tools/bin/grpc-go-peer``, ``make grpc-go-peer``), traced by gRPC's own OpenTelemetry
plugin (gRFC A72) or by otelgrpc, and the grpc-java peer (``tools/grpc-java-peer``,
``make grpc-java-peer``), traced by grpc-opentelemetry (A72) or, with ``agent=VERSION``,
by the OpenTelemetry Java agent alone (``tools/otel-javaagent``, ``make otel-javaagent``)
with its default settings, and the Node peer (``tools/node-peer``, ``make node-peer``):
@grpc/grpc-js traced by the OpenTelemetry Node SDK with its defaults (OTLP over
HTTP/protobuf). Each runs as a server that answers the prediction service's method or as
a client that calls any gRPC server, and exports OTLP to wherever the caller points it.

Messages are opaque to the peer: the client sends the bytes of a serialized
``PredictRequest`` and the server answers with those of a ``PredictResponse``, both made
here with the service's own protos, so a Python client can parse what a Go server sends
and a Python server what a Go client sends.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from grpc_overhead.prediction.protos import prediction_pb2 as pb
from grpc_overhead.processes import ServiceProcess, offline_env

ROOT = Path(__file__).resolve().parents[1]
BINARY = ROOT / "tools" / "bin" / "grpc-go-peer"
JAVA_PEER = ROOT / "tools" / "grpc-java-peer"
NODE_PEER = ROOT / "tools" / "node-peer"
PREDICTION_PROTO = (
    ROOT
    / "instrumented-service"
    / "prediction"
    / "src"
    / "grpc_overhead"
    / "prediction"
    / "protos"
    / "prediction.proto"
)
PREDICT = "/grpc_overhead.prediction.v1.Predictor/Predict"
#: The instrumentation scopes the two tracing modes report (what the analyzer keys on).
A72_SCOPE = "grpc-go"
OTELGRPC_SCOPE = "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
JAVA_SCOPE = "grpc-java"
#: The OpenTelemetry Java agent's jars (``scripts/fetch-otel-javaagent.sh`` pins the
#: versions) and the instrumentation scope of its gRPC spans.
JAVAAGENT_DIR = ROOT / "tools" / "otel-javaagent"
JAVAAGENT_SCRIPT = ROOT / "scripts" / "fetch-otel-javaagent.sh"
JAVAAGENT_SCOPE = "io.opentelemetry.grpc-1.6"
NODE_SCOPE = "@opentelemetry/instrumentation-grpc"


class PeerMissing(RuntimeError):
    """The peer binary is not built."""


def binary() -> Path:
    if not BINARY.is_file():
        raise PeerMissing(f"{BINARY} is missing: run `make grpc-go-peer` first")
    return BINARY


def javaagent_versions() -> tuple[str, ...]:
    """The Java agent versions the fetch script pins (its ``VERSIONS=(...)`` line)."""
    found = re.search(r"^VERSIONS=\(([^)]*)\)", JAVAAGENT_SCRIPT.read_text(), re.MULTILINE)
    assert found, f"no VERSIONS=(...) in {JAVAAGENT_SCRIPT}"
    return tuple(found.group(1).split())


def javaagent(version: str) -> Path:
    jar = JAVAAGENT_DIR / f"opentelemetry-javaagent-{version}.jar"
    if not jar.is_file():
        raise PeerMissing(f"{jar} is missing: run `make otel-javaagent` first")
    return jar


def agent_env(service_name: str, endpoint: str | None = None) -> dict[str, str]:
    """A JVM's environment under the Java agent with its default settings: no OTEL_* (nor
    GRPC_*) variable but OTEL_SERVICE_NAME and, where given, OTEL_EXPORTER_OTLP_ENDPOINT
    (a test on a free port; the protocol stays the default, http/protobuf). The agent's
    metrics and logs exporters stay on too, as in a service started with no settings."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("OTEL_", "GRPC_", "JAVA_TOOL_OPTIONS"))
    }
    env["OTEL_SERVICE_NAME"] = service_name
    if endpoint is not None:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    return env


def java_command(agent: str | None = None) -> list[str]:
    """The peer's JVM; with ``agent`` (a version) the OpenTelemetry Java agent attached."""
    jar = JAVA_PEER / "grpc-java-peer.jar"
    if not jar.is_file():
        raise PeerMissing(f"{jar} is missing: run `make grpc-java-peer` first")
    classpath = f"{jar}:{JAVA_PEER / 'lib'}/*"
    # With the agent, C1 only: the agent's start-up (instrumenting every class it loads)
    # then takes half the CPU (5 s instead of 10 s here); runs with it time no phase.
    attach = [f"-javaagent:{javaagent(agent)}", "-XX:TieredStopAtLevel=1"] if agent else []
    return [
        "java",
        *attach,
        "-XX:+UseSerialGC",
        "-Xshare:auto",
        "-cp",
        classpath,
        "grpcoverhead.GrpcJavaPeer",
    ]


def java_env(env: Mapping[str, str]) -> dict[str, str]:
    """grpc-java's tracing is experimental (an environment switch); the OpenTelemetry Java
    SDK has no host resource detector of its own, so host.name (the clock domain) is set."""
    resource = env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    if "host.name=" not in resource:
        resource = ",".join(
            part for part in (resource, f"host.name={socket.gethostname()}") if part
        )
    java = {
        **peer_env(env),
        "GRPC_EXPERIMENTAL_ENABLE_OTEL_TRACING": "true",
        "OTEL_RESOURCE_ATTRIBUTES": resource,
    }
    return java


def peer_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a Go or Java peer: without OTEL_EXPORTER_OTLP_TIMEOUT, which the Python
    SDK reads in seconds ("0.5", as ``offline_env`` sets it) and the Go and Java SDKs in
    milliseconds (Go ignores "0.5", Java refuses to start): their default (10 s) keeps a
    cold JVM's first export from timing out."""
    return {name: value for name, value in env.items() if name != "OTEL_EXPORTER_OTLP_TIMEOUT"}


def node_command() -> list[str]:
    script = NODE_PEER / "main.js"
    if not script.is_file() or not (NODE_PEER / "node_modules").is_dir():
        raise PeerMissing(f"{NODE_PEER} is missing: run `make node-peer` first")
    return ["node", str(script), "--proto", str(PREDICTION_PROTO)]


def write_messages(directory: Path, entities: int = 20, features: int = 8) -> tuple[Path, Path]:
    """A serialized PredictRequest and PredictResponse of this size, as two files."""
    request = pb.PredictRequest(
        request_id="grpc-go-peer",
        query=pb.Query(text="query", embedding=[0.25] * 16),
        entities=pb.EntityList(
            entities=[pb.Entity(id=f"e{i}", features=[0.5] * features) for i in range(entities)]
        ),
    )
    response = pb.PredictResponse(
        request_id="grpc-go-peer",
        score_list=pb.ScoreList(scores=[0.75] * entities),
        model_version="grpc-go-peer",
    )
    directory.mkdir(parents=True, exist_ok=True)
    request_file, response_file = directory / "request.bin", directory / "response.bin"
    request_file.write_bytes(request.SerializeToString())
    response_file.write_bytes(response.SerializeToString())
    return request_file, response_file


class GoServer(ServiceProcess):
    """``grpc-go-peer -mode server`` on a free loopback port; ``target`` once started."""

    def __init__(
        self,
        response_file: Path,
        *,
        tracing: str = "a72",
        env: Mapping[str, str],
        extra: Sequence[str] = (),
    ) -> None:
        super().__init__(env=peer_env(env))
        self.peer_args = [
            "-mode",
            "server",
            "-tracing",
            tracing,
            "-listen",
            "127.0.0.1:0",
            "-response-file",
            str(response_file),
            *extra,
        ]

    @property
    def command(self) -> list[str]:
        return [str(binary()), *self.peer_args]


def _java_args(agent: str | None, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """Tracing flag and environment: A72 (the peer's own SDK), or with ``agent`` the peer
    untraced by itself (``--tracing none``, no experimental switch) and ``env`` as given
    (``agent_env``): the agent alone instruments it."""
    if agent:
        return ["--tracing", "none"], dict(env)
    return [], java_env(env)


class JavaServer(ServiceProcess):
    """The grpc-java peer as a server (A72 tracing, or the Java agent ``agent`` alone);
    ``target`` once started."""

    def __init__(
        self,
        response_file: Path,
        *,
        env: Mapping[str, str],
        extra: Sequence[str] = (),
        agent: str | None = None,
    ) -> None:
        tracing, java = _java_args(agent, env)
        super().__init__(env=java, startup_timeout_s=90 if agent else 60)
        self.agent = agent
        self.peer_args = [
            "--mode",
            "server",
            "--method",
            PREDICT,
            "--response-file",
            str(response_file),
            *tracing,
            *extra,
        ]

    @property
    def command(self) -> list[str]:
        return [*java_command(self.agent), *self.peer_args]


class NodeServer(ServiceProcess):
    """The Node peer as a server (NodeSDK defaults: OTLP over HTTP/protobuf); ``target``
    once started. ``env`` should set OTEL_SERVICE_NAME and, off the default port,
    OTEL_EXPORTER_OTLP_ENDPOINT (a base URL: the SDK appends ``/v1/traces``)."""

    name = "node-peer server"

    def __init__(self, *, env: Mapping[str, str], extra: Sequence[str] = ()) -> None:
        super().__init__(env=peer_env(env))
        self.peer_args = ["--mode", "server", "--listen", "127.0.0.1:0", *extra]

    @property
    def command(self) -> list[str]:
        return [*node_command(), *self.peer_args]


def run_node_client(
    target: str,
    *,
    calls: int,
    env: Mapping[str, str],
    extra: Sequence[str] = (),
    timeout_s: float = 60,
) -> dict[str, Any]:
    """The Node peer as a client, to completion (its spans flushed by ``sdk.shutdown()``);
    its JSON summary (calls, errors, codes)."""
    done = subprocess.run(
        [*node_command(), "--mode", "client", "--target", target, "--calls", str(calls), *extra],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=peer_env(env),
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise RuntimeError(f"node-peer client failed ({done.returncode}): {done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_java_client(
    target: str,
    request_file: Path,
    *,
    calls: int,
    env: Mapping[str, str],
    extra: Sequence[str] = (),
    timeout_s: float = 90,
    agent: str | None = None,
) -> dict[str, Any]:
    """The grpc-java peer as a client (A72, or the Java agent ``agent`` alone), to
    completion; its JSON summary (calls, errors)."""
    tracing, java = _java_args(agent, env)
    done = subprocess.run(
        [
            *java_command(agent),
            "--mode",
            "client",
            "--target",
            target,
            "--method",
            PREDICT,
            "--request-file",
            str(request_file),
            "--calls",
            str(calls),
            *tracing,
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=java,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise RuntimeError(f"grpc-java-peer client failed ({done.returncode}): {done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_client(
    target: str,
    request_file: Path,
    *,
    calls: int,
    env: Mapping[str, str],
    tracing: str = "a72",
    extra: Sequence[str] = (),
    timeout_s: float = 60,
) -> dict[str, Any]:
    """``grpc-go-peer -mode client`` to completion; its JSON summary (calls, errors)."""
    done = subprocess.run(
        [
            str(binary()),
            "-mode",
            "client",
            "-tracing",
            tracing,
            "-target",
            target,
            "-method",
            PREDICT,
            "-request-file",
            str(request_file),
            "-calls",
            str(calls),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=peer_env(env),
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise RuntimeError(f"grpc-go-peer client failed ({done.returncode}): {done.stderr}")
    return json.loads(done.stdout)


def read_calls(store: Path) -> list[dict[str, Any]]:
    """Every call of a stopped store (``harness.read_calls``), read in a subprocess."""
    done = subprocess.run(
        [sys.executable, "-m", "harness.read_calls", str(store)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=offline_env(),
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"reading calls failed: {done.stderr.strip()}")
    return json.loads(done.stdout)
