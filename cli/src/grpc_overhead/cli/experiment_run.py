"""Running one experiment cell: its services, its path, its load, its row in ``grpc_runs``.

Each cell gets fresh processes, so no cell inherits another's warm caches,
connections or queued spans: ``instances`` prediction services started with
the cell's server settings (``ServiceProcess``), optionally a toxiproxy in
front of each one (``bandwidth_kb_s`` / ``latency_ms``, both directions),
optional warm-up calls whose spans go nowhere, then one bounded
``grpc-overhead load`` run whose spans (and the services') go to the
experiment's intake. That is one *round*; a cell runs once per round of the
experiment, interleaved with the other cells, every round under the cell's
run id. The services are stopped (SIGTERM flushes their spans) before the
round's calls are waited for, so the phases cover the whole run.
"""

from __future__ import annotations

import statistics
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.runs import (
    RunRecord,
    phase_summary,
    round_labels,
    run_calls,
    stored_calls,
)
from grpc_overhead.analyzer.store import Store
from grpc_overhead.cli.balancer import Balancer
from grpc_overhead.cli.experiment_spec import Cell
from grpc_overhead.cli.toxiproxy import DOWNSTREAM, UPSTREAM, Toxiproxy
from grpc_overhead.processes import ServiceProcess, offline_env, run_load

#: How long the experiment waits for a run's spans to be stored after its processes exited,
#: counted from the last time the stored count grew: an intake still catching up on a busy
#: machine keeps its calls (the count 43 short of 7,383 after 30 s once, all there later).
STORE_WAIT_S = 30.0
#: The longest the wait lasts while the count still grows (a stuck trickle must end).
STORE_WAIT_MAX_S = 300.0
#: How long a cell's load may run beyond its own duration (start-up, the last deadlines).
LOAD_MARGIN_S = 300.0
CALLS_ONLY_TIMEOUT_S = 3600.0
#: How long a stopped service may take to flush its last spans before it is killed: its
#: flush lasts while they still leave, up to a minute (``prediction.telemetry``).
SERVICE_STOP_S = 75.0


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
class RoundOutcome:
    """One round of a cell: what its load generator said, and when it ran."""

    round: int
    summary: dict[str, Any]  # the load's --json summary
    started_ns: int
    ended_ns: int
    machine: dict[str, Any] = field(default_factory=dict)  # the window's machine check
    connections: dict[str, int] = field(default_factory=dict)  # instance -> via the balancer

    @property
    def untraced_calls(self) -> int:
        """Calls whose client spans the load generator could not deliver (its export
        failed, its queue was full, or they were still queued when it gave up at exit):
        they will never be stored, so the wait for the round's spans does not wait for
        them and the report says how many there were."""
        spans = self.summary.get("spans") or {}
        return sum(int(spans.get(key) or 0) for key in ("failed", "dropped", "unsent"))

    def to_json(self) -> dict[str, Any]:
        latency = self.summary.get("latency_ms") or {}
        return {
            "round": self.round,
            "started_ns": self.started_ns,
            "ended_ns": self.ended_ns,
            "calls": int(self.summary["calls"]),
            "errors": int(self.summary["errors"]),
            "calls_per_s": round(float(self.summary["rps"]), 3),
            "p50_us": None if latency.get("p50") is None else round(latency["p50"] * 1000, 1),
            "p99_us": None if latency.get("p99") is None else round(latency["p99"] * 1000, 1),
            "connect_ms": self.summary.get("connect_ms"),
            "untraced_calls": self.untraced_calls,
            "connections": self.connections,
            "under_load": bool(self.machine.get("under_load")),
        }


@dataclass
class CellResult:
    record: RunRecord
    rounds: list[RoundOutcome]
    traced_calls: int  # calls whose spans reached the store
    frame: Any  # the run's calls (``runs.run_calls``), for comparisons
    labels: Any  # each call's round (``runs.round_labels``)
    instances: list[list[int]] = field(default_factory=list)  # per round: calls per instance


