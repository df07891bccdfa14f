"""What the process that owns a chDB store tells other processes: ``DIR/grpc-overhead-serve.json``.

A chDB directory belongs to one process (the engine's lock, ``lock``). While
``serve`` owns one it writes this file: its pid, intake, app URL and the URL
of its ClickHouse HTTP interface. A reader (``report``, ``sql``, ``app``, a
``streamlit run``) that finds the directory locked by that very pid reads the
store through that interface instead (``open_store``): the lock stays the
engine's, and the file only says where the owner answers.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass
from typing import Any

from grpc_overhead.analyzer.store.lock import lock_holder

SERVE_INFO_FILE = "grpc-overhead-serve.json"


@dataclass(frozen=True)
class ServeInfo:
    """What a running serve tells other commands about itself (the store's lock names the pid)."""

    pid: int
    intake: str
    app_url: str
    store: str
    #: Its ClickHouse HTTP interface ('' when off: ``serve --no-http``).
    http_url: str = ""
    #: Where it takes OTLP/HTTP traces ('' when it does not).
    otlp_http_url: str = ""
    #: Its TLS certificate file (PEM), which readers of an https ``http_url`` trust ('').
    certificate: str = ""


def write_serve_info(directory: str, info: ServeInfo) -> None:
    """Replace the file atomically (a reader never sees half of it); OSError if it cannot."""
    path = os.path.join(directory, SERVE_INFO_FILE)
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(asdict(info), handle)
    os.replace(path + ".tmp", path)


def remove_serve_info(directory: str) -> None:
    """Remove the file if this process wrote it."""
    info = read_serve_info(directory)
    if info is not None and info.pid == os.getpid():
        with contextlib.suppress(OSError):
            os.remove(os.path.join(directory, SERVE_INFO_FILE))


def read_serve_info(directory: str) -> ServeInfo | None:
    """The running serve's pid, intake, app and HTTP URLs for a store directory, if written."""
    try:
        with open(os.path.join(directory, SERVE_INFO_FILE), encoding="utf-8") as handle:
            data: Any = json.load(handle)
        return ServeInfo(
            int(data["pid"]),
            str(data["intake"]),
            str(data["app_url"]),
            str(data["store"]),
            str(data.get("http_url", "")),
            str(data.get("otlp_http_url", "")),
            str(data.get("certificate", "")),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def serving_owner(directory: str) -> ServeInfo | None:
    """The serve that holds ``directory`` (another process) and answers on HTTP, if any.

    Only when the engine's lock is held by the pid the file names: a file a
    killed serve left behind, or one of a serve without HTTP, gives None.
    """
    directory = os.path.abspath(directory)
    holder = lock_holder(directory)
    if holder is None or holder[0] is None or holder[0] == os.getpid():
        return None
    info = read_serve_info(directory)
    if info is None or info.pid != holder[0] or not info.http_url:
        return None
    return info
