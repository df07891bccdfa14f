"""The demo's supervisor: starts the stack as child processes and stops it losing no span.

``Demo`` starts serve, the collector and the prediction services in order,
plays ``demo_scenarios.SCENARIOS`` with the load generator, and stops
everything newest first (load, services, collector, serve last). Process
handling itself (``Child``, ``free_port``) is the shared toolkit in
``processes``; the command and its display are in ``demo``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from grpc_overhead.analyzer.errors import StoreLocked
from grpc_overhead.analyzer.store import check_free
from grpc_overhead.app.app_server import AppServerError, check_port
from grpc_overhead.cli import invocation
from grpc_overhead.cli.demo_scenarios import (
    CYCLE_S,
    LOAD_OVERHEAD_S,
    MIN_SCENARIO_S,
    SCENARIOS,
    SERVICES,
    Scenario,
)
from grpc_overhead.cli.serve import read_serve_info
from grpc_overhead.instrumentation import environment
from grpc_overhead.processes import Child, ComponentFailed, child_env, free_port

if TYPE_CHECKING:
    from grpc_overhead.cli.jaeger import Jaeger
    from grpc_overhead.collector.runner import CollectorProcess

SERVE_START_TIMEOUT_S = 120.0
SERVICE_START_TIMEOUT_S = 60.0


def no_collector_hint() -> str:
    """What to do when the collector cannot start, with the command as it runs from here."""
    return (
        f"or run the demo without the collector: `{invocation.command()} demo --no-collector` "
        "(the services then send spans straight to the intake)"
    )


class DemoError(RuntimeError):
    """Something the user can fix (port taken, store locked, no Go): one message, exit 2."""


@dataclass
class ScenarioResult:
    runs: int = 0
    calls: int = 0
    errors: int = 0


@dataclass
class Status:
    """What the progress display shows; written by the demo thread only."""

    components: dict[str, str] = field(default_factory=dict)
    app_url: str = ""
    scenario: str = ""
    results: dict[str, ScenarioResult] = field(default_factory=dict)
    started: float = 0.0
    message: str = ""

    @property
    def calls(self) -> int:
        return sum(result.calls for result in self.results.values())


class Demo:
    def __init__(self, args: argparse.Namespace, console: Console) -> None:
        self.args = args
        self.console = console
        self.store = os.path.abspath(args.store)
        self.logs = Path(args.logs or tempfile.mkdtemp(prefix="grpc-overhead-demo-"))
        self.stop_event = threading.Event()
        self.status = Status()
        self.children: list[Child] = []
        self.collector: CollectorProcess | None = None
        self.jaeger: Jaeger | None = None
        self.service_targets: dict[str, str] = {}
        self.load: Child | None = None
        self.intake_port = free_port()

    # -- checks before anything starts ----------------------------------------------------------

    def preflight(self) -> None:
        try:
            check_free(self.store)
        except StoreLocked as error:
            info = read_serve_info(self.store)
            known = info is not None and info.pid == error.holder_pid and info.app_url
            where = f" Its app: {info.app_url}." if known and info else ""
            raise DemoError(
                str(error).split("\n")[0]
                + where
                + " Stop it (Ctrl-C in its terminal) or pass another --store DIR."
            ) from None
        try:
            check_port("127.0.0.1", self.args.app_port)
        except AppServerError as error:
            raise DemoError(str(error)) from None
        try:
            self.logs.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise DemoError(
                f"cannot make --logs {self.logs}: {error.strerror}; pass a writable "
                "directory, or none (a temporary one)"
            ) from None

    def build_collector(self) -> None:
        from grpc_overhead.collector.runner import (
            CollectorUnavailable,
            build_collector,
            collector_binary,
        )

        if self.args.no_collector:
            if self.args.jaeger:
                raise DemoError("--jaeger needs the collector (it sends every span to Jaeger too)")
            return
        if self.args.jaeger:
            self.build_jaeger()
        binary = collector_binary()
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            self.console.print(
                "Building the OpenTelemetry Collector (first time: a few minutes; Go modules "
                "are downloaded and compiled)..."
            )
        try:
            build_collector(echo=not binary.is_file())
        except CollectorUnavailable as error:
            raise DemoError(f"{error}\n{no_collector_hint()}") from None

    def build_jaeger(self) -> None:
        from grpc_overhead.cli.jaeger import BINARY, JaegerError, build

        if not BINARY.is_file():
            self.console.print("Building Jaeger (first time: several minutes of compiling)...")
        try:
            build()
        except JaegerError as error:
            raise DemoError(str(error)) from None

    # -- starting ------------------------------------------------------------------------------

    def start_jaeger(self) -> None:
        """Jaeger on free OTLP ports (the collector's is 4317), its UI/API on 16686 if free."""
        if not self.args.jaeger:
            return
        from grpc_overhead.cli.jaeger import Jaeger, JaegerError, JaegerPorts

        query = 16686
        try:
            check_port("127.0.0.1", query)
        except AppServerError:
            query = free_port()
        ports = JaegerPorts(free_port(), free_port(), query, free_port())
        self.status.components["jaeger"] = "starting"
        try:
            self.jaeger = Jaeger(ports, log=self.logs / "jaeger.log").start()
        except JaegerError as error:
            raise ComponentFailed(f"jaeger: {error}") from None
        self.status.components["jaeger"] = f"{self.jaeger.url} (OTLP {self.jaeger.otlp_grpc})"

    def start_serve(self) -> None:
        serve = Child(
            "serve",
            [
                "serve",
                "--store",
                self.store,
                "--otlp-port",
                str(self.intake_port),
                "--app-port",
                str(self.args.app_port),
                *(["--jaeger-url", self.jaeger.url] if self.jaeger else []),
            ],
            child_env(),
            self.logs / "serve.log",
        ).start()
        self.children.append(serve)
        self.status.components["serve"] = "starting (opening the store, starting the app)"
        found = serve.wait_for(r"^app: (\S+)$", SERVE_START_TIMEOUT_S, self.stop_event)
        self.status.app_url = found.group(1)
        self.status.components["serve"] = f"intake 127.0.0.1:{self.intake_port}, store {self.store}"

    def start_collector(self) -> str:
        """Start the collector; returns the OTLP endpoint the services export to."""
        if self.args.no_collector:
            self.status.components["collector"] = "off (--no-collector): spans go to the intake"
            return f"http://127.0.0.1:{self.intake_port}"
        from grpc_overhead.collector.runner import CollectorError, CollectorProcess

        fanout = {environment.JAEGER_ENDPOINT: self.jaeger.otlp_grpc} if self.jaeger else {}
        collector = CollectorProcess(
            "embedded-jaeger" if self.jaeger else "embedded",
            otlp_port=free_port(),
            intake=f"127.0.0.1:{self.intake_port}",
            health_port=free_port(),
            env=fanout,
        )
        self.status.components["collector"] = "starting"
        try:
            collector.start()
        except CollectorError as error:
            raise ComponentFailed(f"collector: {error}") from None
        self.collector = collector
        self.status.components["collector"] = f"OTLP {collector.otlp_endpoint} -> intake" + (
            " and Jaeger (embedded-jaeger config)" if self.jaeger else " (embedded config)"
        )
        return f"http://{collector.otlp_endpoint}"

    def start_services(self, endpoint: str) -> None:
        for spec in SERVICES:
            env = child_env(
                OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
                OTEL_SERVICE_NAME="predictor",
                OTEL_RESOURCE_ATTRIBUTES=f"service.instance.id={spec.name}",
            )
            child = Child(
                spec.name,
                ["service", "--port", "0", "--instance-id", spec.name, *spec.args],
                env,
                self.logs / f"{spec.name}.log",
            ).start()
            self.children.append(child)
            self.status.components[spec.name] = f"starting ({spec.summary})"
        for spec, child in zip(SERVICES, self.children[-len(SERVICES) :], strict=True):
            found = child.wait_for(
                r"^listening on (\S+)$", SERVICE_START_TIMEOUT_S, self.stop_event
            )
            self.service_targets[spec.name] = found.group(1)
            self.status.components[spec.name] = f"{found.group(1)}: {spec.summary}"

    # -- load ----------------------------------------------------------------------------------

    def scenario_seconds(self) -> dict[str, float]:
        cycle = CYCLE_S
        if self.args.duration is not None:
            cycle = min(cycle, self.args.duration)
        total = sum(scenario.weight for scenario in SCENARIOS)
        # Each load process also starts and stops: keep the whole pass inside the cycle.
        cycle = max(cycle - LOAD_OVERHEAD_S * len(SCENARIOS), MIN_SCENARIO_S * len(SCENARIOS))
        return {s.name: max(MIN_SCENARIO_S, cycle * s.weight / total) for s in SCENARIOS}

    def play(self, endpoint: str) -> None:
        """Play the scenarios in a loop until the duration ends or a stop is asked."""
        seconds = self.scenario_seconds()
        self.status.started = time.monotonic()
        deadline = (
            self.status.started + self.args.duration if self.args.duration is not None else None
        )
        while not self.stop_event.is_set():
            for scenario in SCENARIOS:
                remaining = None if deadline is None else deadline - time.monotonic()
                if self.stop_event.is_set() or (remaining is not None and remaining < 1.0):
                    return
                length = seconds[scenario.name]
                if remaining is not None:
                    length = min(length, remaining)
                self.run_scenario(scenario, length, endpoint)
                self.check_alive()

    def run_scenario(self, scenario: Scenario, seconds: float, endpoint: str) -> None:
        targets = [self.service_targets[name] for name in scenario.targets or self.service_targets]
        run_id = scenario.run_id
        self.status.scenario = f"{scenario.name}: {scenario.summary}"
        load = Child(
            f"load {scenario.name}",
            [
                "load",
                "--target",
                ",".join(targets),
                "--duration",
                f"{seconds:.1f}",
                "--calls",
                "100000000",
                "--run-id",
                run_id,
                "--json",
                "--quiet",
                *scenario.args,
            ],
            child_env(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_SERVICE_NAME="loadgen"),
            self.logs / f"load-{scenario.name}.log",
        )
        # The JSON summary goes to its own file: the log gets stderr only.
        summary_path = self.logs / f"load-{scenario.name}.json"
        with open(summary_path, "wb") as summary, open(load.log, "ab") as log:
            load.process = subprocess.Popen(
                load.command,
                stdin=subprocess.DEVNULL,
                stdout=summary,
                stderr=log,
                env=load.env,
                start_new_session=True,
            )
        self.load = load
        try:
            while load.running:
                if self.stop_event.wait(0.2):
                    # SIGTERM: the load generator finishes its calls and flushes its spans
                    # (SIGINT would be ignored when the demo runs as a background job).
                    load.stop(signal.SIGTERM)
                    break
        finally:
            self.load = None
        result = self.status.results.setdefault(scenario.name, ScenarioResult())
        result.runs += 1
        try:
            body = json.loads(summary_path.read_text())
        except (OSError, ValueError):
            if not self.stop_event.is_set():
                self.status.message = f"load {scenario.name} failed: {load.tail(3)}"
            return
        result.calls += int(body.get("calls", 0))
        result.errors += int(body.get("errors", 0))

    def check_alive(self) -> None:
        for child in self.children:
            if not child.running:
                raise ComponentFailed(
                    f"{child.name} exited with code {child.returncode()}:\n{child.tail()}"
                )
        collector = self.collector
        if collector is not None and collector.returncode is not None:
            raise ComponentFailed(f"collector exited:\n{collector.logs()[-2000:]}")
        jaeger = self.jaeger
        if jaeger is not None and jaeger.process is not None and jaeger.process.poll() is not None:
            raise ComponentFailed(f"jaeger exited:\n{jaeger.tail()}")

    # -- stopping ------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop everything, newest first: no span is lost on the way to the store."""
        if self.load is not None:
            self.load.stop(signal.SIGTERM)
        for child in reversed(self.children):
            if child.name == "serve":
                continue
            self.status.components[child.name] = "stopping"
            child.stop()
            self.status.components[child.name] = "stopped"
        if self.collector is not None:
            self.status.components["collector"] = "stopping (flushing to the intake)"
            self.collector.stop()
            self.status.components["collector"] = "stopped"
        for child in self.children:
            if child.name == "serve":
                self.status.components["serve"] = "stopping (flushing, closing the store)"
                child.stop()
                self.status.components["serve"] = "stopped"
        if self.jaeger is not None:
            self.jaeger.stop()
            self.status.components["jaeger"] = "stopped (its traces were in memory)"
