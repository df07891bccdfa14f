"""Build, locate, validate and run the grpc-overhead OpenTelemetry Collector.

The collector is a real ``otelcol`` binary built by ``build.sh`` from
``manifest.yaml`` (both in the component folder ``collector/``, three levels above
this file's ``src/grpc_overhead/collector``). Python only drives it: the
configs and the build script are found relative to this file, and everything
configurable in the configs is an ``${env:...}`` variable, so this module changes
behaviour through the environment of the child process and never rewrites YAML.
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType

from grpc_overhead.collector.child import terminate_with_parent as _terminate_with_parent
from grpc_overhead.instrumentation import environment
from grpc_overhead.processes.ports import free_port as _free_port
from grpc_overhead.processes.ports import port_is_free as _port_is_free

#: Overrides the binary location, for a collector built or installed elsewhere.
ENV_BIN = environment.COLLECTOR_BIN
#: Environment variables read by embedded.yaml and clickhouse.yaml.
ENV_OTLP_PORT = environment.COLLECTOR_OTLP_PORT
ENV_OTLP_HTTP_PORT = environment.COLLECTOR_OTLP_HTTP_PORT
ENV_INTAKE = environment.INTAKE_ENDPOINT
ENV_HEALTH_PORT = environment.COLLECTOR_HEALTH_PORT
ENV_STORAGE = environment.COLLECTOR_STORAGE_DIR

DIST_NAME = "otelcol-grpc-overhead"
CONFIG_NAMES: tuple[str, ...] = ("embedded", "clickhouse", "embedded-jaeger", "team")
DEFAULT_OTLP_PORT = 4317
DEFAULT_OTLP_HTTP_PORT = 4318
DEFAULT_HEALTH_PORT = 13133
DEFAULT_INTAKE = "127.0.0.1:4327"

NO_GO_HINT = (
    "Go not found: install Go >= 1.26 (the collector v0.161.0 modules need it) "
    f"or send OTLP straight to the intake on port {DEFAULT_INTAKE.rsplit(':', 1)[1]} "
    f"(the instrumented service can export to {DEFAULT_INTAKE} without a collector)"
)

# collector/src/grpc_overhead/collector/runner.py -> collector/
_HERE = Path(__file__).resolve().parents[3]
_LOG_TAIL_LINES = 200


class CollectorError(RuntimeError):
    """Base class: every failure here is a user-facing condition with a clear message."""


class CollectorUnavailable(CollectorError):
    """No collector binary can be had: Go is missing or the build failed."""


class CollectorConfigError(CollectorError, ValueError):
    """Unknown config name, missing file, or a config the collector rejects."""


class CollectorStartError(CollectorError):
    """The collector died during start-up or never became healthy."""


def collector_dir() -> Path:
    """The component folder holding manifest.yaml, build.sh, the configs and dist/."""
    return _HERE


def collector_binary() -> Path:
    """Where the collector binary is (or will be once built).

    ``GRPC_OVERHEAD_COLLECTOR_BIN`` wins, so users with their own build (or a
    packaged one) never need Go; otherwise it is ``dist/otelcol-grpc-overhead``
    next to this file, where ``build.sh`` writes it. The path is not checked.
    """
    override = os.environ.get(ENV_BIN, "").strip()
    if override:
        return Path(override).expanduser()
    return _HERE / "dist" / DIST_NAME


def _require_binary(binary: Path | None = None) -> Path:
    path = binary if binary is not None else collector_binary()
    if path.is_file() and os.access(path, os.X_OK):
        return path
    if binary is None and os.environ.get(ENV_BIN, "").strip():
        raise CollectorUnavailable(f"{ENV_BIN} points to {path}, which is not an executable file")
    raise CollectorUnavailable(
        f"collector binary not found at {path}: build it with "
        "'grpc-overhead collector build' (or 'bash collector/build.sh'), "
        f"or point {ENV_BIN} at an existing otelcol build"
    )


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def build_collector(*, force: bool = False, echo: bool = True) -> Path:
    """Build the collector if needed and return the binary's path.

    Runs ``build.sh``, which is a sub-second no-op when the binary is newer
    than the manifest and the script, so callers (tests, ``run``) can call
    this unconditionally. With ``GRPC_OVERHEAD_COLLECTOR_BIN`` set nothing is
    built: that binary is checked and returned.

    ``echo`` streams the build's progress lines to this process's
    stdout/stderr (a first build takes minutes; silence would look like a
    hang); with ``echo=False`` the output is captured and its tail goes into
    the error on failure.

    Raises CollectorUnavailable with the "send OTLP straight to the intake"
    hint when Go is missing (build.sh exit code 2), or with the build output
    when the build fails.
    """
    if os.environ.get(ENV_BIN, "").strip():
        return _require_binary()
    bash = shutil.which("bash")
    if bash is None:
        raise CollectorUnavailable(f"bash not found, needed to run build.sh. {NO_GO_HINT}")
    command = [bash, str(_HERE / "build.sh"), *(["--force"] if force else [])]
    result = subprocess.run(
        command,
        stdin=subprocess.DEVNULL,
        stdout=None if echo else subprocess.PIPE,
        stderr=None if echo else subprocess.STDOUT,
        text=True,
        check=False,
    )
    output = result.stdout or ""
    if result.returncode == 2:
        # build.sh's own message says whether Go is missing or too old, and
        # already carries the intake hint; when it went to the terminal, repeat
        # the gist so the exception stands on its own.
        detail = _tail(output, 5)
        raise CollectorUnavailable(detail or f"no usable Go toolchain. {NO_GO_HINT}")
    if result.returncode != 0:
        detail = f":\n{_tail(output)}" if output else " (see the output above)"
        raise CollectorUnavailable(
            f"collector build failed with exit code {result.returncode}{detail}"
        )
    return _require_binary()


def config_path(name: str) -> Path:
    """Path of a shipped config: ``embedded`` (to the analyzer intake) or ``clickhouse``."""
    if name not in CONFIG_NAMES:
        raise CollectorConfigError(
            f"unknown collector config {name!r}: valid names are {', '.join(CONFIG_NAMES)}"
        )
    return _HERE / f"{name}.yaml"


def resolve_config(name_or_path: str | os.PathLike[str]) -> Path:
    """A shipped config name, or the path of the user's own config file."""
    if isinstance(name_or_path, str) and name_or_path in CONFIG_NAMES:
        return config_path(name_or_path)
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    raise CollectorConfigError(
        f"collector config {str(name_or_path)!r} is neither a shipped config "
        f"({', '.join(CONFIG_NAMES)}) nor an existing file"
    )


