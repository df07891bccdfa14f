"""Run the Streamlit app inside this process, next to the store it reads.

Why in-process: a chDB data directory belongs to one process, so ``serve``,
``app`` and ``demo`` open the store once, register it (``runtime.register``)
and run Streamlit's own server here; every page script then runs in a thread
of this process and reads that same store object.

Streamlit 1.67 has no public "start a server in my process and give control
back" API (``st.App.run`` owns the loop, the signals and the process), so this
module does what ``streamlit run`` does (``streamlit.web.bootstrap.run``):
config options from "flags", ``Server(main_script)``, ``await server.start()``,
``await server.stopped``. The asyncio loop runs in the calling (main) thread;
the caller's own loop (``serve``'s settle loop, ``demo``'s supervision) runs in
a worker thread with a ``threading.Event`` that says when to stop. Either side
ending stops the other.

Only one Streamlit server can run per process (its ``Runtime`` is a singleton).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpc_overhead.analyzer.tls import Tls, pinned_context
from grpc_overhead.app import runtime
from grpc_overhead.app.runtime import Served

#: The Streamlit entry script (``st.navigation`` over the pages).
MAIN_SCRIPT = Path(__file__).resolve().parent / "main.py"
DEFAULT_PORT = 8501
HEALTH_PATH = "/_stcore/health"
#: Longest the server may take to answer its health endpoint after binding.
READY_TIMEOUT_S = 60.0

Background = Callable[[threading.Event], None]


class AppServerError(RuntimeError):
    """The app cannot start (port taken, bad address, Streamlit failed): a user-facing message."""


@dataclass(frozen=True)
class AppAddress:
    host: str
    port: int
    https: bool = False

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.host in ("0.0.0.0", "::"):
            host = "127.0.0.1"
        return f"{'https' if self.https else 'http'}://{host}:{self.port}"


def check_port(host: str, port: int, *, option: str = "--app-port") -> None:
    """Fail early, with what to do, when ``host:port`` cannot be bound.

    Streamlit itself calls ``sys.exit(1)`` with a log line when an explicitly set
    port is taken; checking first turns that into one clear message.
    """
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise AppServerError(
                    f"port {port} on {host} is already in use (another app or serve?): "
                    f"pass {option} 0 to pick a free port, or {option} N"
                ) from None
            raise AppServerError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def wait_healthy(
    url: str,
    timeout_s: float = READY_TIMEOUT_S,
    alive: Callable[[], bool] = lambda: True,
    certificate: str | None = None,
) -> None:
    """Poll ``url + /_stcore/health`` until it answers 200 (Streamlit ready for sessions);
    over https trusting exactly ``certificate`` (the app's own: it is asking itself)."""
    context = pinned_context(certificate) if certificate is not None else None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive():
            raise AppServerError("the app server stopped while starting")
        try:
            with urllib.request.urlopen(url + HEALTH_PATH, timeout=2, context=context) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.05)
    raise AppServerError(f"the app did not answer {url}{HEALTH_PATH} within {timeout_s:g} s")


def _configure(host: str, port: int, tls: Tls | None = None, secrets: Path | None = None) -> None:
    """Streamlit options as ``streamlit run --server.port ...`` flags would set them; with
    ``tls``, Streamlit's own HTTPS (``server.sslCertFile`` / ``server.sslKeyFile``); with
    ``secrets``, the file its ``st.login`` reads (``oidc``) and no other."""
    from streamlit.web import bootstrap

    https = (
        {}
        if tls is None
        else {
            "server_sslCertFile": tls.certificate_path,
            "server_sslKeyFile": tls.private_key_path,
        }
    )
    login = {} if secrets is None else {"secrets_files": [str(secrets)]}
    bootstrap.load_config_options(
        {
            **https,
            **login,
            "server_address": host,
            "server_port": port,
            "server_headless": True,
            # No reruns on file changes: the app is a product here, not a notebook.
            "server_fileWatcherType": "none",
            "server_runOnSave": False,
            # Streamlit collects every generation after each script run, fragments too: a
            # full collection of serve's heap (the intake's and the engine's objects) took
            # ~65 ms while holding the GIL, so each look of the auto-refresh ticker cost
            # that much and stalled the intake beside it (a minimal app ticking every 0.1 s:
            # 0.60 of a core with it, 0.07 without). Python's own thresholds still collect.
            "runner_postScriptGC": False,
            "browser_gatherUsageStats": False,
            "global_developmentMode": False,
            "client_toolbarMode": "viewer",
            "logger_level": "warning",
        }
    )


