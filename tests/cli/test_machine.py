"""The machine check: other processes' CPU is seen, ours is not, and a busy machine refuses
``--require-quiet`` before anything starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from grpc_overhead.cli import machine
from grpc_overhead.processes import offline_env

pytestmark = pytest.mark.e2e

BUSY = "import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n    pass\n"


@contextmanager
def busy_strangers(count: int, seconds: float = 20.0) -> Iterator[list[int]]:
    """``count`` CPU-bound processes that are not our descendants: started by a shell that
    exits at once, so they are reparented away from this process tree."""
    script = BUSY.format(seconds=seconds)
    launcher = " ".join(
        f"{sys.executable} -c '{script}' >/dev/null 2>&1 & echo $!;" for _ in range(count)
    )
    done = subprocess.run(["sh", "-c", launcher], capture_output=True, text=True, check=True)
    pids = [int(line) for line in done.stdout.split()]
    try:
        yield pids
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_strangers_count_and_our_own_children_do_not() -> None:
    child = subprocess.Popen([sys.executable, "-c", BUSY.format(seconds=10)])
    try:
        with busy_strangers(1, seconds=10) as (stranger,):
            check = machine.MachineCheck()
            time.sleep(1.5)
            processes = machine._processes()
            ours = machine._ours(processes, os.getpid())
            assert child.pid in ours and stranger not in ours
            sample = check.sample()
    finally:
        child.kill()
        child.wait()
    # the stranger burns a CPU (less on a loaded machine); our child, as busy, is not counted
    assert sample.others_cpus > 0.2
    assert any(name.startswith("python") and cpus > 0.2 for name, cpus in sample.top)
    summary = machine.summarize([sample] * 3)
    assert summary["samples"] == 3 and summary["others_cpus_mean"] == round(sample.others_cpus, 3)


def test_require_quiet_refuses_a_busy_machine(tmp_path) -> None:
    spec = tmp_path / "quiet.yaml"
    spec.write_text("calls: 5\n")
    with busy_strangers(2):
        time.sleep(0.5)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_overhead",
                "experiment",
                str(spec),
                "--store",
                str(tmp_path / "store"),
                "--require-quiet",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            env=offline_env(),
        )
    assert done.returncode == 3, done.stderr
    assert "the machine is busy (" in done.stderr and "nothing was run" in done.stderr
    assert "other processes used" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "store").exists()  # refused before the store was opened
    bad = subprocess.run(
        [sys.executable, "-m", "grpc_overhead", "experiment", str(spec), "--require-quiet", "-1"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env=offline_env(),
    )
    assert bad.returncode == 2 and "expected a load average above 0" in bad.stderr
