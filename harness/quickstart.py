"""Run the README's quickstart blocks verbatim, the way a new user pastes them.

The README marks each runnable block with ``<!-- quickstart: NAME -->`` right
before a fenced ``sh`` block; ``block(NAME)`` returns its text unchanged and
``run_block`` runs it with ``bash -e`` in a scratch directory that looks like a
checkout (``.venv``, ``instrumented-service`` and ``examples`` are symlinks to
this one), so its relative paths mean what they say.

Isolation: the blocks use the default ports (OTLP 4317 and 4327, the app on
8501, services on 50051/50061), which is the point: defaults that meet. On a
machine shared with other runs those ports may be taken, so a block runs in
a network namespace of its own (``unshare --net``, loopback only) where they
are always free and nothing from outside can send into its store. Where
namespaces are not allowed, the block runs on the host after checking that
its ports are free (naming whoever holds one otherwise).

The user's virtualenv: "Instrument your own service" is run in your service's
environment. ``user_venv(install_line)`` builds one by running that block's own
``pip install`` line in a fresh venv, cached under ``build/quickstart-venv/KEY``
(git-ignored; ``KEY`` hashes the line, the instrumentation's files and the
Python version, so an edit to either builds a new one). The block's install
line then runs again, for real, inside the namespace, where no registry is
reachable: pip is pointed at a wheelhouse of the build requirements (its own
documented ``PIP_NO_INDEX``/``PIP_FIND_LINKS`` variables) and finds everything
else already installed.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from grpc_overhead.processes import child_env, holder, port_is_free

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: Where the blocks are: the README's own, then the longer guides' (the team's).
DOCUMENTS = (README, ROOT / "docs" / "team.md")
INSTRUMENTATION = ROOT / "instrumented-service" / "instrumentation"
CACHE = ROOT / "build" / "quickstart-venv"
#: What a block may use of the checkout, relative to its root.
CHECKOUT_LINKS = (".venv", "instrumented-service", "examples")
#: The ports the blocks listen on (checked free when no namespace is available).
DEFAULT_PORTS = (4317, 4327, 8501, 50051, 50061)


def block(name: str) -> str:
    """The ``sh`` block after ``<!-- quickstart: NAME -->`` in the README (or a guide of
    ``DOCUMENTS``), verbatim."""
    text = "\n".join(document.read_text(encoding="utf-8") for document in DOCUMENTS)
    found = re.search(
        rf"<!-- quickstart: {re.escape(name)} -->\s*```sh\n(.*?)```", text, flags=re.DOTALL
    )
    if found is None:
        raise LookupError(f"no quickstart block {name!r} in README.md or docs/team.md")
    return found.group(1)


def install_line(script: str) -> str:
    """The block's ``pip install`` line."""
    [line] = [line for line in script.splitlines() if line.startswith("pip install ")]
    return line


def checkout_like(directory: Path) -> Path:
    """``directory`` with the checkout's parts a block uses, as symlinks."""
    for name in CHECKOUT_LINKS:
        (directory / name).symlink_to(ROOT / name)
    return directory


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without OpenTelemetry or grpc-overhead settings: defaults only."""
    env = {
        name: value
        for name, value in child_env().items()
        if not name.startswith("GRPC_OVERHEAD_")
        and name not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")
    }
    env.update(extra)
    return env


@dataclass(frozen=True)
class UserVenv:
    """A cached venv built by the block's install line, and the wheelhouse pip needs offline."""

    path: Path
    wheelhouse: Path

    def env(self) -> dict[str, str]:
        """The block's environment: this venv activated, pip offline on the wheelhouse."""
        return clean_env(
            VIRTUAL_ENV=str(self.path),
            PATH=f"{self.path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            PIP_NO_INDEX="1",
            PIP_FIND_LINKS=str(self.wheelhouse),
            PIP_DISABLE_PIP_VERSION_CHECK="1",
        )


def user_venv(line: str) -> UserVenv:
    """The venv ``line`` (``pip install ...`` run from the checkout's root) builds, cached."""
    _clear_build_output()
    where = CACHE / _key(line)
    venv, wheelhouse = where / "venv", where / "wheelhouse"
    if not (where / ".complete").exists():
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
        _run([sys.executable, "-m", "venv", str(venv)], ROOT)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
        _run([*pip, *line.split()[1:]], ROOT)  # the README's own line, by this venv's pip
        _run([*pip, "download", "-d", str(wheelhouse), *_build_requirements()], ROOT)
        (where / ".complete").write_text(line + "\n")
        for old in CACHE.iterdir():  # keep only the current one
            if old != where:
                shutil.rmtree(old, ignore_errors=True)
    return UserVenv(venv, wheelhouse)


def _clear_build_output() -> None:
    """setuptools builds in the source tree and never deletes a stale ``build/lib`` file,
    which would then ship in the wheel: the block's install must see only today's sources."""
    shutil.rmtree(INSTRUMENTATION / "build", ignore_errors=True)


def _key(line: str) -> str:
    digest = hashlib.sha256(line.encode())
    files = [INSTRUMENTATION / "pyproject.toml", *(INSTRUMENTATION / "src").rglob("*.py")]
    for path in sorted(p for p in files if "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(INSTRUMENTATION)).encode())
        digest.update(path.read_bytes())
    digest.update(sys.version.encode())
    return digest.hexdigest()[:16]


def _build_requirements() -> list[str]:
    config = tomllib.loads((INSTRUMENTATION / "pyproject.toml").read_text(encoding="utf-8"))
    return list(config["build-system"]["requires"])


def _run(command: list[str], cwd: Path) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")


def _require_free(ports: tuple[int, ...]) -> None:
    taken = [
        f"{port} ({holder(port) or 'unknown process'})" for port in ports if not port_is_free(port)
    ]
    if taken:
        raise RuntimeError(
            "no network namespace allowed here (unshare --net), and the quickstart's default "
            f"ports are taken: {', '.join(taken)}"
        )


def namespaces_allowed() -> bool:
    """Whether this process may run a block in a network namespace of its own."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=30)
    return probe.returncode == 0


@dataclass(frozen=True)
class BlockRun:
    returncode: int
    output: str


def run_block(
    script: str,
    cwd: Path,
    env: dict[str, str],
    timeout_s: float,
    ports: tuple[int, ...] = DEFAULT_PORTS,
) -> BlockRun:
    """``bash -e`` on ``script`` in ``cwd``: in its own network namespace where allowed."""
    _clear_build_output()
    path = cwd / "quickstart-block.sh"
    path.write_text(script, encoding="utf-8")
    if namespaces_allowed():
        command = ["unshare", "--net", "bash", "-c", 'ip link set lo up && exec bash -e "$0"']
    else:
        _require_free(ports)
        command = ["bash", "-e"]
    log = cwd / "quickstart-block.log"  # a file: background jobs may outlive the script
    with open(log, "w", encoding="utf-8") as sink:
        process = subprocess.Popen(
            [*command, str(path)],
            cwd=cwd,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # background jobs share its group: one kill stops them all
        )
    timed_out = False
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        try:  # the script if it hangs, and anything it left running
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
    output = log.read_text(encoding="utf-8", errors="replace")
    if timed_out:
        output += f"\n[quickstart block killed after {timeout_s:.0f} s]"
    return BlockRun(process.returncode, output)
