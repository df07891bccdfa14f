"""A real toxiproxy server, driven over its HTTP API, for one-way latency and bandwidth.

toxiproxy is a TCP proxy: bytes from the client to the server flow "upstream",
bytes back "downstream", and a *toxic* acts on one of the two streams only, so
the request path and the response path can be slowed independently. The
caller (the ground-truth harness, ``experiment``'s bandwidth-limited cells)
starts its own server on a free loopback port (never the default
:8474 a developer may be running) and stops it in ``__exit__``, which also
drops every proxy it made; proxy names carry a random suffix so a leftover
server can never collide with a new run.

Toxics used (toxiproxy v2.5.0 semantics, read from its sources):

* ``latency`` (ms, integer): every chunk read is forwarded ``latency`` after it
  was read; chunks keep their order, so a message is delayed by exactly that.
* ``bandwidth`` (KB/s, 1 KB = 1000 bytes): each chunk (<= 32 KiB as read) is
  held for ``len / rate`` after the previous one, store-and-forward.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpc_overhead.processes import free_port

ROOT = Path(__file__).resolve().parents[4]
#: Built by ``make toxiproxy`` into the checkout (git-ignored); else from PATH.
BINARY = ROOT / "tools" / "bin" / "toxiproxy-server"


def find_binary() -> Path:
    """The checkout's toxiproxy-server, else one on PATH (ToxiproxyError if neither)."""
    if BINARY.is_file():
        return BINARY
    found = shutil.which("toxiproxy-server")
    if found:
        return Path(found)
    raise ToxiproxyError(f"{BINARY} is missing: run `make toxiproxy` first")


UPSTREAM, DOWNSTREAM = "upstream", "downstream"  # client -> server, server -> client


class ToxiproxyError(RuntimeError):
    """toxiproxy is missing, did not start, or refused an API call."""


@dataclass(frozen=True)
class Proxy:
    name: str
    listen: str  # host:port clients connect to
    upstream: str  # host:port of the real server


class Toxiproxy:
    """``with Toxiproxy() as toxiproxy: proxy = toxiproxy.proxy("127.0.0.1:50051")``."""

    def __init__(self, binary: Path | None = None) -> None:
        binary = binary or find_binary()
        if not binary.is_file():
            raise ToxiproxyError(f"{binary} is missing: run `make toxiproxy` first")
        self.binary = binary
        self.api_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Toxiproxy:
        self.process = subprocess.Popen(
            [str(self.binary), "-host", "127.0.0.1", "-port", str(self.api_port)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            self._wait_ready(15.0)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ToxiproxyError(f"toxiproxy exited with {self.process.returncode}")
            try:
                self._request("GET", "/proxies")
                return
            except (OSError, ToxiproxyError):
                time.sleep(0.05)
        raise ToxiproxyError(f"toxiproxy's API did not answer within {timeout_s:g} s")

    def __exit__(self, *exc_info: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.api_port}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as error:
            raise ToxiproxyError(
                f"toxiproxy {method} {path} -> {error.code}: {error.read().decode()}"
            ) from error
        return json.loads(text) if text.strip() else None

    def proxy(self, upstream: str) -> Proxy:
        """A new proxy to ``upstream`` on a free loopback port, without toxics."""
        name = f"gt-{uuid.uuid4().hex[:10]}"
        listen = f"127.0.0.1:{free_port()}"
        body = {"name": name, "listen": listen, "upstream": upstream, "enabled": True}
        created = self._request("POST", "/proxies", body)
        return Proxy(name, created.get("listen", listen), upstream)

    def add_toxic(self, proxy: Proxy, kind: str, stream: str, **attributes: int) -> str:
        """Add a ``kind`` toxic on ``stream``; its name (for ``remove_toxic``)."""
        name = f"{kind}-{stream}"
        body = {
            "name": name,
            "type": kind,
            "stream": stream,
            "toxicity": 1.0,
            "attributes": attributes,
        }
        self._request("POST", f"/proxies/{proxy.name}/toxics", body)
        return name

    def clear_toxics(self, proxy: Proxy) -> None:
        for toxic in self._request("GET", f"/proxies/{proxy.name}/toxics") or []:
            self._request("DELETE", f"/proxies/{proxy.name}/toxics/{toxic['name']}")

    def set_toxics(self, proxy: Proxy, toxics: dict[str, dict[str, int]]) -> None:
        """Exactly these toxics, keyed ``"kind:stream"``: {"latency:upstream": {"latency": 5}}."""
        self.clear_toxics(proxy)
        for key, attributes in toxics.items():
            kind, stream = key.split(":")
            self.add_toxic(proxy, kind, stream, **attributes)
