"""The commands we print as hints run from where the user is (``cli/invocation.py``).

``make demo`` runs ``.venv/bin/grpc-overhead`` with the venv not activated: the
demo's closing hint must say ``.venv/bin/grpc-overhead report``, not a bare
``grpc-overhead report`` that the shell cannot find. Real files: this checkout's
own console script, run as a user runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpc_overhead.processes import offline_env

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "grpc-overhead"
PRINT_COMMAND = "from grpc_overhead.cli import invocation; print(invocation.command())"


def command_as_run(cwd: Path, path: str) -> str:
    """``invocation.command()`` inside the console script's own interpreter, from ``cwd``
    with ``PATH=path``, as the demo computes it at its end."""
    env = {**offline_env(), "PATH": path}
    done = subprocess.run(
        [sys.executable, "-c", PRINT_COMMAND],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_venv_not_on_path_is_named_by_its_path_from_the_checkout():
    assert SCRIPT.is_file()
    bare = os.pathsep.join(
        part
        for part in os.environ["PATH"].split(os.pathsep)
        if Path(part).absolute() != SCRIPT.parent.absolute()
    )
    below = command_as_run(REPO, bare)
    assert below == str(SCRIPT.absolute().relative_to(REPO))  # e.g. .venv/bin/grpc-overhead
    assert "/" in below  # a shell runs it as a path, not a name to look up
    done = subprocess.run(
        [*below.split(), "--help"],
        cwd=REPO,
        env={**offline_env(), "PATH": bare},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "report" in done.stdout


def test_elsewhere_the_path_is_absolute(tmp_path: Path):
    bare = "/usr/bin:/bin"
    assert command_as_run(tmp_path, bare) == str(SCRIPT.absolute())


def test_an_activated_venv_is_named_by_the_bare_command(tmp_path: Path):
    assert command_as_run(tmp_path, f"{SCRIPT.parent}:/usr/bin:/bin") == "grpc-overhead"
