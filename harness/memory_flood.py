"""A flood against a real ``serve``: paced senders, its memory sampled, every answer checked.

Shared test support: ``bench/memory.py`` runs it in full (``make bench``: the
figures docs/reliability.md publishes), ``tests/reliability/test_memory_flood.py``
reduced. What a team sees when a few busy services send more than one ``serve``
can store: ``serve`` (embedded store, the calls view, the settle loop: what users
run, no app) is offered collector-sized requests (8192 spans, the collector's
batch) from separate sender processes at a fixed rate: ``idle`` (nothing),
``1x`` (the intake's target, 150,000 spans/s), ``2x`` (300,000 spans/s), then
``drain`` (nothing, while what was accepted is stored). The intake stores what
it can and refuses the rest; the question is whether its memory stays within
the documented bound, and whether its answers stay true:

* every span of an acknowledged request is stored, once (``lost``, ``duplicates``);
* no span of a refused request is stored (``refused_but_stored``);
* every refusal is UNAVAILABLE with the intake's own reason (retryable: the
  collector and the SDKs resend);
* refused requests resent with the same bytes once the flood is over are
  acknowledged and stored (``resent``): a refusal really meant "later".

Serve's resident memory (its process and any children, ``/proc``) is sampled
every 0.2 s; per phase: the peak and the median. Senders are paced: request k
is due at ``k / requests_per_second`` after the phase starts, at most
``threads`` requests in flight per process (a collector's sending queue has 10
consumers; a few collectors send to one serve); a sender behind schedule sends
at once and stops when the phase ends, so the rate actually sent is reported.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

from harness.flood_senders import PHASE_SHIFT, SPANS_PER_REQUEST, TARGET_SPANS_PER_SECOND

SAMPLE_EVERY_S = 0.2
#: Engine and decoding memory per byte of an export worker's batch of encoded OTLP, at its
#: peak, rounded up: what is left of the peak once the other terms are taken away was 9.5 to
#: 13.5 bytes per batch byte in three flood runs (2026-11-28; bench/results/memory.md).
STORE_BYTES_PER_BATCH_BYTE = 16


@dataclass(frozen=True)
class Scale:
    seconds: float  # each load phase
    idle_seconds: float
    drain_seconds: float
    processes: int  # sender processes
    threads: int  # requests in flight per process at most
    resend: int  # refused requests resent after the flood


FULL = Scale(
    seconds=60.0, idle_seconds=10.0, drain_seconds=30.0, processes=2, threads=32, resend=20
)
QUICK = Scale(seconds=8.0, idle_seconds=3.0, drain_seconds=10.0, processes=2, threads=24, resend=4)
LOAD_PHASES = (("1x", 1), ("2x", 2))


# -- the measuring process ----------------------------------------------------------------------


class Sampler:
    """Serve's resident memory (its process and descendants), every ``SAMPLE_EVERY_S``."""

    def __init__(self, pid: int) -> None:
        self.pid, self.phase = pid, "start"
        self.samples: list[tuple[float, str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.wait(SAMPLE_EVERY_S):
            rss = tree_rss_bytes(self.pid)
            if rss:
                self.samples.append((time.monotonic() - started, self.phase, rss))

    def by_phase(self) -> dict[str, dict[str, float]]:
        phases: dict[str, list[int]] = {}
        for _, phase, rss in self.samples:
            phases.setdefault(phase, []).append(rss)
        return {
            phase: {
                "peak_mib": round(max(values) / 2**20, 1),
                "median_mib": round(median(values) / 2**20, 1),
            }
            for phase, values in phases.items()
        }


def tree_rss_bytes(pid: int) -> int:
    """Resident bytes of ``pid`` and every process below it (0 once it is gone)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            with open(f"/proc/{current}/statm", encoding="ascii") as statm:
                total += int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
        todo.extend(children.get(current, ()))
    return total


def start_serve(directory: str) -> tuple[subprocess.Popen[str], int]:
    """``grpc-overhead serve`` on a fresh store, intake only: (process, intake port)."""
    from grpc_overhead.processes import free_port

    port = free_port()
    command = [
        str(Path(sys.executable).parent / "grpc-overhead"),
        "serve",
        "--store",
        directory,
        "--otlp-port",
        str(port),
        "--standard-otlp-port",
        "off",
        "--otlp-http-port",
        "off",
        "--no-app",
        "--no-http",
    ]
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 120
    for line in process.stdout:
        lines.append(line)
        if "intake listening on" in line:
            threading.Thread(target=lambda: [*process.stdout], daemon=True).start()  # type: ignore[misc]
            return process, port
        if time.monotonic() > deadline:
            break
    process.kill()
    raise RuntimeError("serve did not start:\n" + "".join(lines[-20:]))


def run_senders(port: int, scale: Scale, rate: float, base: int) -> list[dict[str, Any]]:
    """One paced phase from ``scale.processes`` sender processes; their reports."""
    senders = [
        subprocess.Popen(
            [
                *(sys.executable, "-m", "harness.flood_senders", "--send-to", str(port)),
                *("--process", str(process), "--processes", str(scale.processes)),
                *("--rate", str(rate), "--seconds", str(scale.seconds)),
                *("--threads", str(scale.threads), "--base", str(base)),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parent.parent,
        )
        for process in range(scale.processes)
    ]
    for sender in senders:
        assert sender.stdout is not None
        if sender.stdout.readline().strip() != "ready":
            raise RuntimeError("a sender failed before sending")
    for sender in senders:
        assert sender.stdin is not None
        sender.stdin.write("go\n")
        sender.stdin.flush()
    reports = []
    for sender in senders:
        output, _ = sender.communicate(timeout=scale.seconds + 120)
        if sender.returncode != 0:
            raise RuntimeError(f"a sender exited with {sender.returncode}")
        reports.append(json.loads(output.strip().splitlines()[-1]))
    return reports


def stored_per_request(directory: str) -> Counter[int]:
    """Spans stored per request index (a trace id's first four bytes)."""
    from grpc_overhead.analyzer.store import open_store

    with open_store(directory) as store:
        frame = store.query(
            "SELECT substring(TraceId, 1, 8) AS request, count() AS spans "
            "FROM otel_traces GROUP BY request"
        )
    return Counter(
        {
            int(request, 16): int(spans)
            for request, spans in zip(frame["request"], frame["spans"], strict=True)
        }
    )


def run(scale: Scale) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memory-flood-") as workdir:
        directory = os.path.join(workdir, "store")
        serve, port = start_serve(directory)
        sampler = Sampler(serve.pid).start()
        phases: dict[str, dict[str, Any]] = {}
        outcomes: dict[str, set[int]] = {"acknowledged": set(), "refused": set(), "unknown": set()}
        try:
            sampler.phase = "idle"
            time.sleep(scale.idle_seconds)
            for number, (name, multiple) in enumerate(LOAD_PHASES, start=1):
                sampler.phase = name
                log(f"phase {name}: {multiple * TARGET_SPANS_PER_SECOND:,} spans/s offered")
                rate = multiple * TARGET_SPANS_PER_SECOND
                reports = run_senders(port, scale, rate, number << PHASE_SHIFT)
                phases[name] = phase_figures(reports, scale, rate)
                log(f"phase {name}: {json.dumps(phases[name])}")
                for report in reports:
                    for outcome, indexes in report["outcomes"].items():
                        outcomes[outcome].update(indexes)
            sampler.phase = "drain"
            time.sleep(scale.drain_seconds)
            refused = sorted(outcomes["refused"])[: scale.resend]
            resent = resend_from_process(port, refused)
            outcomes["acknowledged"].update(resent["acknowledged"])
            outcomes["refused"] -= set(resent["acknowledged"])
        finally:
            sampler.stop()
            serve.send_signal(signal.SIGTERM)
            serve.wait(300)
        stored = stored_per_request(directory)
    return {
        "scale": scale.__dict__,
        "target_spans_per_second": TARGET_SPANS_PER_SECOND,
        "spans_per_request": SPANS_PER_REQUEST,
        "phases": phases,
        "rss": sampler.by_phase(),
        "rss_samples": [(round(t, 1), phase, rss) for t, phase, rss in sampler.samples],
        "resent": {
            "requests": len(refused),
            "acknowledged": len(resent["acknowledged"]),
            "attempts": resent["attempts"],
        },
        "invariants": invariants(outcomes, stored),
        "serve_exit_code": serve.returncode,
        "bound": documented_bound(
            sampler.by_phase()["idle"]["peak_mib"], phases["1x"]["request_mib"]
        ),
    }


def resend_from_process(port: int, indexes: list[int]) -> dict[str, Any]:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.flood_senders",
            "--resend-to",
            str(port),
            "--indexes",
            ",".join(map(str, indexes)) or "-",
        ],
        capture_output=True,
        text=True,
        timeout=60 + 12 * len(indexes),
        cwd=Path(__file__).parent.parent,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def phase_figures(reports: list[dict[str, Any]], scale: Scale, rate: float) -> dict[str, Any]:
    requests = Counter({outcome: 0 for outcome in ("acknowledged", "refused", "unknown")})
    codes: Counter[str] = Counter()
    for report in reports:
        requests.update({outcome: len(indexes) for outcome, indexes in report["outcomes"].items()})
        codes.update(report["codes"])
    seconds = max(report["seconds"] for report in reports)
    sent = sum(requests.values())
    return {
        "offered_spans_per_second": rate,
        "sent_spans_per_second": round(sent * SPANS_PER_REQUEST / seconds),
        "acknowledged_spans_per_second": round(
            requests["acknowledged"] * SPANS_PER_REQUEST / seconds
        ),
        "seconds": round(seconds, 1),
        "requests": dict(requests),
        "status_codes": dict(codes),
        "request_mib": round(reports[0]["request_bytes"] / 2**20, 2),
        "late_median_s": round(max(report["late_median_s"] for report in reports), 3),
    }


def invariants(outcomes: dict[str, set[int]], stored: Counter[int]) -> dict[str, int]:
    """Spans, per outcome, against what the store holds (all zero but the counts when true)."""
    acknowledged, refused = outcomes["acknowledged"], outcomes["refused"]
    return {
        "spans_acknowledged": len(acknowledged) * SPANS_PER_REQUEST,
        "spans_refused": len(refused) * SPANS_PER_REQUEST,
        "spans_unknown": len(outcomes["unknown"]) * SPANS_PER_REQUEST,
        "lost": sum(max(0, SPANS_PER_REQUEST - stored[index]) for index in acknowledged),
        "refused_but_stored": sum(stored[index] for index in refused),
        "duplicates": sum(max(0, spans - SPANS_PER_REQUEST) for spans in stored.values()),
        "partly_stored_requests": sum(0 < spans < SPANS_PER_REQUEST for spans in stored.values()),
    }


def documented_bound(idle_mib: float, request_mib: float) -> dict[str, float]:
    """docs/reliability.md's bound on serve's RSS, its terms from the intake's defaults.

    Idle (the process, the engine, the schema) plus what the intake may hold at
    once: accepted requests waiting for the store (``max_pending_bytes``), one
    request being received by each gRPC handler thread before it can be refused
    (``workers`` x the request's size: the whole message arrives before the
    handler runs), and each export worker's batch as decoded rows in the engine
    (``STORE_BYTES_PER_BATCH_BYTE`` x ``batch_bytes``, measured).
    """
    from grpc_overhead.analyzer.intake import IntakeConfig

    config = IntakeConfig()
    terms = {
        "idle_mib": idle_mib,
        "pending_mib": config.max_pending_bytes / 2**20,
        "receiving_mib": config.workers * request_mib,
        "storing_mib": config.export_workers
        * STORE_BYTES_PER_BATCH_BYTE
        * config.batch_bytes
        / 2**20,
    }
    return {
        **{key: round(value, 1) for key, value in terms.items()},
        "total_mib": round(sum(terms.values()), 1),
    }


def log(message: str) -> None:
    print(f"[memory flood] {message}", file=sys.stderr, flush=True)
