"""Every ground-truth scenario, reduced: real service, load, toxiproxy, libfaketime, intake and
report; each injected quantity must come back in the right phase within tolerance (or be a
documented grpcio/clock limit whose recoverable counterpart passes).

Timing *values* are compared with injected causes measured independently (the harness's
calibration), never with fixed numbers; the same code runs in full in ``make bench``.
"""

from __future__ import annotations

import pytest

from harness.ground_truth import SCENARIOS
from harness.ground_truth.checks import MissingMeasurement
from harness.ground_truth.profile import REDUCED

pytestmark = pytest.mark.e2e


#: The reduced runs sample each p50 from 25 calls in one round, on two cores the suite
#: itself keeps busy, so their p50s carry more noise than the bench's (60 calls, three
#: interleaved rounds), which enforces the acceptance tolerance itself. Here a check may
#: miss by up to twice that tolerance: still far below any misattribution these scenarios
#: inject (a delay in the wrong direction, queuing counted as processing, ...).
REDUCED_SLACK = 2.0

#: A scenario that misses is measured once more, from scratch, and judged on that second run
#: alone. A misattribution is systematic and misses twice; what a loaded CI machine adds to
#: one 25-call p50 (a TLS handshake that lost the CPU, busy threads' GIL hand-offs landing
#: on the request side) does not repeat run after run. Both runs are printed.
ATTEMPTS = 2


def within_slack(check) -> bool:
    return abs(check.error_us) <= REDUCED_SLACK * check.tolerance_us


def problems(result) -> list[str]:
    """What keeps a run from passing: a miss beyond the slack, or a limit left alone."""
    found = [
        f"{c.case}: {c.quantity}" for c in result.checks if not c.limit and not within_slack(c)
    ]
    # A documented limit never stands alone: what IS recoverable there is checked too.
    for limited in result.limits:
        companions = [c for c in result.checks if c.case == limited.case and not c.limit]
        if not companions:
            found.append(f"{limited.case}: a limit with nothing recoverable checked beside it")
        found += [f"{c.case}: {c.quantity}" for c in companions if not within_slack(c)]
    return found


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_injected_cause_is_recovered(tmp_path, name):
    described = []
    for attempt in range(1, ATTEMPTS + 1):
        workdir = tmp_path / f"attempt-{attempt}"
        workdir.mkdir()
        try:
            result = SCENARIOS[name](workdir, REDUCED)
        except MissingMeasurement as error:
            # A phase no call of the run measured (a cold channel's READY unseen on a
            # loaded client): nothing to judge, so a miss like any other, not a verdict.
            missed = [str(error)]
            described.append(f"-- attempt {attempt} of {ATTEMPTS}: {error}")
            print(described[-1])
            continue
        described.append(f"-- attempt {attempt} of {ATTEMPTS}\n{result.describe()}")
        print(described[-1])  # visible with -s, and in the failure message below
        assert result.checks, "a scenario that checks nothing cannot fail"
        missed = problems(result)
        if not missed:
            return
    pytest.fail(
        f"missed in all {ATTEMPTS} runs (last: {'; '.join(missed)})\n" + "\n".join(described)
    )
