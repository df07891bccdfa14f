"""Output that cannot be written: ``| head`` closing the pipe, a full disk.

Every command prints through the dispatcher, so one command stands for all:
``collector config embedded`` prints a few KB and needs no store.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from grpc_overhead.cli import EXIT_BROKEN_PIPE

pytestmark = pytest.mark.e2e

COMMAND = [sys.executable, "-m", "grpc_overhead", "collector", "config", "embedded"]


def test_a_reader_that_hangs_up_ends_the_command_quietly() -> None:
    read, write = os.pipe()
    os.close(read)  # `| head -c0`: the reader is gone before the first write
    with os.fdopen(write, "wb") as stdout:
        run = subprocess.run(COMMAND, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=60)
    assert run.returncode == EXIT_BROKEN_PIPE
    assert run.stderr == ""  # no traceback, no "Exception ignored" at exit


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_full_disk_is_one_line_not_a_traceback() -> None:
    with open("/dev/full", "wb") as stdout:
        run = subprocess.run(COMMAND, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=60)
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        "grpc-overhead collector: cannot write the output: No space left on device"
    ]