class AppServer:
    """Streamlit serving ``main_script`` for ``served``, in this process.

    ``run()`` blocks until ``stop()`` is called, a signal (SIGINT/SIGTERM, when
    run in the main thread) arrives, ``stop_event`` is set, or ``background``
    returns. ``on_ready(url)`` is called once the health endpoint answers.
    """

    def __init__(
        self,
        served: Served,
        *,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        main_script: Path = MAIN_SCRIPT,
        option: str = "--app-port",
        tls: Tls | None = None,
    ) -> None:
        self.served = served
        self.tls = tls
        self.host = host
        self.port = port
        self.main_script = main_script
        self.option = option
        self.address: AppAddress | None = None
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None
        self._failure: BaseException | None = None
        self._stopping = False
        self._stopping_lock = threading.Lock()

    @property
    def url(self) -> str:
        return self.address.url if self.address else ""

    def stop(self) -> None:
        """Ask the server to stop (thread- and signal-safe); ``run()`` then returns."""
        self._stop.set()
        loop, server = self._loop, self._server
        if loop is None or server is None or loop.is_closed():
            return
        with self._stopping_lock:
            if self._stopping:
                return
            self._stopping = True
        try:
            loop.call_soon_threadsafe(_stop_server, server)
        except RuntimeError:
            pass  # the loop already ended

    def run(
        self,
        *,
        background: Background | None = None,
        on_ready: Callable[[str], None] | None = None,
        stop_event: threading.Event | None = None,
    ) -> None:
        """Serve until stopped. Raises AppServerError when the app cannot start, and
        re-raises what ``background`` raised (after the server stopped)."""
        if not self.main_script.is_file():
            raise AppServerError(f"the app's entry script {self.main_script} is missing")
        check_port(self.host, self.port, option=self.option)
        if stop_event is not None:
            self._stop = stop_event
        runtime.register(self.served)
        previous = self._install_signals()
        try:
            oidc = self.served.oidc
            _configure(self.host, self.port, self.tls, oidc.path if oidc else None)
            asyncio.run(self._serve(background, on_ready))
        except SystemExit as exc:  # Streamlit exits on some start-up failures
            raise AppServerError(f"the app server could not start (exit {exc.code})") from None
        finally:
            self._restore_signals(previous)
            runtime.unregister()
        if self._failure is not None:
            raise self._failure

    async def _serve(
        self, background: Background | None, on_ready: Callable[[str], None] | None
    ) -> None:
        from streamlit import config
        from streamlit.runtime.pages_manager import PagesManager
        from streamlit.web import bootstrap
        from streamlit.web.server import Server

        # app/pages/ sits next to main.py, which makes Streamlit fall back to its old
        # "pages directory" mode (it runs the pages itself and never runs main.py, so
        # st.navigation's titles, icons and URLs are lost). main.py uses st.navigation;
        # st.navigation sets this same flag, but only once main.py has run.
        PagesManager.uses_pages_directory = False
        server = Server(str(self.main_script), is_hello=False)
        try:
            await server.start()
        except OSError as exc:
            raise AppServerError(
                f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}"
            ) from None
        self._server, self._loop = server, asyncio.get_running_loop()
        bootstrap.prepare_streamlit_environment(str(self.main_script))
        self.address = AppAddress(
            self.host, int(config.get_option("server.port")), https=self.tls is not None
        )
        if self._stop.is_set():
            self.stop()
        worker = threading.Thread(
            target=self._supervise, args=(background, on_ready), name="app-supervisor", daemon=True
        )
        worker.start()
        await server.stopped
        self._stop.set()
        # The caller's loop sees the event and returns; give it time to finish its work.
        await asyncio.get_running_loop().run_in_executor(None, worker.join, 60.0)

    def _supervise(
        self, background: Background | None, on_ready: Callable[[str], None] | None
    ) -> None:
        """Wait for health, announce, run the caller's loop; stop the server when it ends."""
        try:
            certificate = self.tls.certificate_path if self.tls else None
            wait_healthy(self.url, alive=lambda: not self._stop.is_set(), certificate=certificate)
            if on_ready is not None:
                on_ready(self.url)
            if background is not None:
                background(self._stop)
            else:
                self._stop.wait()
        except AppServerError as exc:
            if not self._stop.is_set():
                self._failure = exc
        except BaseException as exc:
            self._failure = exc
        finally:
            self.stop()

    def _install_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}  # embedded (tests, another program): the caller stops us

        def handle(signum: int, frame: object) -> None:
            self.stop()

        previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handle)
        return previous

    @staticmethod
    def _restore_signals(previous: dict[int, Any]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop_server(server: Any) -> None:
    """Streamlit's ``Server.stop``, even when nobody reads our output any more.

    It prints "Stopping..." first; with stdout a pipe whose reader is gone
    (``serve | tee log`` and Ctrl-C, which ends tee too) that print raises
    BrokenPipeError, the server is never told to stop and the process hangs
    until killed. Output nobody reads goes to /dev/null instead, and it stops.
    """
    try:
        server.stop()
    except OSError:
        _detach_output()
        server.stop()


def _detach_output() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                os.dup2(devnull, stream.fileno())
    finally:
        os.close(devnull)


def has_display() -> bool:
    """True where a browser window can appear (a desktop session, or macOS / Windows)."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def open_browser(url: str) -> bool:
    """Open ``url`` in the user's browser when there is a display; True if one was asked to."""
    if not has_display():
        return False
    import webbrowser

    try:
        return webbrowser.open(url, new=2)
    except webbrowser.Error:
        return False
