"""The README's promises that a test can hold: commands, variables, the two set-up targets."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from grpc_overhead.cli import COMMANDS
from grpc_overhead.instrumentation.environment import DOCUMENTED

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_every_documented_variable_is_in_the_readme():
    missing = [v.name for v in DOCUMENTED if f"`{v.name}`" not in README]
    assert not missing


def test_every_variable_the_code_reads_is_documented():
    tracked = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    used = set()
    for name in tracked:
        path = ROOT / name
        if path.suffix in {".py", ".yaml", ".sh"} and "tests" not in path.parts and path.exists():
            used |= set(re.findall(r"GRPC_OVERHEAD_[A-Z_]+[A-Z]", path.read_text()))
    assert used - {v.name for v in DOCUMENTED} == set()


def test_two_setup_commands_and_every_cli_command_are_shown():
    assert "make demo" in README and "make test" in README
    for command in COMMANDS:
        assert f"grpc-overhead {command}" in README or f"`{command}`" in README
