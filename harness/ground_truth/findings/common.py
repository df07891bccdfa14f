"""What the findings scenarios share: sizes of a run, and the interleaved cause/cure loop."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from harness.ground_truth.pipeline import Pipeline
from harness.ground_truth.profile import Profile

SMALL = ("--entities", "20", "--features", "8")


def calls(profile: Profile, reduced: int = 60, full: int = 150) -> int:
    """Calls per arm and round: enough for a p50 the estimate can be held to."""
    return full if profile.full else reduced


def rounds(profile: Profile) -> int:
    """Interleaved rounds: two even reduced, so neither arm runs only at one moment's load."""
    return max(profile.rounds, 2)


def interleaved(
    profile: Profile, arms: dict[str, Callable[[], dict[str, Any]]]
) -> dict[str, list[dict[str, Any]]]:
    """Each arm once per round, in turn: machine noise hits cause and cure alike."""
    summaries: dict[str, list[dict[str, Any]]] = {name: [] for name in arms}
    for _ in range(rounds(profile)):
        for name, play in arms.items():
            summaries[name].append(play())
    return summaries


def latency_ms(summaries: list[dict[str, Any]], quantile: str = "p50") -> float:
    """The mean over rounds of a run's client latency quantile (ms, load generator clock)."""
    return statistics.mean(s["latency_ms"][quantile] for s in summaries)


def cause_and_cure(
    pipeline: Pipeline,
    profile: Profile,
    arms: dict[str, tuple[str, ...]],
    env: dict[str, str] | None = None,
    quantile: str = "p50",
) -> float:
    """Two ``load`` runs, interleaved: run id -> its arguments (the target first), the
    cause's first, the cure's second. The measured saving (µs, the client's clock): the
    cause's latency minus the cure's at ``quantile``."""
    summaries = interleaved(
        profile,
        {
            run: lambda run=run, args=args: pipeline.load(args[0], run, *args[1:], env=env)
            for run, args in arms.items()
        },
    )
    cause, cure = arms
    return (latency_ms(summaries[cause], quantile) - latency_ms(summaries[cure], quantile)) * 1e3
