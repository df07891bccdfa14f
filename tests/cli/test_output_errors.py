"""Output that cannot be written: ``| head`` closing the pipe, a full disk.

Every command prints through the dispatcher, so one command stands for all:
``collector config embedded`` prints a few KB and needs no store.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from grpc_overhead.cli import EXIT_BROKEN_PIPE
from grpc_overhead.processes import offline_env

pytestmark = pytest.mark.e2e

COMMAND = [sys.executable, "-m", "grpc_overhead", "collector", "config", "embedded"]


def test_a_reader_that_hangs_up_ends_the_command_quietly() -> None:
    read, write = os.pipe()
    os.close(read)  # `| head -c0`: the reader is gone before the first write
    with os.fdopen(write, "wb") as stdout:
        run = subprocess.run(COMMAND, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=60)
    assert run.returncode == EXIT_BROKEN_PIPE
    assert run.stderr == ""  # no traceback, no "Exception ignored" at exit


def test_a_full_disk_is_one_line_not_a_traceback() -> None:
    # Linux's /dev/full, on every machine this project runs and is tested on: without it
    # the open fails loudly here rather than the test being skipped.
    with open("/dev/full", "wb") as stdout:
        run = subprocess.run(COMMAND, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=60)
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        "grpc-overhead collector: cannot write the output: No space left on device"
    ]


def test_serve_stops_when_nobody_reads_its_output_any_more(tmp_path: Path) -> None:
    """``serve | tee serve.log`` and Ctrl-C: tee ends first, and Streamlit's "Stopping..."
    then met a closed pipe, so the app server was never stopped and serve hung."""
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grpc_overhead",
            "serve",
            "--store",
            str(tmp_path / "store"),
            "--otlp-port",
            "0",
            "--standard-otlp-port",
            "off",
            "--http-port",
            "0",
            "--app-port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=offline_env(),
    )
    try:
        assert serve.stdout is not None
        for line in iter(serve.stdout.readline, b""):  # up to the app: its signals are set
            if line.startswith(b"app: "):
                break
        serve.stdout.close()  # the reader (tee) is gone
        serve.send_signal(signal.SIGTERM)
        _, error = serve.communicate(timeout=60)
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
    assert serve.returncode == 0 and b"Traceback" not in error, error.decode()


def test_demo_with_logs_it_cannot_write_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checked before anything starts (a FileExistsError traceback before)."""
    from grpc_overhead.cli import demo

    taken = tmp_path / "a-file"
    taken.write_text("")
    argv = [
        "--logs",
        str(taken),
        "--store",
        str(tmp_path / "store"),
        "--app-port",
        "0",
        "--no-browser",
        "--no-collector",
        "--duration",
        "1",
    ]
    assert demo.main(argv) == 2
    assert f"cannot make --logs {taken}" in capsys.readouterr().err
