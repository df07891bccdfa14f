"""``grpc-overhead demo``: the whole stack on the embedded store, with load that shows every phase.

    grpc-overhead demo [--store DIR] [--duration S] [--no-browser] [--app-port 8501]
                       [--no-collector] [--logs DIR]

Starts, in this order, each as a child process in its own session (so Ctrl-C
reaches only the demo, which then stops them in the order that loses no span):

1. ``grpc-overhead serve`` on ``--store DIR``: intake + chDB store + app (one
   process, since a chDB directory belongs to one process);
2. the OpenTelemetry Collector with the embedded config, exporting to that
   intake (built first when missing; ``--no-collector`` sends spans straight
   to the intake, for machines without Go);
3. two prediction-service instances with different settings: ``predictor-a``
   has 2 workers, a 2 ms model and a 20 s max connection age (queues under a
   burst, reconnects), ``predictor-b`` is a ``grpc.aio`` server with 8 workers;
4. the load generator, playing ``SCENARIOS`` in a loop: small and large
   payloads, the compression algorithms side by side, a burst that saturates
   predictor-a's thread pool, streaming and batched calls. Each scenario is a
   run id (``demo-<name>``), so the app's Run filter selects it; the five
   compression scenarios share ``demo-compression``, the same calls with each
   algorithm, so that run compares the algorithms like for like.

Stops on Ctrl-C, SIGTERM or after ``--duration`` seconds of load: load first,
then the services (they flush their spans), the collector (flushes its queue),
serve last (flushes the intake, closes the store). The data stays in DIR for
``report``, ``sql`` and ``app``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from grpc_overhead.analyzer.store import DEFAULT_STORE_DIR
from grpc_overhead.analyzer.store.embedded import lock_holder, locked_message
from grpc_overhead.app.server import DEFAULT_PORT, AppServerError, check_port, open_browser
from grpc_overhead.cli.serve import read_serve_info
from grpc_overhead.prediction.process import stop_process

if TYPE_CHECKING:
    from grpc_overhead.collector.runner import CollectorProcess

EXIT_USAGE = 2
EXIT_FAILED = 1
SERVE_START_TIMEOUT_S = 120.0
SERVICE_START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
#: One pass over every scenario lasts this long (shorter when --duration is shorter).
CYCLE_S = 120.0
#: A scenario shorter than this is mostly process start-up.
MIN_SCENARIO_S = 3.0
#: What starting and stopping one load generator process costs (imports, connecting).
LOAD_OVERHEAD_S = 1.5

NO_COLLECTOR_HINT = (
    "or run the demo without the collector: `grpc-overhead demo --no-collector` "
    "(the services then send spans straight to the intake)"
)


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    args: tuple[str, ...]
    summary: str


SERVICES: tuple[ServiceSpec, ...] = (
    ServiceSpec(
        "predictor-a",
        ("--workers", "2", "--model-cost-ms", "2", "--max-connection-age-s", "20"),
        "2 workers, 2 ms model, connections recycled every 20 s",
    ),
    ServiceSpec("predictor-b", ("--aio", "--workers", "8"), "grpc.aio, 8 model workers"),
)


@dataclass(frozen=True)
class Scenario:
    """One ``grpc-overhead load`` run; ``weight`` is its share of a cycle."""

    name: str
    summary: str
    args: tuple[str, ...]
    weight: float = 1.0
    #: Service names to target (round-robin); empty: all of them.
    targets: tuple[str, ...] = ()
    #: The run id's suffix when it is not the name: scenarios meant to be compared share one.
    run: str = ""

    @property
    def run_id(self) -> str:
        return f"demo-{self.run or self.name}"


_TINY = ("--entities", "50", "--features", "16")
_MID = ("--entities", "300", "--features", "32", "--encoding", "packed", "--rps", "15")
SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "small",
        "small unary calls (20 x 16 features), 60/s",
        ("--entities", "20", "--features", "16", "--rps", "60"),
        weight=2,
    ),
    Scenario(
        "large",
        "large payloads (1,000 x 64 features, ~250 KB), 4/s",
        ("--entities", "1000", "--features", "64", "--rps", "4", "--concurrency", "8"),
        weight=2,
    ),
    Scenario(
        "burst",
        "burst: 16 concurrent callers on predictor-a's 2 workers (queuing)",
        (*_TINY, "--concurrency", "16"),
        targets=("predictor-a",),
    ),
    Scenario(
        "stream",
        "bidirectional streams of 10 messages, 6/s",
        ("--mode", "stream", "--stream-messages", "10", *_TINY, "--rps", "6"),
    ),
    Scenario(
        "batch",
        "batched calls (8 requests per message), 8/s",
        ("--mode", "batch", "--batch-size", "8", *_TINY, "--rps", "8"),
    ),
    *(
        Scenario(
            f"compression-{codec}",
            f"38 KB requests compressed with {codec}, 15/s",
            (*_MID, "--compression", codec),
            run="compression",
        )
        for codec in ("none", "gzip", "zstd", "lz4", "snappy")
    ),
)


class DemoError(RuntimeError):
    """Something the user can fix (port taken, store locked, no Go): one message, exit 2."""


class ComponentFailed(RuntimeError):
    """A process of the stack died or never became ready: exit 1, with its log."""


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(
        prog="grpc-overhead demo",
        description="The whole stack on the embedded store: serve (intake + store + app), the "
        "collector, two prediction services and a load mix that shows every phase.",
    )
    result.add_argument(
        "--store",
        metavar="DIR",
        default=DEFAULT_STORE_DIR,
        help=f"chDB store the data stays in (default {DEFAULT_STORE_DIR})",
    )
    result.add_argument(
        "--duration",
        type=float,
        metavar="S",
        help="stop after S seconds of load (default: run until Ctrl-C)",
    )
    result.add_argument("--no-browser", action="store_true", help="do not open a browser")
    result.add_argument(
        "--app-port",
        type=int,
        default=DEFAULT_PORT,
        metavar="N",
        help=f"port of the web app (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    result.add_argument(
        "--no-collector",
        action="store_true",
        help="send spans straight to the intake (no Go needed)",
    )
    result.add_argument(
        "--logs",
        metavar="DIR",
        help="where each process's output goes (default: a new temporary directory)",
    )
    return result


# -- child processes ------------------------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_env(**overrides: str) -> dict[str, str]:
    """This environment without the user's OTEL_* settings (they would send spans elsewhere)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(overrides)
    return env