def run_round(cell: Cell, round_number: int, run_id: str, intake_endpoint: str) -> RoundOutcome:
    """Fresh services (and path) for the cell, warm-up, one bounded load carrying the cell's
    run id; the services stop (their spans flushed) before this returns."""
    config = cell.config
    telemetry = {"OTEL_EXPORTER_OTLP_ENDPOINT": intake_endpoint}
    service_env = offline_env(exporter_timeout_s=10, OTEL_SERVICE_NAME="predictor", **telemetry)
    load_env = offline_env(exporter_timeout_s=10, OTEL_SERVICE_NAME="loadgen", **telemetry)
    with ExitStack() as stack:
        services = []
        for instance in range(config["instances"]):
            service = ServiceProcess(
                service_args(config, instance, run_id),
                env=service_env,
                stop_timeout_s=SERVICE_STOP_S,
            )
            try:
                services.append(stack.enter_context(service))
            except Exception as error:  # ServiceStartError, OSError: the cell cannot run
                raise CellFailed(f"service did not start: {error}") from None
        targets = [service.target for service in services]
        tls_ca = str(services[0].tls_ca) if services[0].tls_ca else None
        balancer = None
        if config["one_address"]:
            # Seeded by the round: each round's connections land anew, as after a restart.
            balancer = Balancer(targets, seed=config["seed"] + round_number)
            try:
                stack.enter_context(balancer)
            except Exception as error:  # the balancer did not start: the cell cannot run
                raise CellFailed(f"balancer did not start: {error}") from None
            targets = [balancer.target]
        if config["bandwidth_kb_s"] is not None or config["latency_ms"] is not None:
            targets = _proxied(stack, targets, config)
        args = load_args(config, targets, tls_ca)
        timeout_s = (config["duration"] or 0) + LOAD_MARGIN_S if config["duration"] else None
        if config["warmup_calls"]:
            warm = run_load(
                *_warmup_args(args, config["warmup_calls"]),
                env=offline_env(),
                timeout_s=timeout_s or CALLS_ONLY_TIMEOUT_S,
            )
            if warm.returncode != 0:
                raise CellFailed(f"warm-up load failed: {warm.stderr.strip()[-500:]}")
        result = run_load(
            *args, "--run-id", run_id, env=load_env, timeout_s=timeout_s or CALLS_ONLY_TIMEOUT_S
        )
        ended_ns = time.time_ns()
        if result.returncode != 0:
            raise CellFailed(f"load failed: {result.stderr.strip()[-500:]}")
        summary = result.summary
    # The load's own start: its process exits seconds after its last call (spans flushed).
    length_ns = int(float(summary["duration_s"]) * 1e9)
    started_ns = int(summary.get("started_unix_ns") or ended_ns - length_ns)
    ended_ns = started_ns + length_ns
    outcome = RoundOutcome(round_number, summary, started_ns, ended_ns)
    if balancer is not None:  # its report comes when the stack closed it
        by_address = dict(zip(balancer.backends, range(len(balancer.backends)), strict=True))
        outcome.connections = {
            str(by_address[address]): count for address, count in balancer.connections.items()
        }
    return outcome


def wait_rounds_stored(
    store: Store, run_id: str, rounds: list[RoundOutcome], options: CallsOptions
) -> int:
    """Wait for every round so far to be stored: a round's spans must be in before the next
    cell's load starts (their intake would otherwise share its CPU)."""
    untraced = sum(item.untraced_calls for item in rounds)
    calls = sum(int(item.summary["calls"]) for item in rounds) - untraced
    # Failed calls may never have reached the server: only the others must be complete.
    complete = calls - sum(int(item.summary["errors"]) for item in rounds)
    return wait_stored(store, run_id, calls, complete, options)


