"""The program ends as the interpreter would, then skips chDB's own teardown (``cli.run``).

chDB 4.4 now and then crashes in its C++ exit (SIGSEGV after "The ShutdownTablesThreadPool
is not initialized"), after a serve had stopped cleanly. The program therefore leaves with
``os._exit`` once a command that loaded chDB has returned: these tests hold it to what a
normal exit does first (other threads joined, ``atexit`` handlers run, output flushed, the
command's exit code kept) and to a real serve and ``sql`` on one store, many times in a row.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grpc_overhead.processes import offline_env
from harness.browser import start_serve_http

pytestmark = pytest.mark.e2e

GRPC_OVERHEAD = (sys.executable, "-m", "grpc_overhead")

#: A program that loads chDB, leaves a thread, an idle thread pool and an ``atexit``
#: handler behind, and then runs the command line it is given as ``grpc-overhead`` does.
PROGRAM = textwrap.dedent(
    """
    import atexit, sys, threading, time
    from concurrent.futures import ThreadPoolExecutor
    import chdb
    from grpc_overhead.cli import run

    def late():
        time.sleep(0.5)
        print("thread finished", flush=True)

    threading.Thread(target=late).start()
    pool = ThreadPoolExecutor(1)  # kept: its idle worker waits for more work (Streamlit's)
    pool.submit(int).result()
    atexit.register(lambda: print("atexit ran"))
    print("buffered line", end="")  # no newline, no flush: the exit must write it
    sys.argv = ["grpc-overhead", *sys.argv[1:]]
    run()
    """
)


def run_program(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, *args],
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(("args", "code"), [(["--version"], 0), (["no-such-command"], 2)])
def test_a_program_that_loaded_chdb_ends_as_the_interpreter_would(args: list[str], code: int):
    done = run_program(*args)
    assert done.returncode == code, done.stderr
    # The thread is joined before the handlers run, as at a normal exit; nothing is lost.
    assert done.stdout.endswith("thread finished\natexit ran\n"), done.stdout
    assert done.stdout.startswith("buffered line"), done.stdout
    assert "global_context" not in done.stderr


def test_serve_and_sql_stop_cleanly_many_times_on_one_store(tmp_path: Path):
    store = tmp_path / "store"
    env = offline_env()
    for attempt in range(6):
        serve = start_serve_http(store, env, "--no-http")
        assert serve.stop() == 0, serve.text()
        assert "intake stopped:" in serve.text()
        assert "global_context" not in serve.text()
        query = f"SELECT {attempt} AS attempt"
        done = subprocess.run(
            [*GRPC_OVERHEAD, "sql", "--store", str(store), "--format", "csv", query],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (done.returncode, done.stdout.split()[-1]) == (0, str(attempt)), done.stderr
        assert "global_context" not in done.stderr