class Child:
    """A ``grpc-overhead`` sub-command in its own session, its output in ``log``."""

    def __init__(self, name: str, args: Sequence[str], env: Mapping[str, str], log: Path) -> None:
        self.name = name
        self.command = [sys.executable, "-m", "grpc_overhead", *args]
        self.env = dict(env)
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Child:
        with open(self.log, "ab") as output:
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=self.env,
                # Ctrl-C reaches the demo only; it stops the children in order.
                start_new_session=True,
            )
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.output().strip().splitlines()[-lines:])

    def wait_for(self, pattern: str, timeout_s: float, stop: threading.Event) -> re.Match[str]:
        """Wait until the output matches ``pattern`` (the process's "ready" line)."""
        regex = re.compile(pattern, re.MULTILINE)
        deadline = time.monotonic() + timeout_s
        while True:
            found = regex.search(self.output())
            if found:
                return found
            if not self.running:
                raise ComponentFailed(
                    f"{self.name} exited with code {self.returncode()} while starting:\n"
                    f"{self.tail()}"
                )
            if stop.is_set():
                raise KeyboardInterrupt
            if time.monotonic() > deadline:
                raise ComponentFailed(
                    f"{self.name} not ready after {timeout_s:g} s (log {self.log}):\n{self.tail()}"
                )
            time.sleep(0.1)

    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """``sig``, then SIGKILL after ``timeout_s``; returns the exit code."""
        if self.process is None:
            return None
        return stop_process(self.process, timeout_s, sig)


# -- the demo -------------------------------------------------------------------------------------


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
        self.service_targets: dict[str, str] = {}
        self.load: Child | None = None
        self.intake_port = free_port()

    # -- checks before anything starts ----------------------------------------------------------

    def preflight(self) -> None:
        holder = lock_holder(self.store)
        if holder is not None:
            pid, started = holder
            info = read_serve_info(self.store)
            known = info is not None and info.pid == pid and info.app_url
            where = f" Its app: {info.app_url}." if known and info else ""
            raise DemoError(
                locked_message(self.store, pid, started, "").split("\n")[0]
                + where
                + " Stop it (Ctrl-C in its terminal) or pass another --store DIR."
            )
        try:
            check_port("127.0.0.1", self.args.app_port)
        except AppServerError as error:
            raise DemoError(str(error)) from None
        self.logs.mkdir(parents=True, exist_ok=True)

    def build_collector(self) -> None:
        from grpc_overhead.collector.runner import (
            CollectorUnavailable,
            build_collector,
            collector_binary,
        )

        if self.args.no_collector:
            return
        binary = collector_binary()
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            self.console.print(
                "Building the OpenTelemetry Collector (first time: a few minutes; Go modules "
                "are downloaded and compiled)..."
            )
        try:
            build_collector(echo=not binary.is_file())
        except CollectorUnavailable as error:
            raise DemoError(f"{error}\n{NO_COLLECTOR_HINT}") from None

    # -- starting ------------------------------------------------------------------------------

    def start_serve(self) -> None:
        serve = Child(
            "serve",
            ["serve", "--store", self.store, "--otlp-port", str(self.intake_port),
             "--app-port", str(self.args.app_port)],
            child_env(),
            self.logs / "serve.log",
        ).start()  # fmt: skip
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

        collector = CollectorProcess(
            "embedded",
            otlp_port=free_port(),
            intake=f"127.0.0.1:{self.intake_port}",
            health_port=free_port(),
        )
        self.status.components["collector"] = "starting"
        try:
            collector.start()
        except CollectorError as error:
            raise ComponentFailed(f"collector: {error}") from None
        self.collector = collector
        self.status.components["collector"] = (
            f"OTLP {collector.otlp_endpoint} -> intake (embedded config)"
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
            ["load", "--target", ",".join(targets), "--duration", f"{seconds:.1f}",
             "--calls", "100000000", "--run-id", run_id, "--json", "--quiet", *scenario.args],
            child_env(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_SERVICE_NAME="loadgen"),
            self.logs / f"load-{scenario.name}.log",
        )  # fmt: skip
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
                    # SIGINT: the load generator finishes its calls and flushes its spans.
                    load.stop(signal.SIGINT)
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

    # -- stopping ------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop everything, newest first: no span is lost on the way to the store."""
        if self.load is not None:
            self.load.stop(signal.SIGINT)
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


