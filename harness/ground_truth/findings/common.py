"""What the findings scenarios share: sizes of a run, and the interleaved cause/cure loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
