"""Who owns a chDB data directory: the lock a second process runs into, read before it does.

A chDB data directory belongs to one process: the engine holds an exclusive
``flock`` on ``DIR/status`` and writes its PID there. Reading that lock
without starting an engine lets every command say who holds the store (and
``demo`` check it before starting anything); ``ChdbStore`` asks it before
connecting, so callers only ever see ``StoreLocked``, never this module.
"""

from __future__ import annotations

import errno
import fcntl
import os

from grpc_overhead.analyzer.errors import StoreLocked
from grpc_overhead.analyzer.store.clickhouse_errors import split_clickhouse_error


def check_free(directory: str | os.PathLike[str]) -> None:
    """Raise ``StoreLocked`` naming the holder when another process owns ``directory``.

    This process's own engine does not count: a second connection to it is fine.
    """
    path = os.path.abspath(os.fspath(directory))
    holder = lock_holder(path)
    if holder is None or holder[0] == os.getpid():
        return
    pid, started = holder
    raise StoreLocked(locked_message(path, pid, started, ""), location=path, holder_pid=pid)


def lock_holder(directory: str) -> tuple[int | None, str] | None:
    """(pid, started-at) of the process holding ``directory``, or None if free.

    ClickHouse keeps an exclusive ``flock`` on ``DIR/status`` for as long as it
    owns the directory and writes its PID into the file.
    """
    status = os.path.join(directory, "status")
    try:
        fd = os.open(status, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return None
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        content = os.read(fd, 4096).decode("utf-8", "replace")
    finally:
        os.close(fd)
    pid: int | None = None
    started = ""
    for line in content.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "PID" and value.strip().isdigit():
            pid = int(value.strip())
        elif key.strip() == "Started at":
            started = value.strip()
    return pid, started


def locked_message(directory: str, pid: int | None, started: str, engine_output: str) -> str:
    engine_line = next(
        (line.strip() for line in engine_output.splitlines() if "Cannot lock file" in line),
        f"Cannot lock file {os.path.join(directory, 'status')}",
    )
    _, engine_line = split_clickhouse_error(engine_line)
    if pid is not None:
        holder = f"process {pid}"
        command = _command_line(pid)
        if command:
            holder += f" ({command})"
        if started:
            holder += f", running since {started}"
    else:
        holder = "another process"
    return (
        f"store {directory} is in use by {holder}.\n"
        f"  chDB: {engine_line}\n"
        "A chDB store directory is owned by one process at a time. While "
        "`grpc-overhead serve` owns it with its HTTP interface on (the default; not "
        "--no-http), report, sql and app read through that serve; this process does "
        "not offer one. Stop it and retry, or pass another --store DIR."
    )


def _command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            parts = handle.read().split(b"\0")
    except OSError:
        return ""
    words = [part.decode("utf-8", "replace") for part in parts if part]
    text = " ".join(words)
    return text if len(text) <= 120 else text[:117] + "..."
