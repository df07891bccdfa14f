"""``python -m harness.machine_speed``, the line ``make test`` prints before each part."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from grpc_overhead.processes import offline_env

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(
    r"^machine speed: Python loop (\d+) ms, engine analysis (\d+) ms \(CPU, medians of 3\);"
    r" load average (\d+\.\d\d) on (\d+) CPUs$"
)


def machine_speed(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.machine_speed"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=offline_env(**env),
        cwd=ROOT,
    )


def test_one_line_with_both_figures_and_the_load():
    done = machine_speed()
    assert done.returncode == 0, done.stderr
    match = LINE.match(done.stdout.strip())
    assert match, done.stdout
    loop_ms, analysis_ms, _, cpus = (float(group) for group in match.groups())
    assert loop_ms > 0 and analysis_ms > 0 and cpus >= 1
