"""Is the machine quiet enough to measure on? The load average, CPU steal and the CPU of
every process that is not ours, sampled before and during an experiment.

A latency measured while something else takes the CPU measures that something:
the seeds' first experiments ran at load average 20 on 2 CPUs and read like it.
The load average before a run says whether the machine was busy; during a run
it counts our own services and load generator too, so the check then watches
what is not ours: the CPU time of processes outside this command's process
tree (``/proc/PID/stat``) and the steal a hypervisor takes (``/proc/stat``),
both where Linux exposes them. A window is *under load* when other processes
used more than ``OTHERS_CPUS`` CPUs on average or steal exceeded
``STEAL_SHARE``; an experiment is when it started above ``QUIET_LOAD`` too.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The load average (1 min) a published figure may be taken under, 2 CPUs (the brief's rule).
QUIET_LOAD = 1.5
#: Other processes' CPU (in CPUs, averaged over a window) that marks it as under load.
OTHERS_CPUS = 0.5
#: Share of CPU time stolen by the hypervisor that marks a window as under load.
STEAL_SHARE = 0.05
SAMPLE_S = 1.0
PROC = Path("/proc")
TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _processes() -> dict[int, tuple[int, str, int, int]]:
    """pid -> (parent pid, command name, CPU ticks used, start tick), every readable process
    (a kernel worker renames itself as it works: the start tells a reused pid apart)."""
    found: dict[int, tuple[int, str, int, int]] = {}
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        # From stat(5)'s field 3 on: [1] ppid, [11] utime, [12] stime, [19] starttime.
        ticks = int(fields[11]) + int(fields[12])
        found[int(entry.name)] = (int(fields[1]), name, ticks, int(fields[19]))
    return found


def _ours(processes: dict[int, tuple[int, str, int, int]], root: int) -> set[int]:
    """``root`` and its descendants."""
    children: dict[int, list[int]] = {}
    for pid, (parent, *_) in processes.items():
        children.setdefault(parent, []).append(pid)
    ours, stack = set(), [root]
    while stack:
        pid = stack.pop()
        if pid not in ours:
            ours.add(pid)
            stack.extend(children.get(pid, ()))
    return ours


def _steal() -> tuple[int, int] | None:
    """(steal ticks, all ticks) since boot; None where /proc/stat is not readable."""
    try:
        first = (PROC / "stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    ticks = [int(value) for value in first[1:9]]
    return (ticks[7] if len(ticks) > 7 else 0), sum(ticks)


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


@dataclass
class Sample:
    at: float  # time.time()
    load: float | None
    others_cpus: float  # CPUs used by processes not ours since the previous sample
    steal_share: float | None
    top: list[tuple[str, float]]  # the busiest others: (command, CPUs)


@dataclass
class MachineCheck:
    """Samples every ``SAMPLE_S`` in a thread; ``window`` sums up a stretch of them."""

    root: int = field(default_factory=os.getpid)
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last = self._read()

    def _read(self) -> tuple[float, dict[int, tuple[int, str, int, int]], tuple[int, int] | None]:
        return time.monotonic(), _processes(), _steal()

    def sample(self) -> Sample:
        """CPU of the others and steal since the last sample (or since this check began)."""
        now = self._read()
        (then_s, then_processes, then_steal), (now_s, processes, steal) = self._last, now
        self._last = now
        elapsed = max(now_s - then_s, 1e-3)
        ours = _ours(processes, self.root)
        used: dict[str, float] = {}
        for pid, (_, name, ticks, begun) in processes.items():
            if pid in ours:
                continue
            before = then_processes.get(pid)
            # A process new since the last sample: all its ticks are within the window.
            delta = ticks - (before[2] if before and before[3] == begun else 0)
            if delta > 0:
                name = name.split("-")[0] if name.startswith("kworker") else name
                used[name] = used.get(name, 0.0) + delta / TICKS_PER_S / elapsed
        share = None
        if steal is not None and then_steal is not None and steal[1] > then_steal[1]:
            share = (steal[0] - then_steal[0]) / (steal[1] - then_steal[1])
        top = sorted(used.items(), key=lambda item: -item[1])[:3]
        result = Sample(time.time(), load_average(), sum(used.values()), share, top)
        self.samples.append(result)
        return result

    def start(self) -> MachineCheck:
        self._thread = threading.Thread(target=self._run, name="machine-check", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def window(self, started: float, ended: float) -> dict[str, Any]:
        """The samples taken between two ``time.time()`` moments, summed up."""
        inside = [s for s in self.samples if started <= s.at <= ended + SAMPLE_S]
        return summarize(inside)


def summarize(samples: list[Sample]) -> dict[str, Any]:
    """Averages and maxima of samples, with ``under_load`` and the reasons in ``warnings``."""
    if not samples:
        return {"samples": 0, "under_load": False, "warnings": []}
    others = [s.others_cpus for s in samples]
    steals = [s.steal_share for s in samples if s.steal_share is not None]
    loads = [s.load for s in samples if s.load is not None]
    busiest: dict[str, float] = {}
    for item in samples:
        for name, cpus in item.top:
            busiest[name] = busiest.get(name, 0.0) + cpus / len(samples)
    summary: dict[str, Any] = {
        "samples": len(samples),
        "load_max": None if not loads else round(max(loads), 2),
        "others_cpus_mean": round(sum(others) / len(others), 3),
        "others_cpus_max": round(max(others), 3),
        "steal_share_mean": None if not steals else round(sum(steals) / len(steals), 4),
        "busiest_others": [
            {"command": name, "cpus": round(cpus, 3)}
            for name, cpus in sorted(busiest.items(), key=lambda item: -item[1])[:3]
        ],
    }
    warnings = []
    if summary["others_cpus_mean"] > OTHERS_CPUS:
        names = ", ".join(f"{b['command']} {b['cpus']:.2f}" for b in summary["busiest_others"])
        warnings.append(
            f"other processes used {summary['others_cpus_mean']:.2f} CPUs on average ({names})"
        )
    if summary["steal_share_mean"] is not None and summary["steal_share_mean"] > STEAL_SHARE:
        warnings.append(f"the hypervisor stole {summary['steal_share_mean']:.0%} of the CPU")
    summary["under_load"] = bool(warnings)
    summary["warnings"] = warnings
    return summary


def before_start(
    check: MachineCheck, sample_s: float = 2.0, quiet_load: float = QUIET_LOAD
) -> dict[str, Any]:
    """The machine before anything of ours runs: the load average and a short sample."""
    time.sleep(sample_s)
    summary = summarize([check.sample()])
    load = load_average()
    summary["load_average"] = None if load is None else round(load, 2)
    summary["cpus"] = os.cpu_count()
    if load is not None and load > quiet_load:
        summary["warnings"].insert(0, f"load average {load:.2f} (quiet: below {quiet_load:g})")
        summary["under_load"] = True
    return summary


__all__ = ["QUIET_LOAD", "MachineCheck", "before_start", "load_average", "summarize"]