# -- display --------------------------------------------------------------------------------------


def render(demo: Demo, progress: Progress) -> Group:
    status = demo.status
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    if status.app_url:
        table.add_row("app", f"[link={status.app_url}]{status.app_url}[/link]")
    for name, state in status.components.items():
        table.add_row(name, Text(state))
    table.add_row("store", demo.store)
    table.add_row("logs", str(demo.logs))
    parts: list[object] = [table]
    if status.started:
        parts.append(progress)
        parts.append(Text(f"now: {status.scenario}"))
        parts.append(
            f"calls: {status.calls:,} in {sum(r.runs for r in status.results.values())} "
            f"load runs ({sum(r.errors for r in status.results.values()):,} errors)"
        )
    if status.message:
        parts.append(Text(status.message, style="yellow"))
    parts.append("[dim]Ctrl-C stops every process; the data stays in the store.[/dim]")
    return Group(*parts)


def _progress(duration: float | None) -> tuple[Progress, int]:
    columns = [TextColumn("load"), BarColumn(), TimeElapsedColumn()]
    if duration is not None:
        columns.insert(2, TextColumn(f"of {duration:g} s"))
    progress = Progress(*columns)
    task = progress.add_task("load", total=duration)
    return progress, task


def run(args: argparse.Namespace, console: Console) -> int:
    demo = Demo(args, console)
    demo.preflight()
    demo.build_collector()

    def on_signal(signum: int, frame: object) -> None:
        demo.stop_event.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    progress, task = _progress(args.duration)
    live = Live(render(demo, progress), console=console, refresh_per_second=2, transient=False)
    interactive = console.is_terminal
    ticker_stop = threading.Event()

    def tick() -> None:
        while not ticker_stop.wait(0.5):
            if demo.status.started:
                progress.update(task, completed=time.monotonic() - demo.status.started)
            if interactive:
                live.update(render(demo, progress))

    ticker = threading.Thread(target=tick, name="demo-progress", daemon=True)
    failure: str | None = None
    try:
        if interactive:
            live.start()
        ticker.start()

        def say(text: str) -> None:
            if not interactive:  # a terminal shows the live table instead
                console.print(text, markup=False)

        say(f"logs: {demo.logs}")
        try:
            demo.start_serve()
            say(f"app: {demo.status.app_url}")
            if not args.no_browser:
                open_browser(demo.status.app_url)
            endpoint = demo.start_collector()
            say(f"collector: {demo.status.components['collector']}")
            demo.start_services(endpoint)
            for spec in SERVICES:
                say(f"{spec.name}: {demo.status.components[spec.name]}")
            say(f"load: playing {len(SCENARIOS)} scenarios" + (
                f" for {args.duration:g} s" if args.duration is not None else " until Ctrl-C"
            ))  # fmt: skip
            demo.play(endpoint)
        except KeyboardInterrupt:
            pass
        except ComponentFailed as error:
            failure = str(error)
        finally:
            say("stopping: load, services, collector, serve...")
            demo.shutdown()
    finally:
        ticker_stop.set()
        if interactive:
            live.update(render(demo, progress))
            live.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    for name, result in demo.status.results.items():
        console.print(f"  {name}: {result.calls:,} calls ({result.errors:,} errors)")
    if failure:
        console.print(Text(f"grpc-overhead demo: {failure}", style="red"))
        console.print(f"Logs of every process: {demo.logs}", markup=False)
        return EXIT_FAILED
    console.print(
        f"Stopped. {demo.status.calls:,} calls sent; the data is in {demo.store}:\n"
        f"  grpc-overhead report --store {args.store}\n"
        f"  grpc-overhead app --store {args.store}\n"
        f'  grpc-overhead sql --store {args.store} "SELECT count() FROM otel_traces"',
        highlight=False,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    console = Console(highlight=False, soft_wrap=not sys.stdout.isatty())
    if args.duration is not None and args.duration <= 0:
        console.print("grpc-overhead demo: --duration must be a positive number of seconds")
        return EXIT_USAGE
    try:
        return run(args, console)
    except DemoError as error:
        errors = Console(stderr=True, highlight=False, soft_wrap=True)
        errors.print(f"grpc-overhead demo: {error}", markup=False)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
