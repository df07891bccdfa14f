"""The fault-injection suite: load with faults, then three invariants.

Shared test support: ``bench/reliability.py`` runs it at full scale (``make
bench``), ``tests/reliability`` reduced (``make test``):

    python -m bench.run reliability            # full scale, results in bench/results/
    python -m bench.run reliability -- --quick # the reduced run ``make test`` makes

Three phases, each on its own store:

* **flood** (in this process): senders flood a real intake on chDB with a small
  buffer (so it refuses), some with deadlines far shorter than the intake's
  wait, some mixing poison spans and undecodable requests into their load,
  while another thread keeps trying ``KILL QUERY`` through the SQL console.
* **crash** (real processes): ``serve`` and ``collector run`` under load from
  senders to both; ``serve`` and the collector are each killed with SIGKILL
  and restarted.
* **unauthenticated** (in this process, ``fault_unauthenticated``): an intake asking for
  tokens, flooded over gRPC and HTTP by senders with no token, a wrong one or a bad
  basic-auth pair, while senders with the token send beside them: nothing of the flood
  stored, the authenticated senders' every request acknowledged and stored once.

Then, per phase and path: acknowledged ⊆ stored, refused ∩ stored = ∅, poison
∩ stored = ∅, no span stored twice, and ``report``/``sql`` read the store.
The collector keeps what it acknowledged in its on-disk sending queue
(file_storage), so one killed with SIGKILL resends it after its restart: lost
spans count on both paths alike.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from grpc_overhead.collector.runner import ENV_STORAGE
from grpc_overhead.processes import free_port
from harness.fault_load import (
    Ledger,
    Scale,
    SenderPlan,
    invariants,
    run_senders,
    stored_counts,
)
from harness.fault_unauthenticated import unauthenticated

GRPC_OVERHEAD = str(Path(sys.executable).parent / "grpc-overhead")


#: How long the crash phase waits for the collector's backlog to reach the store.
DRAIN_LIMIT_S = 180.0

QUICK = Scale(senders=6, requests=30, spans=40, crash_seconds=12.0, kills=1)
FULL = Scale(senders=12, requests=300, spans=200, crash_seconds=90.0, kills=3)


def reports_readable(directory: str) -> bool:
    """``report --format json`` and ``sql`` both answer on the store (exit 0, valid JSON)."""
    report = subprocess.run(
        [GRPC_OVERHEAD, "report", "--store", directory, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    sql = subprocess.run(
        [
            GRPC_OVERHEAD,
            "sql",
            "--store",
            directory,
            "--format",
            "json",
            "SELECT * FROM otel_traces LIMIT 100",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if report.returncode or sql.returncode:
        return False
    json.loads(report.stdout)
    json.loads(sql.stdout)
    return True


# -- flood: in-process intake, short deadlines, poison, KILL attempts ------------------------


def flood(scale: Scale, directory: str) -> dict[str, Any]:
    from grpc_overhead.analyzer.calls import create_calls
    from grpc_overhead.analyzer.errors import BadInput
    from grpc_overhead.analyzer.insights import sql_console
    from grpc_overhead.analyzer.intake import Intake, IntakeConfig
    from grpc_overhead.analyzer.options import CallsOptions
    from grpc_overhead.analyzer.store import open_store

    ledger, over_http, stop = Ledger(), Ledger(), threading.Event()
    kill_attempts = {"tried": 0, "refused": 0}
    store = open_store(directory)
    # A small buffer and short deadlines, so refusals and withdrawals really happen.
    config = IntakeConfig(port=0, batch_bytes=32 << 10, max_pending_bytes=64 << 10, http_port=0)
    intake = Intake(store, config)
    intake.start()
    create_calls(store, CallsOptions.from_schema(intake.schema))
    target = f"127.0.0.1:{intake.port}"

    def attempt_kills() -> None:
        while not stop.wait(0.05):
            kill_attempts["tried"] += 1
            try:
                sql_console.run(store, "KILL QUERY WHERE 1")
            except BadInput:
                kill_attempts["refused"] += 1

    plans = [
        (
            SenderPlan(
                sender,
                target,
                scale.requests,
                scale.spans,
                deadline_s=(0.08, 0.2)[sender % 2] if sender % 3 == 1 else 10.0,
                attempts=3 if sender % 3 == 1 else 6,
                poison_every=4 if sender % 3 == 2 else 0,
                garbage_every=7 if sender % 3 == 2 else 0,
            ),
            ledger,
        )
        for sender in range(1, scale.senders + 1)
    ]
    # The same plans over OTLP/HTTP (gzip'd protobuf and JSON), at the same time.
    plans += [
        (
            replace(
                plan,
                sender=plan.sender + 50,
                target=intake.http_url,
                transport=("http", "http-json")[plan.sender % 2],
            ),
            over_http,
        )
        for plan, _ in plans
    ]
    # Requests beyond the whole buffer: always 429 (BufferFull), retried, then refused.
    plans.append(
        (SenderPlan(99, intake.http_url, 3, 1000, attempts=2, transport="http"), over_http)
    )
    started = time.monotonic()
    killer = threading.Thread(target=attempt_kills, daemon=True)
    killer.start()
    for thread in run_senders(plans, stop):
        thread.join()
    elapsed = time.monotonic() - started
    stop.set()
    killer.join()
    intake.stop()
    stats = intake.stats()
    store.close()
    stored = stored_counts(directory)
    return {
        "seconds": round(elapsed, 1),
        "acknowledged_spans_per_s": round(len(ledger.acknowledged) / elapsed),
        "requests": dict(ledger.requests),
        "attempts": dict(ledger.attempts),
        "kill_attempts": kill_attempts,
        "intake_spans_stored_counter": stats.spans_inserted,
        "stored_rows": sum(stored.values()),
        "invariants": invariants(ledger, stored),
        "http": {
            "requests": dict(over_http.requests),
            "attempts": dict(over_http.attempts),
            **invariants(over_http, stored),
        },
        "reports_readable": reports_readable(directory),
    }


# -- crash: serve and the collector as processes, killed and restarted -----------------------


class _Process:
    """A command started in its own session, its output read by a thread."""

    def __init__(self, argv: list[str], ready: str, env: dict[str, str] | None = None) -> None:
        self.argv, self.ready, self.env = argv, re.compile(ready), {**os.environ, **(env or {})}
        self.process: subprocess.Popen[str] | None = None
        self.match: re.Match[str] | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        self.process = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env=self.env,
        )
        lines: queue.Queue[str] = queue.Queue()
        stream = self.process.stdout
        threading.Thread(target=lambda: [*map(lines.put, stream)], daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                self.match = self.ready.search(lines.get(timeout=0.5))
            except queue.Empty:
                if self.process.poll() is not None:
                    break
                continue
            if self.match:
                return
        raise RuntimeError(f"{self.argv[1]} did not start")

    def stop(self, signum: int = signal.SIGTERM, timeout_s: float = 60.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signum)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def crash(scale: Scale, directory: str) -> dict[str, Any]:
    intake_port, otlp_port, health_port = free_port(), free_port(), free_port()
    intake_http, collector_http = free_port(), free_port()
    serve = _Process(
        [
            GRPC_OVERHEAD,
            "serve",
            "--store",
            directory,
            "--otlp-port",
            str(intake_port),
            "--otlp-http-port",
            str(intake_http),
            "--no-app",
        ],
        r"intake listening on",
    )
    collector = _Process(
        [
            GRPC_OVERHEAD,
            "collector",
            "run",
            "--otlp-port",
            str(otlp_port),
            "--otlp-http-port",
            str(collector_http),
            "--intake",
            f"127.0.0.1:{intake_port}",
            "--health-port",
            str(health_port),
        ],
        r"collector ready \(config .*, pid (\d+)\)",
        {ENV_STORAGE: str(Path(directory).with_name("collector-queue"))},
    )
    serve.start()
    collector.start()
    direct, through, stop = Ledger(), Ledger(), threading.Event()
    direct_http, through_http = Ledger(), Ledger()
    endless = 1 << 30  # bounded by ``stop``
    plans = [
        (
            SenderPlan(
                sender,
                f"127.0.0.1:{intake_port}" if sender % 2 else f"127.0.0.1:{otlp_port}",
                endless,
                scale.spans // 4 or 1,
                poison_every=5,
                pause_s=0.02,
            ),
            direct if sender % 2 else through,
        )
        for sender in range(100, 100 + scale.senders)
    ]
    plans += [
        (
            SenderPlan(
                sender,
                f"http://127.0.0.1:{intake_http if sender % 2 else collector_http}/v1/traces",
                endless,
                scale.spans // 4 or 1,
                poison_every=5,
                pause_s=0.02,
                transport=("http", "http-json")[(sender // 2) % 2],
            ),
            direct_http if sender % 2 else through_http,
        )
        for sender in range(200, 200 + scale.senders)
    ]
    threads = run_senders(plans, stop)
    faults = {"serve_killed": 0, "collector_killed": 0}
    step = scale.crash_seconds / (2 * scale.kills + 1)
    for _ in range(scale.kills):
        time.sleep(step)
        serve.stop(signal.SIGKILL)
        faults["serve_killed"] += 1
        time.sleep(1.0)
        serve.start()
        time.sleep(step)
        assert collector.match is not None
        subprocess.run(["kill", "-9", collector.match.group(1)], check=False)
        collector.stop(signal.SIGKILL)  # the wrapper ends with its collector
        faults["collector_killed"] += 1
        collector.start()
    time.sleep(step)
    stop.set()
    for thread in threads:
        thread.join(120)
    drained_s = _wait_for_drain(through, directory)
    drained_http_s = _wait_for_drain(through_http, directory)
    collector.stop()  # SIGTERM: what it still holds stays in its on-disk queue
    serve.stop()
    stored = stored_counts(directory)
    through_figures = invariants(through, stored)
    return {
        "seconds": scale.crash_seconds,
        "faults": faults,
        "direct": {"requests": dict(direct.requests), **invariants(direct, stored)},
        "through_collector": {"requests": dict(through.requests), **through_figures},
        "direct_http": {"requests": dict(direct_http.requests), **invariants(direct_http, stored)},
        "through_collector_http": {
            "requests": dict(through_http.requests),
            **invariants(through_http, stored),
        },
        "collector_drained_s": drained_s,
        "collector_drained_http_s": drained_http_s,
        "reports_readable": reports_readable(directory),
    }


def _wait_for_drain(through: Ledger, directory: str) -> float | None:
    """Seconds until every span the collector acknowledged is in the store (None: not
    within ``DRAIN_LIMIT_S``). The collector answers its senders before it forwards, so
    after a kill its on-disk queue still holds a backlog the intake works through; the
    count is read through the running serve (``sql``), which owns the store."""
    started = time.monotonic()
    wanted, unknown = len(through.acknowledged), len(through.unknown)
    last = -1
    while time.monotonic() - started < DRAIN_LIMIT_S:
        found = subprocess.run(
            [GRPC_OVERHEAD, "sql", "--store", directory, "--format", "json", THROUGH_COUNT],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        count = _count(found.stdout) if found.returncode == 0 else -1
        # Spans the senders never heard about may arrive too: done once every
        # acknowledged one could be there and nothing more is coming.
        if count >= wanted + unknown or (count >= wanted and count == last):
            return round(time.monotonic() - started, 1)
        last = count
        time.sleep(2.0)
    return None


#: Spans of the crash phase's senders through the collector (even sender numbers).
THROUGH_COUNT = (
    "SELECT count() AS n FROM otel_traces WHERE startsWith(ServiceName, 'fault-sender-') "
    "AND toUInt32OrZero(substring(ServiceName, 14)) % 2 = 0"
)


def _count(output: str) -> int:
    rows = json.loads(output)  # sql --format json: a list of row objects
    return int(rows[0]["n"]) if rows else 0


def run_suite(scale: Scale, workdir: str) -> dict[str, Any]:
    return {
        "flood": flood(scale, str(Path(workdir) / "flood")),
        "crash": crash(scale, str(Path(workdir) / "crash")),
        "unauthenticated": unauthenticated(scale, str(Path(workdir) / "unauthenticated")),
    }
