"""``harness/suite.py``: ``make test``'s workers run niced beside the timing tests, then not.

The suite cannot run itself, so these hold its two ways of lowering and restoring the
workers' priority to real processes: a session's scheduling group (where the kernel has
one) and every thread of a process tree. Each tree's root forks itself away from the
test (its parent exits): inside ``make test`` this test runs on a worker whose
descendants the runner itself nices twice a second, and a tree among them would be
niced under the test's feet.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from harness import suite

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
#: What these machines give (make test installs Debian packages, so it runs as root).
ROOT_NEEDED = "run as root: lowering a nice again and running as another user need it"
AUTOGROUP_NEEDED = "kernel.sched_autogroup_enabled is not 1 (sysctl): no group per session"

#: A process with a second thread and a child of its own (which has one too), all asleep;
#: ``session``: the child in a session of its own, as the collectors the tests start. The
#: root forks first and its parent exits: the tree is no longer the caller's descendant.
#: It prints "ready PID" with its root's pid.
TREE = """
import os, subprocess, sys, threading, time
if sys.argv[1] == "parent" and os.fork():
    os._exit(0)
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
if sys.argv[1] == "parent":
    child = subprocess.Popen(
        [sys.executable, "-c", sys.argv[2], "child", ""],
        start_new_session=sys.argv[3] == "session",
    )
print("ready", os.getpid(), flush=True)
time.sleep(60)
"""


def start_tree(child_session: bool = False, **popen: object) -> int:
    """The pid of a new ``TREE``'s root, once its four threads run."""
    launcher = subprocess.Popen(
        [sys.executable, "-c", TREE, "parent", TREE, "session" if child_session else ""],
        stdout=subprocess.PIPE,
        text=True,
        **popen,  # type: ignore[arg-type]
    )
    assert launcher.stdout is not None
    word, pid = launcher.stdout.readline().split()
    assert word == "ready"
    launcher.wait()
    root = int(pid)
    assert root not in suite._descendants(os.getpid())
    deadline = time.monotonic() + 30
    while len(thread_nices(root)) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)  # the child and its thread start after the root's line
    return root


def stop_tree(root: int) -> None:
    for pid in reversed(suite._descendants(root)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def thread_nices(root: int) -> list[int]:
    """The nice of every thread of ``root`` and its descendants."""
    return [
        os.getpriority(os.PRIO_PROCESS, int(task.name))
        for pid in suite._descendants(root)
        for task in Path(f"/proc/{pid}/task").glob("*")
    ]


def test_every_thread_of_a_tree_is_niced_and_back_keeping_its_own_order():
    # From nice 0 (make test runs this niced itself, while its timing part runs).
    assert os.geteuid() == 0, ROOT_NEEDED
    base = 0

    def from_base() -> None:
        os.setpriority(os.PRIO_PROCESS, 0, base)
        suite._lower_priority()

    root_pid = start_tree(preexec_fn=from_base)
    try:
        nices = thread_nices(root_pid)
        assert len(nices) == 4  # two processes, two threads each
        assert set(nices) == {base + suite.WORKERS_NICE}
        # A test's own process behind the others (the starved load generator's nice 15).
        child = suite._descendants(root_pid)[1]
        os.setpriority(os.PRIO_PROCESS, child, base + suite.WORKERS_NICE + 5)
        suite._unnice_tree(root_pid)
        back = {
            int(task.name): os.getpriority(os.PRIO_PROCESS, int(task.name))
            for pid in suite._descendants(root_pid)
            for task in Path(f"/proc/{pid}/task").glob("*")
        }
        assert back.pop(child) == base + 5
        assert set(back.values()) == {base}
    finally:
        stop_tree(root_pid)


@pytest.mark.parametrize("child_session", [False, True], ids=["one-session", "child-session"])
def test_the_sessions_of_a_tree_are_niced_as_groups_and_back(child_session: bool):
    assert suite._autogroup_enabled(), AUTOGROUP_NEEDED
    root_pid = start_tree(child_session, start_new_session=True)
    try:
        groups = [Path(f"/proc/{pid}/autogroup") for pid in suite._descendants(root_pid)]
        names = {group.read_text().split()[0] for group in groups}
        assert len(names) == (2 if child_session else 1)
        assert Path("/proc/self/autogroup").read_text().split()[0] not in names  # not ours
        suite._nice_groups(root_pid, suite.WORKERS_NICE)
        assert {group.read_text().split()[-1] for group in groups} == {str(suite.WORKERS_NICE)}
        suite._nice_groups(root_pid, 0)
        assert {group.read_text().split()[-1] for group in groups} == {"0"}
    finally:
        stop_tree(root_pid)


#: Run as another user than root: a tree whose child has a session of its own, its two
#: groups niced to 10 and back through ``suite._nice_groups``, each group's nice printed.
AS_A_USER = """
import subprocess, sys, time
sys.path.insert(0, sys.argv[1])
import suite
launcher = subprocess.Popen(
    [sys.executable, "-c", sys.argv[2], "parent", sys.argv[2], "session"],
    stdout=subprocess.PIPE, text=True, start_new_session=True,
)
word, pid = launcher.stdout.readline().split()
launcher.wait()
root = int(pid)
while len(suite._descendants(root)) < 2:
    time.sleep(0.05)
def nices():
    return sorted(
        open(f"/proc/{pid}/autogroup").read().split()[-1]
        for pid in suite._descendants(root)
    )
try:
    suite._nice_groups(root, 10)
    print(*nices())
    suite._nice_groups(root, 0)
    print(*nices())
finally:
    for pid in reversed(suite._descendants(root)):
        subprocess.run(["kill", "-9", str(pid)])
"""


def test_a_user_without_privileges_nices_groups_one_write_per_tenth_of_a_second():
    """Without ``CAP_SYS_ADMIN`` the kernel refuses a second group write within 0.1 s."""
    assert os.geteuid() == 0, ROOT_NEEDED
    assert suite._autogroup_enabled(), AUTOGROUP_NEEDED
    python = "/usr/bin/python3"  # ours may sit where another user cannot read it
    assert os.access(python, os.X_OK), f"no {python} (Debian's python3) to run as nobody"
    with tempfile.TemporaryDirectory() as directory:
        os.chmod(directory, 0o755)
        shutil.copy(ROOT / "harness" / "suite.py", directory)
        done = subprocess.run(
            [python, "-c", AS_A_USER, directory, TREE],
            user=65534,  # nobody
            group=65534,
            extra_groups=[],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["10 10", "0 0"]


def test_a_bad_number_of_workers_is_a_usage_error():
    done = subprocess.run(
        [sys.executable, "-m", "harness.suite", "two"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "usage: python -m harness.suite WORKERS (0: one process)\n"
