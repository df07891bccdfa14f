"""The grpc-go peer (``tools/bin/grpc-go-peer``, built by ``make grpc-go-peer``) as test and
benchmark processes: a server that answers the prediction service's methods, and a client
that calls any gRPC server, both traced by gRPC's own OpenTelemetry plugin (gRFC A72) or by
otelgrpc and exporting OTLP to wherever the caller points them.

Messages are opaque to the peer: the client sends the bytes of a serialized
``PredictRequest`` and the server answers with those of a ``PredictResponse``, both made
here with the service's own protos, so a Python client can parse what a Go server sends
and a Python server what a Go client sends.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from grpc_overhead.cli.processes import ServiceProcess, offline_env
from grpc_overhead.prediction.protos import prediction_pb2 as pb

ROOT = Path(__file__).resolve().parents[1]
BINARY = ROOT / "tools" / "bin" / "grpc-go-peer"
PREDICT = "/grpc_overhead.prediction.v1.Predictor/Predict"
#: The instrumentation scopes the two tracing modes report (what the analyzer keys on).
A72_SCOPE = "grpc-go"
OTELGRPC_SCOPE = "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"


class PeerMissing(RuntimeError):
    """The peer binary is not built."""


def binary() -> Path:
    if not BINARY.is_file():
        raise PeerMissing(f"{BINARY} is missing: run `make grpc-go-peer` first")
    return BINARY


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
        super().__init__(env=env)
        self.peer_args = ["-mode", "server", "-tracing", tracing, "-listen", "127.0.0.1:0",
                          "-response-file", str(response_file), *extra]  # fmt: skip

    @property
    def command(self) -> list[str]:
        return [str(binary()), *self.peer_args]


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
        [str(binary()), "-mode", "client", "-tracing", tracing, "-target", target,
         "-method", PREDICT, "-request-file", str(request_file), "-calls", str(calls), *extra],
        capture_output=True, text=True, timeout=timeout_s, env=dict(env),
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"grpc-go-peer client failed ({done.returncode}): {done.stderr}")
    return json.loads(done.stdout)


def read_calls(store: Path) -> list[dict[str, Any]]:
    """Every call of a stopped store (``harness.read_calls``), read in a subprocess."""
    done = subprocess.run(
        [sys.executable, "-m", "harness.read_calls", str(store)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        env=offline_env(), cwd=ROOT,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"reading calls failed: {done.stderr.strip()}")
    return json.loads(done.stdout)
