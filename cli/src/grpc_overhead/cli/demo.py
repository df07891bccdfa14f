"""``grpc-overhead demo``: the whole stack on the embedded store, with load that shows every phase.

    grpc-overhead demo [--store DIR] [--duration S] [--no-browser] [--app-port 8501]
                       [--no-collector] [--logs DIR] [--jaeger]

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

``--jaeger`` also builds (once) and runs Jaeger v2 with in-memory storage,
started first: the collector then uses the ``embedded-jaeger`` config (every
span to the intake and to Jaeger), and the app's call explorer links each call
to its trace there (Jaeger's query API and UI routes on 16686, or a free port).
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
import time
from collections.abc import Sequence

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from grpc_overhead.analyzer.store import DEFAULT_STORE_DIR
from grpc_overhead.app.app_server import DEFAULT_PORT, open_browser
from grpc_overhead.cli import invocation
from grpc_overhead.cli.demo_scenarios import SCENARIOS, SERVICES
from grpc_overhead.cli.demo_stack import Demo, DemoError
from grpc_overhead.cli.ports import port_number
from grpc_overhead.processes import ComponentFailed

__all__ = ["SCENARIOS", "SERVICES", "main", "parser"]

EXIT_USAGE = 2
EXIT_FAILED = 1


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
        type=port_number,
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
        "--jaeger",
        action="store_true",
        help="also run Jaeger (built on first use) and fan every span out to it",
    )
    result.add_argument(
        "--logs",
        metavar="DIR",
        help="where each process's output goes (default: a new temporary directory)",
    )
    return result


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
            demo.start_jaeger()
            if demo.jaeger is not None:
                say(f"jaeger: {demo.jaeger.url}")
            demo.start_serve()
            say(f"app: {demo.status.app_url}")
            if not args.no_browser:
                open_browser(demo.status.app_url)
            endpoint = demo.start_collector()
            say(f"collector: {demo.status.components['collector']}")
            demo.start_services(endpoint)
            for spec in SERVICES:
                say(f"{spec.name}: {demo.status.components[spec.name]}")
            say(
                f"load: playing {len(SCENARIOS)} scenarios"
                + (f" for {args.duration:g} s" if args.duration is not None else " until Ctrl-C")
            )
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
    program, store = invocation.command(), shlex.quote(args.store)
    console.print(
        f"Stopped. {demo.status.calls:,} calls sent; the data is in {demo.store}:\n"
        f"  {program} report --store {store}\n"
        f"  {program} app --store {store}\n"
        f'  {program} sql --store {store} "SELECT count() FROM otel_traces"',
        highlight=False,
        markup=False,
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
