"""Running one experiment cell: its services, its path, its load, its row in ``grpc_runs``.

Each cell gets fresh processes, so no cell inherits another's warm caches,
connections or queued spans: ``instances`` prediction services started with
the cell's server settings (``ServiceProcess``), optionally a toxiproxy in
front of each one (``bandwidth_kb_s`` / ``latency_ms``, both directions),
optional warm-up calls whose spans go nowhere, then one bounded
``grpc-overhead load`` run whose spans (and the services') go to the
experiment's intake. The services are stopped (SIGTERM flushes their spans)
before the run's calls are read back, so the phases cover the whole run.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from grpc_overhead.analyzer.calls import CallsOptions
from grpc_overhead.analyzer.runs import RunRecord, phase_summary, run_calls, stored_calls
from grpc_overhead.analyzer.store import Store
from grpc_overhead.cli.experiment_spec import Cell
from grpc_overhead.cli.processes import ServiceProcess, offline_env, run_load
from grpc_overhead.cli.toxiproxy import DOWNSTREAM, UPSTREAM, Toxiproxy

#: How long the experiment waits for a run's spans to be stored after its processes exited.
STORE_WAIT_S = 30.0
#: How long a cell's load may run beyond its own duration (start-up, the last deadlines).
LOAD_MARGIN_S = 300.0
CALLS_ONLY_TIMEOUT_S = 3600.0


class CellFailed(RuntimeError):
    """A cell's service or load could not run: the message says which and why."""


def service_args(config: dict[str, Any], instance: int, run_id: str) -> list[str]:
    args = ["--workers", str(config["workers"]), "--model-cost-ms", f"{config['model_cost_ms']:g}"]
    args += ["--instance-id", f"{run_id}-{instance}"]
    if config["transport"] == "rest":
        args.append("--rest")
    if config["tls"]:
        args.append("--tls")
    if config["aio"]:
        args.append("--aio")
    if config["max_connection_age_s"] is not None:
        args += ["--max-connection-age-s", f"{config['max_connection_age_s']:g}"]
    if config["max_concurrent_rpcs"] is not None:
        args += ["--max-concurrent-rpcs", str(config["max_concurrent_rpcs"])]
    return args


def load_args(config: dict[str, Any], targets: list[str], tls_ca: str | None) -> list[str]:
    args = ["--target", ",".join(targets), "--json"]
    if config["calls"] is not None:
        args += ["--calls", str(config["calls"])]
    if config["duration"] is not None:
        args += ["--duration", f"{config['duration']:g}"]
    if config["calls"] is None and config["duration"] is None:
        args += ["--calls", "200"]
    args += ["--concurrency", str(config["concurrency"]), "--channels", str(config["channels"])]
    if config["rps"] is not None:
        args += ["--rps", f"{config['rps']:g}"]
    args += ["--timeout", f"{config['timeout']:g}", "--seed", str(config["seed"])]
    args += ["--mode", config["mode"], "--compression", config["compression"]]
    args += ["--entities", str(config["entities"]), "--features", str(config["features"])]
    args += ["--stream-messages", str(config["stream_messages"])]
    args += ["--batch-size", str(config["batch_size"])]
    if config["encoding"] is not None:
        args += ["--encoding", config["encoding"]]
    if config["payload"] == "image":
        args += ["--payload", "image", "--image-bytes", str(config["image_bytes"])]
    if config["transport"] == "rest":
        args += ["--transport", "rest", "--rest-body", config["rest_body"]]
    if tls_ca is not None:
        args += ["--tls-ca", tls_ca]
    return args


def _warmup_args(args: list[str], calls: int) -> list[str]:
    """The cell's load arguments with ``calls`` calls and no time bound."""
    out: list[str] = []
    skip = False
    for item in args:
        if skip:
            skip = False
            continue
        if item in ("--calls", "--duration", "--rps"):
            skip = True
            continue
        out.append(item)
    return [*out, "--calls", str(calls)]


@dataclass
class CellResult:
    record: RunRecord
    summary: dict[str, Any]  # the load's --json summary
    traced_calls: int  # calls whose spans reached the store