def validate_config(
    path: str | os.PathLike[str],
    *,
    binary: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> None:
    """Ask the collector itself whether a config is valid (``otelcol validate``).

    Only the binary knows which components and keys it was built with, so
    this is the check that matters; ``env`` is applied on top of
    ``os.environ`` because ``${env:...}`` values are part of what is validated.
    Raises CollectorConfigError carrying the collector's own message.
    """
    config = Path(path)
    if not config.is_file():
        raise CollectorConfigError(f"collector config {config} does not exist")
    exe = _require_binary(binary)
    result = subprocess.run(
        [str(exe), "validate", "--config", str(config)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip() or f"exit code {result.returncode}"
        raise CollectorConfigError(f"collector rejected {config}:\n{message}")


def default_storage_dir(config: Path, otlp_port: int) -> Path:
    """Where a collector run from here keeps its on-disk sending queue by default.

    One folder per config and OTLP port, in the user's state dir: a collector
    restarted on the same port (after a kill -9) finds and resends what it had
    acknowledged, and two collectors side by side (which need distinct ports
    anyway) never contend for one queue file (file_storage locks it).
    """
    state = os.environ.get("XDG_STATE_HOME", "").strip() or Path.home() / ".local" / "state"
    return Path(state) / "grpc-overhead" / f"collector-{config.stem}-{otlp_port}"


class CollectorProcess:
    """The collector as a child process, for ``with`` blocks and foreground runs.

    Ports and the intake address are passed as environment overrides read by
    the shipped configs, so several collectors can run side by side. On entry
    the process is started and the call returns only once the health_check
    extension answers 200 (every pipeline started); on exit it gets SIGTERM
    (the collector flushes its queues) and SIGKILL after ``stop_timeout``.

    Output (the collector logs to stderr) is drained by a thread into a
    bounded tail, used in error messages, and optionally echoed.
    """

    def __init__(
        self,
        config: str | os.PathLike[str] = "embedded",
        *,
        otlp_port: int | None = None,
        otlp_http_port: int | None = None,
        intake: str | None = None,
        health_port: int | None = None,
        env: Mapping[str, str] | None = None,
        binary: Path | None = None,
        startup_timeout: float = 30.0,
        stop_timeout: float = 10.0,
        echo: bool = False,
        die_with_parent: bool = False,
    ) -> None:
        self.config = resolve_config(config)
        self.die_with_parent = die_with_parent
        self.binary = binary
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.echo = echo
        overrides = dict(env or {})
        if otlp_port is not None:
            overrides[ENV_OTLP_PORT] = str(otlp_port)
        if otlp_http_port is not None:
            overrides[ENV_OTLP_HTTP_PORT] = str(otlp_http_port)
        elif otlp_port is not None and ENV_OTLP_HTTP_PORT not in {**os.environ, **overrides}:
            # Whoever picks the gRPC port (tests, several collectors side by side) would
            # otherwise have them all reach for 4318: the HTTP receiver takes a free port.
            overrides[ENV_OTLP_HTTP_PORT] = str(_free_port())
        if intake is not None:
            overrides[ENV_INTAKE] = intake
        if health_port is not None:
            overrides[ENV_HEALTH_PORT] = str(health_port)
        self.env_overrides = overrides
        merged = {**os.environ, **overrides}
        self.otlp_port = int(merged.get(ENV_OTLP_PORT) or DEFAULT_OTLP_PORT)
        self.otlp_http_port = int(merged.get(ENV_OTLP_HTTP_PORT) or DEFAULT_OTLP_HTTP_PORT)
        self.health_port = int(merged.get(ENV_HEALTH_PORT) or DEFAULT_HEALTH_PORT)
        self.intake = merged.get(ENV_INTAKE) or DEFAULT_INTAKE
        storage = merged.get(ENV_STORAGE) or default_storage_dir(self.config, self.otlp_port)
        self.storage_dir = Path(storage).expanduser()
        overrides[ENV_STORAGE] = str(self.storage_dir)
        self._process: subprocess.Popen[str] | None = None
        self._lines: collections.deque[str] = collections.deque(maxlen=_LOG_TAIL_LINES)
        self._reader: threading.Thread | None = None

    @property
    def otlp_endpoint(self) -> str:
        """host:port for OTLP/gRPC senders."""
        return f"127.0.0.1:{self.otlp_port}"

    @property
    def otlp_http_url(self) -> str:
        """OTLP/HTTP senders' ``OTEL_EXPORTER_OTLP_ENDPOINT`` (traces go to /v1/traces)."""
        return f"http://127.0.0.1:{self.otlp_http_port}"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.health_port}/"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def returncode(self) -> int | None:
        return self._process.poll() if self._process else None

    def logs(self) -> str:
        """The last lines the collector printed."""
        return "".join(self._lines)

    def _drain(self, stream: Iterable[str]) -> None:
        """Keep reading the collector's output to the end, whatever happens to ours.

        If the collector's pipe filled up it would block at its next log line,
        so a closed or broken stderr (the reader of ``collector run | ...``
        went away) only stops the echo, never the reading.
        """
        for line in stream:
            self._lines.append(line)
            if self.echo:
                try:
                    sys.stderr.write(line)
                    sys.stderr.flush()
                except (OSError, ValueError):
                    self.echo = False

    def start(self) -> CollectorProcess:
        """Start the collector and wait until it reports healthy."""
        if self._process is not None:
            raise CollectorError("collector already started")
        exe = _require_binary(self.binary)
        # A collector already answering on this health port would make us
        # report success for the wrong process: refuse up front.
        if not _port_is_free(self.health_port):
            raise CollectorStartError(
                f"health port {self.health_port} is already in use (another collector?): "
                "choose another with --health-port / health_port"
            )
        try:
            self.storage_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise CollectorStartError(
                f"cannot create the collector's queue directory {self.storage_dir} "
                f"({error.strerror}): set {ENV_STORAGE} to a writable directory"
            ) from None
        self._process = subprocess.Popen(
            [str(exe), "--config", str(self.config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env={**os.environ, **self.env_overrides},
            # Own session: Ctrl-C reaches only Python, which then stops the
            # collector in order (SIGTERM, flush, exit).
            start_new_session=True,
            preexec_fn=_terminate_with_parent if self.die_with_parent else None,
        )
        assert self._process.stdout is not None
        self._reader = threading.Thread(
            target=self._drain, args=(self._process.stdout,), name="collector-log", daemon=True
        )
        self._reader.start()
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout
        while True:
            code = self._process.poll()
            if code is not None:
                if self._reader is not None:
                    self._reader.join(timeout=2)
                raise CollectorStartError(
                    f"collector exited with code {code} during start-up "
                    f"(config {self.config}):\n{_tail(self.logs())}"
                )
            try:
                with urllib.request.urlopen(self.health_url, timeout=1) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass  # not listening yet, or 503 while pipelines start
            if time.monotonic() >= deadline:
                raise CollectorStartError(
                    f"collector not healthy at {self.health_url} after "
                    f"{self.startup_timeout:.0f} s (config {self.config}):\n{_tail(self.logs())}"
                )
            time.sleep(0.1)

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the collector if it runs (safe from a signal handler)."""
        process = self._process
        if process is not None and process.poll() is None:
            try:
                os.kill(process.pid, signum)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float | None = None) -> int:
        """Block until the collector exits; return its exit code."""
        if self._process is None:
            raise CollectorError("collector not started")
        return self._process.wait(timeout=timeout)

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after stop_timeout; returns the exit code."""
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._reader is not None:
            self._reader.join(timeout=2)
        return process.returncode

    def __enter__(self) -> CollectorProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
