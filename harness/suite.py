"""``python -m harness.suite WORKERS``: the two parts of ``make test``, side by side.

The suite has two parts (``docs/testing.md``): everything else on ``WORKERS`` pytest
workers, and the tests marked ``timing``, which judge real calls' timings and run one
after another in one process. Run one after the other, the timing part (5-6 minutes)
left most of a core idle: it sleeps in injected delays and waits for calls. Side by
side, the workers fill that core, but they must not take it from the timing part when it
wants it. So the workers run at a lower priority until the timing part ends, then at
the normal one:

- the workers start niced, and every thread of theirs is niced back after;
- where the kernel groups tasks by session (``kernel.sched_autogroup_enabled``, on
  these machines), nicing a thread does not reach across sessions, so the workers also
  get a session of their own and that session's group is niced, one write for every
  process in it, later ones included. The tests start
  some processes in sessions of their own (collectors, the demo's children, Chromium),
  and each such session is a group that weighs as much as the timing part's: twice a
  second the groups of all the workers' descendants are niced too.

Either way the timing part keeps the CPU it asks for, as it does beside two niced CPU
hogs at load 4. Lowering a thread's nice again needs root (``CAP_SYS_NICE``); without
it the workers stay niced, which only matters on a machine that something else keeps
busy. A group's nice goes back to 0 for anyone.

The timing part's output goes to ``test-artifacts/timing-tests.log`` and is printed
whole when it ends, so that the workers' progress stays readable. Ctrl-C stops both.
The exit code is nonzero if either part failed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

#: How much lower the workers run while the timing part runs (nice 10: a weight of 110
#: against 1,024, the share the niced CPU hogs of the load runs have).
WORKERS_NICE = 10
AUTOGROUP = Path("/proc/sys/kernel/sched_autogroup_enabled")
TIMING_LOG = Path("test-artifacts/timing-tests.log")
#: Writes of a group's nice tried before giving up (each refused one waits 0.11 s).
GROUP_WRITE_ATTEMPTS = 20


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m harness.suite WORKERS (0: one process)", file=sys.stderr)
        return 2
    workers = argv[0]
    pytest = str(Path(sys.executable).parent / "pytest")
    grouped = _autogroup_enabled()
    parallel = subprocess.Popen(
        [pytest, "-n", workers, "--dist", "loadfile", "-m", "not timing", "--durations=25"],
        start_new_session=grouped,  # a session of its own: its own group to nice
        # Niced as threads too: where the process sits in a cpu cgroup of its own (a
        # container), the kernel skips the session groups and weighs threads instead.
        preexec_fn=_lower_priority,
    )
    timing_ended = threading.Event()
    keeper = threading.Thread(
        target=_keep_groups_niced, args=(parallel.pid, timing_ended), daemon=True
    )
    try:
        if grouped:
            keeper.start()
        TIMING_LOG.parent.mkdir(parents=True, exist_ok=True)
        with TIMING_LOG.open("w") as log:
            timing = subprocess.run(
                [pytest, "-m", "timing", "--durations=10", "-p", "no:cacheprovider"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            ).returncode
        timing_ended.set()
        if grouped:
            keeper.join()  # its last round must not nice a group again after this one
            _nice_groups(parallel.pid, 0)
        _unnice_tree(parallel.pid)
        print(
            f"\n---- the timing tests ended (exit {timing}); their output "
            f"({TIMING_LOG}):\n{TIMING_LOG.read_text(errors='replace')}---- end of the "
            "timing tests' output; the other tests go on at normal priority\n",
            flush=True,
        )
        parallel_code = parallel.wait()
    except KeyboardInterrupt:
        # The workers' own session does not get the terminal's Ctrl-C: pass it on.
        with contextlib.suppress(ProcessLookupError):
            if grouped:
                os.killpg(parallel.pid, signal.SIGINT)
        parallel.wait()
        return 130
    print(
        f"make test: the suite on {workers} workers exited {parallel_code}, "
        f"the timing tests beside them (at priority) {timing}",
        flush=True,
    )
    return 0 if parallel_code == 0 and timing == 0 else 1


def _autogroup_enabled() -> bool:
    try:
        return AUTOGROUP.read_text().strip() == "1"
    except OSError:
        return False


def _lower_priority() -> None:
    os.nice(WORKERS_NICE)


def _keep_groups_niced(root: int, timing_ended: threading.Event) -> None:
    """Until the timing part ends, the groups of ``root`` and its descendants niced,
    every half second (a process that starts a session of its own starts a new group)."""
    while not timing_ended.is_set():
        _nice_groups(root, WORKERS_NICE)
        timing_ended.wait(0.5)


def _nice_groups(root: int, nice: int) -> None:
    """The scheduling group (session) of ``root`` and of each descendant at ``nice``.

    Without ``CAP_SYS_ADMIN`` the kernel takes one such write per 0.1 s, machine-wide,
    and refuses the others with EAGAIN: those wait their turn."""
    for pid in _descendants(root):
        group = Path(f"/proc/{pid}/autogroup")
        for _ in range(GROUP_WRITE_ATTEMPTS):
            try:
                if not group.read_text().endswith(f" nice {nice}\n"):
                    group.write_text(str(nice))
                break
            except BlockingIOError:
                time.sleep(0.11)
            except OSError:
                break  # the process is gone, or no autogroup: nothing to nice


def _unnice_tree(root: int) -> None:
    """Every thread of ``root`` and its descendants ``WORKERS_NICE`` less nice (a nice is
    per thread on Linux), so that a test's own order stays (a load generator it starves
    at nice 15 behind a hog stays behind it); two passes, for a process started while the
    first one walked, and a thread under ``WORKERS_NICE`` is not touched again."""
    for _ in range(2):
        for pid in _descendants(root):
            for task in Path(f"/proc/{pid}/task").glob("*"):
                with contextlib.suppress(OSError, ValueError):
                    thread = int(task.name)
                    nice = os.getpriority(os.PRIO_PROCESS, thread)
                    if nice >= WORKERS_NICE:
                        os.setpriority(os.PRIO_PROCESS, thread, nice - WORKERS_NICE)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