def cell_result(
    cell: Cell,
    experiment: str,
    invocation: str,
    run_id: str,
    rounds: list[RoundOutcome],
    store: Store,
    options: CallsOptions,
) -> CellResult:
    """The cell's row of ``grpc_runs`` over all its rounds: calls and errors summed, the
    throughput over the rounds' load time, the client's p50/p99 the median of the rounds'
    (each round's from the load generator's clock), the phases over every call with their
    intervals (``verdicts``: rounds, then calls)."""
    traced = wait_rounds_stored(store, run_id, rounds, options)
    frame = run_calls(store, run_id, options)
    windows = [(item.started_ns, item.ended_ns) for item in rounds]
    labels = round_labels(frame, windows) if len(windows) > 1 else None
    summaries = [item.summary for item in rounds]
    # Rates weighted by each round's load time: one round keeps the load's own figures.
    duration_s = sum(float(item["duration_s"]) for item in summaries) or 1e-9
    calls = sum(int(item["calls"]) for item in summaries)
    made = sum(float(item["rps"]) * float(item["duration_s"]) for item in summaries)
    predictions = sum(
        float(item.get("predictions_per_s") or 0.0) * float(item["duration_s"])
        for item in summaries
    )
    machine = [item.machine for item in rounds]
    record = RunRecord(
        run_id=run_id,
        experiment=experiment,
        invocation=invocation,
        cell=cell.index,
        config=cell.config,
        started_ns=min(item.started_ns for item in rounds),
        ended_ns=max(item.ended_ns for item in rounds),
        calls=calls,
        errors=sum(int(item["errors"]) for item in summaries),
        calls_per_s=made / duration_s,
        predictions_per_s=predictions / duration_s,
        p50_us=_median_of(rounds, "p50_us"),
        p99_us=_median_of(rounds, "p99_us"),
        phases=phase_summary(frame, rounds=labels),
        rounds=[item.to_json() for item in rounds],
        machine={"rounds": machine},
        under_load=any(item.get("under_load") for item in machine),
    )
    spread = instance_calls(frame, labels, int(cell.config["instances"]))
    return CellResult(record, rounds, traced, frame, labels, spread)


def instance_calls(frame: Any, labels: Any, instances: int) -> list[list[int]]:
    """Calls per server instance in each round, most first, padded with the instances that
    got none: how evenly the cell's load spread (every round starts new instances, so
    rounds are not summed). Calls whose server half never arrived are not counted."""
    if "server_instance" not in frame or frame.empty:
        return []
    rounds = labels if labels is not None else [0] * len(frame)
    named = frame.assign(round=list(rounds))
    named = named[named["server_instance"].astype(str) != ""]
    out = []
    for _, group in sorted(named.groupby("round"), key=lambda item: item[0]):
        counts = sorted(group["server_instance"].astype(str).value_counts().tolist(), reverse=True)
        out.append([int(count) for count in counts] + [0] * max(0, instances - len(counts)))
    return out


def _median_of(rounds: list[RoundOutcome], key: str) -> float | None:
    values = [item.to_json()[key] for item in rounds]
    values = [value for value in values if value is not None]
    return float(statistics.median(values)) if values else None


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


def wait_stored(
    store: Store,
    run_id: str,
    calls: int,
    complete: int,
    options: CallsOptions,
    quiet_s: float = STORE_WAIT_S,
    longest_s: float = STORE_WAIT_MAX_S,
) -> int:
    """Calls of the run in the store (client halves), once every call has both halves
    there, or the counts stopped growing for ``quiet_s`` (or ``longest_s`` passed): the
    service's spans come from another process and may land after the client's, and phases
    read before they do would miss them."""
    started = last_growth = time.monotonic()
    seen = (-1, -1)
    pause = 0.2
    while True:
        counts = (
            stored_calls(store, run_id, options),
            stored_calls(store, run_id, options, complete=True),
        )
        if counts[0] >= calls and counts[1] >= complete:
            return counts[0]
        now = time.monotonic()
        if counts != seen:
            seen, last_growth = counts, now
        if now - last_growth > quiet_s or now - started > longest_s:
            return counts[0]
        time.sleep(pause)
        pause = min(pause * 1.5, 1.0)  # fewer reads beside an intake that is catching up
