"""How much each scenario runs: ``REDUCED`` in ``make test``, ``FULL`` in ``make bench``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    calls: int  # calls per load run (every load is also bounded in time)
    rounds: int  # interleaved rounds per case: machine noise hits every case alike
    probes: int  # raw-TCP calibration probes per case and round
    full: bool


REDUCED = Profile("reduced", calls=25, rounds=1, probes=25, full=False)
FULL = Profile("full", calls=60, rounds=3, probes=50, full=True)
PROFILES = {p.name: p for p in (REDUCED, FULL)}
