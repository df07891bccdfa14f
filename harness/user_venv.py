"""A user's virtualenv: grpc-overhead-instrumentation and the OpenTelemetry packages users
typically have, nothing else of this repository; built once and cached.

The coexistence tests run real services from a temporary directory outside the
repository in this venv, the way a user attaches the instrumentation to a
service of their own (``opentelemetry-instrument python server.py``). It is
cached under ``build/user-venv/KEY`` (git-ignored), ``KEY`` a hash of the
instrumentation's files, the pinned packages and the Python version, the way
the collector binary is cached: ``make user-venv`` builds it before the tests,
so CI pays for it once, and a changed instrumentation gets a new venv.

The instrumentation is installed from the worktree path, not editable: what
runs is a built wheel, as a user gets it.

Entry-point order: ``opentelemetry-instrument`` loads instrumentors in the
order ``importlib.metadata.entry_points`` returns them, which is ``sys.path``
order and, within one directory such as site-packages, the order
``os.listdir`` returns (file-system dependent: that is why the startup crash
depended on where the service was started). ``overlay(NAME)`` installs one
distribution again into its own directory (``pip install --no-deps
--target``); put first on ``PYTHONPATH``, its entry points come first,
deterministically, and its modules are imported from there.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTRUMENTATION = ROOT / "instrumented-service" / "instrumentation"
CACHE = ROOT / "build" / "user-venv"

#: What a user of OpenTelemetry typically has next to us (opentelemetry-bootstrap gives
#: them the grpc instrumentation), at the versions the project's own venv uses, plus
#: grpcio's standard health and reflection services (services nobody here wrote).
PACKAGES = (
    "opentelemetry-distro==0.66b2",
    "opentelemetry-exporter-otlp-proto-grpc==1.45.2",
    "opentelemetry-instrumentation-grpc==0.66b2",
    "grpcio-health-checking==1.85.1",
    "grpcio-reflection==1.85.1",
)
#: Distributions ``overlay`` can put first.
OVERLAYS = {
    "grpc_overhead": "grpc-overhead-instrumentation",
    "official": "opentelemetry-instrumentation-grpc==0.66b2",
}


def key() -> str:
    """Hash of everything the venv is built from."""
    digest = hashlib.sha256()
    for path in _sources():
        digest.update(str(path.relative_to(INSTRUMENTATION)).encode())
        digest.update(path.read_bytes())
    digest.update("\n".join(PACKAGES).encode())
    digest.update(sys.version.encode())
    return digest.hexdigest()[:16]


def _sources() -> list[Path]:
    """The files the distribution is built from (no build output, no caches)."""
    found = [INSTRUMENTATION / "pyproject.toml", INSTRUMENTATION / "README.md"]
    found += (INSTRUMENTATION / "src").rglob("*.py")
    return sorted(path for path in found if "__pycache__" not in path.parts)


def location() -> Path:
    return CACHE / key()


def python() -> Path:
    return location() / "venv" / "bin" / "python"


def overlay(name: str) -> Path:
    """The directory holding only ``OVERLAYS[name]`` (put it first on PYTHONPATH)."""
    return location() / f"first-{name}"


def ensure() -> Path:
    """The venv's directory, built now if this key has none yet."""
    where = location()
    done = where / ".complete"
    if done.exists():
        return where
    where.mkdir(parents=True, exist_ok=True)
    venv = where / "venv"
    _run([sys.executable, "-m", "venv", "--clear", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    with tempfile.TemporaryDirectory() as scratch:
        # Build the wheel from a copy, so the worktree gets no build/ or egg-info.
        source, wheels = Path(scratch) / "source", Path(scratch) / "wheels"
        for path in _sources():
            copy = source / path.relative_to(INSTRUMENTATION)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(path.read_bytes())
        _run([*pip, "wheel", "--no-deps", "-w", str(wheels), str(source)], cwd=scratch)
        [wheel] = wheels.glob("*.whl")
        _run([*pip, "install", str(wheel), *PACKAGES], cwd=scratch)
        for name, requirement in OVERLAYS.items():
            target = where / f"first-{name}"
            spec = str(wheel) if name == "grpc_overhead" else requirement
            _run([*pip, "install", "--no-deps", "--target", str(target), spec], cwd=scratch)
    done.write_text(key() + "\n")
    for old in CACHE.iterdir():  # keep only the current venv
        if old != where and (old / ".complete").exists():
            subprocess.run(["rm", "-rf", str(old)], check=False)
    return where


def _run(command: list[str], cwd: str | Path | None = None) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")


if __name__ == "__main__":
    print(ensure())
