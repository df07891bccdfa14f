"""``grpc-overhead experiment`` run as a user runs it, for the experiment tests to share."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from grpc_overhead.processes import offline_env


def command(*args: str, timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grpc_overhead", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
        env=offline_env(),
    )


def run_experiment(tmp_path: Path, text: str) -> dict:
    """Run an experiment file with this text on a fresh store; its JSON document."""
    spec = tmp_path / "experiment.yaml"
    spec.write_text(text)
    done = command("experiment", str(spec), "--store", str(tmp_path / "store"), "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
