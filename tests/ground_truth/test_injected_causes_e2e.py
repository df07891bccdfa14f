"""Every ground-truth scenario, reduced: real service, load, toxiproxy, libfaketime, intake and
report; each injected quantity must come back in the right phase within tolerance (or be a
documented grpcio/clock limit whose recoverable counterpart passes).

Timing *values* are compared with injected causes measured independently (the harness's
calibration), never with fixed numbers; the same code runs in full in ``make bench``.
"""

from __future__ import annotations

import pytest

from bench.ground_truth import SCENARIOS
from bench.ground_truth.profile import REDUCED

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_injected_cause_is_recovered(tmp_path, name):
    result = SCENARIOS[name](tmp_path, REDUCED)
    print(result.describe())  # visible with -s, and in the failure message below
    assert result.checks, "a scenario that checks nothing cannot fail"
    assert not result.failures, result.describe()
    # A documented limit never stands alone: what IS recoverable there is checked too.
    for limited in result.limits:
        companions = [c for c in result.checks if c.case == limited.case and not c.limit]
        assert companions and all(c.within for c in companions), result.describe()
