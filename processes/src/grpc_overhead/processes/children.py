"""Start, watch and stop ``grpc-overhead`` sub-commands as child processes (what the
package offers, with an example: its ``__init__``).

A service is started on ``--port 0`` (unless the arguments name a port) and its
``listening on HOST:PORT`` line is awaited; stderr goes to a file so a chatty server can
never block on a full pipe (``service.stderr_text()``).
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpc_overhead.processes.ports import free_port

LISTENING = "listening on "
TLS_CA = "tls ca: "


#: How long a child gets to exit after its signal before SIGKILL.
STOP_TIMEOUT_S = 30.0


class ServiceStartError(RuntimeError):
    pass


class ComponentFailed(RuntimeError):
    """A process of the stack died or never became ready: exit 1, with its log."""


def stop_process(
    process: subprocess.Popen[Any], timeout_s: float = 30.0, sig: int = signal.SIGTERM
) -> int:
    """``sig`` (SIGTERM: the graceful path that flushes), then SIGKILL if the child
    outlives ``timeout_s``, so a hung child never outlives the caller; the exit code."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


#: The OTLP settings that name where spans go: given one, the spans go somewhere real.
ENDPOINT_SETTINGS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
#: Each export's bound toward the port where nothing listens: a refused export fails at
#: once, so this only keeps a process's exit from waiting on retries that cannot succeed.
DEAD_PORT_EXPORT_TIMEOUT_S = 0.5
_UNSET: Any = object()


def offline_env(
    base: Mapping[str, str] | None = None,
    exporter_timeout_s: float | None = _UNSET,
    **overrides: str,
) -> dict[str, str]:
    """An environment that starts from nothing of the caller's telemetry settings: for
    tests and benchmarks, with or without a collector.

    Drops inherited OTEL_* / GRPC_OVERHEAD_* settings and points the OTLP endpoint
    at a loopback port where nothing listens (never at a collector a developer
    may be running on :4317), unless ``overrides`` name an endpoint.
    ``exporter_timeout_s`` bounds each export attempt; None keeps the exporter's
    default (10 s). Left out, it is 0.5 s toward the dead port and the exporter's
    default toward an endpoint the caller named: a real collector or intake on a loaded
    machine can take longer than half a second, and a batch that times out is lost.
    """
    if exporter_timeout_s is _UNSET:
        names_an_endpoint = any(name in overrides for name in ENDPOINT_SETTINGS)
        exporter_timeout_s = None if names_an_endpoint else DEAD_PORT_EXPORT_TIMEOUT_S
    env = {
        name: value
        for name, value in (os.environ if base is None else base).items()
        if not name.startswith(("OTEL_", "GRPC_OVERHEAD_"))
    }
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{free_port()}"
    if exporter_timeout_s is not None:
        env["OTEL_EXPORTER_OTLP_TIMEOUT"] = f"{exporter_timeout_s:g}"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(overrides)
    return env


