"""How to type ``grpc-overhead`` from where the user is, for the commands we print as hints.

``make demo`` runs ``.venv/bin/grpc-overhead`` without activating the venv, so a
hint that says ``grpc-overhead report`` fails with "command not found" when
pasted into the same shell. The hint names the command the way it works from
the user's directory: the bare name when ``PATH`` finds this very installation,
else the console script's path (relative when it lies below the directory),
else ``python -m grpc_overhead`` with this interpreter.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

NAME = "grpc-overhead"


def command(cwd: Path | None = None, path: str | None = None) -> str:
    """The words that run this installation's ``grpc-overhead`` from ``cwd`` (default: the
    current directory) with ``path`` as ``PATH`` (default: the environment's)."""
    cwd = Path.cwd() if cwd is None else cwd
    path = os.environ.get("PATH", "") if path is None else path
    script = _script()
    if script is None:
        return f"{_shown(Path(sys.executable), cwd)} -m grpc_overhead"
    found = shutil.which(NAME, path=path)
    if found and _same(Path(found), script):
        return NAME
    return _shown(script, cwd)


def _script() -> Path | None:
    """This installation's console script: the one running, or the one beside the interpreter."""
    running = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    for candidate in (running, Path(sys.executable).parent / NAME):
        if candidate is not None and candidate.name == NAME and candidate.is_file():
            return candidate.absolute()
    return None


def _same(one: Path, other: Path) -> bool:
    try:
        return one.samefile(other)
    except OSError:
        return False


def _shown(file: Path, cwd: Path) -> str:
    """``file`` relative to ``cwd`` when below it (``.venv/bin/grpc-overhead``), else absolute;
    quoted for a shell when it needs it."""
    file = file.absolute()
    try:
        relative = file.relative_to(cwd.absolute())
    except ValueError:
        return shlex.quote(str(file))
    text = str(relative)
    return shlex.quote(text if "/" in text else f"./{text}")
