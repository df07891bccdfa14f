"""``grpc-overhead collector run`` the way an init system runs it: own session, output piped.

Issue 10: SIGTERM to the wrapper left the collector running as an orphan that
kept the OTLP and health ports. Every stop signal must now stop the collector
gracefully and ``run`` must return only after it exited; even a SIGKILL of the
wrapper must not leave the collector behind.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from grpc_overhead.processes import free_port

pytestmark = pytest.mark.e2e

GRPC_OVERHEAD = str(Path(sys.executable).parent / "grpc-overhead")
READY = re.compile(r"collector ready \(config .*, pid (\d+)\)")


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its parent counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


def _start(collector_bin: Path) -> tuple[subprocess.Popen, int, list[str]]:
    """The wrapper in its own session, stdout and stderr piped; returns it and the collector's
    pid once ready."""
    health = free_port()
    wrapper = subprocess.Popen(
        [
            GRPC_OVERHEAD,
            "collector",
            "run",
            "--otlp-port",
            str(free_port()),
            "--otlp-http-port",
            str(free_port()),
            "--health-port",
            str(health),
            "--intake",
            f"127.0.0.1:{free_port()}",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    errors: list[str] = []
    lines: queue.Queue[str] = queue.Queue()
    # Readers in threads: an orphaned collector would hold the pipes open forever.
    threading.Thread(target=lambda: errors.extend(wrapper.stderr), daemon=True).start()
    threading.Thread(
        target=lambda: [lines.put(line) for line in wrapper.stdout], daemon=True
    ).start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            found = READY.search(lines.get(timeout=1))
        except queue.Empty:
            continue
        if found:
            return wrapper, int(found.group(1)), errors
    wrapper.kill()
    pytest.fail(f"collector run was not ready in time: {''.join(errors)[-2000:]}")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_drains_and_stops_the_collector(collector_bin: Path, signum: int) -> None:
    wrapper, collector_pid, errors = _start(collector_bin)
    try:
        assert _alive(collector_pid)
        os.kill(wrapper.pid, signum)
        assert wrapper.wait(timeout=60) == 0, "".join(errors)[-2000:]
        assert not _alive(collector_pid), "the collector outlived collector run"
        log = "".join(errors)
        assert "Received signal from OS" in log  # a graceful shutdown, not a kill
        assert "Shutdown complete" in log
    finally:
        for pid in (wrapper.pid, collector_pid):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_killed_wrapper_takes_the_collector_with_it(collector_bin: Path) -> None:
    wrapper, collector_pid, _ = _start(collector_bin)
    try:
        os.kill(wrapper.pid, signal.SIGKILL)
        wrapper.wait(timeout=30)
        assert _wait_gone(collector_pid, 30), "the collector lives on as an orphan"
    finally:
        if _alive(collector_pid):
            os.kill(collector_pid, signal.SIGKILL)