class ServiceProcess:
    #: What the start-up errors call the process (a subclass runs another command).
    name = "service"
    #: The start of the line that says it is ready (a subclass may read another in ``_ready``).
    ready_line = LISTENING

    def __init__(
        self,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        startup_timeout_s: float = 30.0,
        python: str = sys.executable,
        stop_timeout_s: float = 15.0,
    ) -> None:
        """``stop_timeout_s``: how long a stop waits before it kills; the service flushes
        its last spans in that time, which takes longer from a loaded machine."""
        self.args = list(args)
        if "--port" not in self.args:
            self.args += ["--port", "0"]
        self.env = dict(os.environ if env is None else env)
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.python = python
        self.process: subprocess.Popen[str] | None = None
        self.target = ""
        self.port = 0
        self.tls_ca: Path | None = None
        self.stdout_lines: list[str] = []
        # closed in __exit__ (the object outlives this method)
        self._stderr = tempfile.TemporaryFile(mode="w+", prefix="grpc-overhead-service-")  # noqa: SIM115
        self._lines: queue.Queue[str | None] = queue.Queue()

    @property
    def command(self) -> list[str]:
        return [self.python, "-m", "grpc_overhead", "service", *self.args]

    def start(self) -> ServiceProcess:
        self.process = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=self.env,
        )
        threading.Thread(target=self._read_stdout, daemon=True).start()
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = self._lines.get(timeout=max(0.0, remaining))
            except queue.Empty:
                self.kill()
                raise ServiceStartError(
                    f"{self.name} did not print {self.ready_line!r} within "
                    f"{self.startup_timeout_s:g} s; stderr:\n{self.stderr_text()}"
                ) from None
            if line is None:
                code = self.process.wait()
                raise ServiceStartError(
                    f"{self.name} exited with {code} before listening; "
                    f"stderr:\n{self.stderr_text()}"
                )
            if self._ready(line):
                return self

    def _ready(self, line: str) -> bool:
        """Whether ``line`` says the process is ready; keeps what the lines say of it."""
        if line.startswith(TLS_CA):
            self.tls_ca = Path(line[len(TLS_CA) :])
        if not line.startswith(LISTENING):
            return False
        self.target = line[len(LISTENING) :]
        self.port = int(self.target.rpartition(":")[2])
        return True

    def _read_stdout(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.rstrip("\n")
            self.stdout_lines.append(line)
            self._lines.put(line)
        self._lines.put(None)

    def stop(self, timeout_s: float | None = None, sig: int = signal.SIGTERM) -> int:
        """Signal the service, wait for it; kill it if it outlives ``timeout_s`` (default:
        the ``stop_timeout_s`` it was made with)."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(self.stop_timeout_s if timeout_s is None else timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                raise
        return self.process.returncode

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stderr_text(self) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read()

    def __enter__(self) -> ServiceProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        try:
            self.stop()
        finally:
            self.kill()
            self._stderr.close()


@dataclass
class LoadProcessResult:
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float

    @property
    def summary(self) -> dict[str, Any]:
        """The ``--json`` summary (asserts the run exited 0)."""
        if self.returncode != 0:
            raise AssertionError(f"load exited {self.returncode}: {self.stderr}")
        return json.loads(self.stdout)


def run_load(
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 120,
    python: str = sys.executable,
) -> LoadProcessResult:
    """Run ``grpc-overhead load --quiet ARGS`` to completion (``offline_env()`` by default)."""
    command = [python, "-m", "grpc_overhead", "load", "--quiet", *args]
    started = time.monotonic()
    done = subprocess.run(
        command,
        env=dict(env) if env is not None else offline_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    return LoadProcessResult(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def child_env(**overrides: str) -> dict[str, str]:
    """This environment without the user's OTEL_* settings (they would send spans elsewhere)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(overrides)
    return env


class Child:
    """A ``grpc-overhead`` sub-command in its own session, its output in ``log``."""

    def __init__(self, name: str, args: Sequence[str], env: Mapping[str, str], log: Path) -> None:
        self.name = name
        self.command = [sys.executable, "-m", "grpc_overhead", *args]
        self.env = dict(env)
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Child:
        with open(self.log, "ab") as output:
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=self.env,
                # Ctrl-C reaches the demo only; it stops the children in order.
                start_new_session=True,
            )
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.output().strip().splitlines()[-lines:])

    def wait_for(self, pattern: str, timeout_s: float, stop: threading.Event) -> re.Match[str]:
        """Wait until the output matches ``pattern`` (the process's "ready" line)."""
        regex = re.compile(pattern, re.MULTILINE)
        deadline = time.monotonic() + timeout_s
        while True:
            found = regex.search(self.output())
            if found:
                return found
            if not self.running:
                raise ComponentFailed(
                    f"{self.name} exited with code {self.returncode()} while starting:\n"
                    f"{self.tail()}"
                )
            if stop.is_set():
                raise KeyboardInterrupt
            if time.monotonic() > deadline:
                raise ComponentFailed(
                    f"{self.name} not ready after {timeout_s:g} s (log {self.log}):\n{self.tail()}"
                )
            time.sleep(0.1)

    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """``sig``, then SIGKILL after ``timeout_s``; returns the exit code."""
        if self.process is None:
            return None
        return stop_process(self.process, timeout_s, sig)


# -- the demo -------------------------------------------------------------------------------------