def run_cell(
    cell: Cell,
    experiment: str,
    invocation: str,
    run_id: str,
    store: Store,
    options: CallsOptions,
    intake_endpoint: str,
) -> CellResult:
    config = cell.config
    telemetry = {"OTEL_EXPORTER_OTLP_ENDPOINT": intake_endpoint}
    service_env = offline_env(exporter_timeout_s=10, OTEL_SERVICE_NAME="predictor", **telemetry)
    load_env = offline_env(exporter_timeout_s=10, OTEL_SERVICE_NAME="loadgen", **telemetry)
    with ExitStack() as stack:
        services = []
        for instance in range(config["instances"]):
            service = ServiceProcess(service_args(config, instance, run_id), env=service_env)
            try:
                services.append(stack.enter_context(service))
            except Exception as error:  # ServiceStartError, OSError: the cell cannot run
                raise CellFailed(f"service did not start: {error}") from None
        targets = [service.target for service in services]
        tls_ca = str(services[0].tls_ca) if services[0].tls_ca else None
        if config["bandwidth_kb_s"] is not None or config["latency_ms"] is not None:
            targets = _proxied(stack, targets, config)
        args = load_args(config, targets, tls_ca)
        timeout_s = (config["duration"] or 0) + LOAD_MARGIN_S if config["duration"] else None
        if config["warmup_calls"]:
            warm = run_load(*_warmup_args(args, config["warmup_calls"]), env=offline_env(),
                            timeout_s=timeout_s or CALLS_ONLY_TIMEOUT_S)  # fmt: skip
            if warm.returncode != 0:
                raise CellFailed(f"warm-up load failed: {warm.stderr.strip()[-500:]}")
        result = run_load(*args, "--run-id", run_id, env=load_env,
                          timeout_s=timeout_s or CALLS_ONLY_TIMEOUT_S)  # fmt: skip
        ended_ns = time.time_ns()
        if result.returncode != 0:
            raise CellFailed(f"load failed: {result.stderr.strip()[-500:]}")
        summary = result.summary
    # The services stopped (their spans flushed) when the stack closed.
    # Failed calls may never have reached the server: only the others must be complete.
    calls, errors = int(summary["calls"]), int(summary["errors"])
    traced = _wait_stored(store, run_id, calls, calls - errors, options)
    frame = run_calls(store, run_id, options)
    latency = summary.get("latency_ms") or {}
    record = RunRecord(
        run_id=run_id,
        experiment=experiment,
        invocation=invocation,
        cell=cell.index,
        config=config,
        started_ns=ended_ns - int(float(summary["duration_s"]) * 1e9),
        ended_ns=ended_ns,
        calls=int(summary["calls"]),
        errors=int(summary["errors"]),
        calls_per_s=float(summary["rps"]),
        predictions_per_s=float(summary.get("predictions_per_s") or 0.0),
        p50_us=None if latency.get("p50") is None else latency["p50"] * 1000,
        p99_us=None if latency.get("p99") is None else latency["p99"] * 1000,
        phases=phase_summary(frame),
    )
    return CellResult(record, summary, traced)


def _proxied(stack: ExitStack, targets: list[str], config: dict[str, Any]) -> list[str]:
    """A toxiproxy in front of every target, slowing both directions alike."""
    toxiproxy = stack.enter_context(Toxiproxy())
    toxics: dict[str, dict[str, int]] = {}
    for stream in (UPSTREAM, DOWNSTREAM):
        if config["bandwidth_kb_s"] is not None:
            toxics[f"bandwidth:{stream}"] = {"rate": int(config["bandwidth_kb_s"])}
        if config["latency_ms"] is not None:
            toxics[f"latency:{stream}"] = {"latency": int(config["latency_ms"])}
    proxied = []
    for target in targets:
        proxy = toxiproxy.proxy(target)
        toxiproxy.set_toxics(proxy, toxics)
        proxied.append(proxy.listen)
    return proxied


def _wait_stored(
    store: Store, run_id: str, calls: int, complete: int, options: CallsOptions
) -> int:
    """Calls of the run in the store (client halves), once every call has both halves
    there or ``STORE_WAIT_S`` passed: the service's spans come from another process and
    may land after the client's, and phases read before they do would miss them."""
    deadline = time.monotonic() + STORE_WAIT_S
    while True:
        stored = stored_calls(store, run_id, options)
        if stored >= calls and stored_calls(store, run_id, options, complete=True) >= complete:
            return stored
        if time.monotonic() > deadline:
            return stored_calls(store, run_id, options)
        time.sleep(0.2)
