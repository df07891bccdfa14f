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


def machine_speed(*python: str) -> subprocess.CompletedProcess[str]:
    """``python -m harness.machine_speed``, or the Python command line ``python`` names."""
    return subprocess.run(
        [sys.executable, *(python or ("-m", "harness.machine_speed"))],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=offline_env(),
        cwd=ROOT,
    )


def test_one_line_with_both_figures_and_the_load():
    done = machine_speed()
    assert done.returncode == 0, done.stderr
    match = LINE.match(done.stdout.strip())
    assert match, done.stdout
    loop_ms, analysis_ms, _, cpus = (float(group) for group in match.groups())
    assert loop_ms > 0 and analysis_ms > 0 and cpus >= 1


def test_an_engine_part_that_fails_says_so_in_one_line():
    """The line must not read as a failed test: the engine's part failing (here the phases
    module cannot be imported) still prints one line, the loop's figure, and no traceback."""
    blocked = (
        "import runpy, sys; sys.modules['grpc_overhead.analyzer.phases'] = None;"
        " runpy.run_module('harness.machine_speed', run_name='__main__')"
    )
    done = machine_speed("-c", blocked)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert re.match(
        r"^machine speed: the engine's part failed \(.*grpc_overhead\.analyzer\.phases.*\);"
        r" Python loop \d+ ms$",
        done.stdout.strip(),
    ), done.stdout
