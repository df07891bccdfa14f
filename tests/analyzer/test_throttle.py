"""``throttle.FailedLogins``: lockouts per source, on a clock the test moves."""

from __future__ import annotations

import threading

import pytest

from grpc_overhead.analyzer import throttle
from grpc_overhead.analyzer.throttle import FailedLogins

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_five_failures_are_free_then_lockouts_double_up_to_the_cap() -> None:
    clock = Clock()
    logins = FailedLogins(clock=clock, max_lockout_s=40.0)
    assert [logins.failed("a") for _ in range(5)] == [0.0] * 5
    assert logins.locked_for("a") == 0.0
    earned = []
    for _ in range(6):
        earned.append(logins.failed("a"))
        assert logins.locked_for("a") == earned[-1]
        clock.now += earned[-1]  # waits its lockout out, then guesses again
    assert earned == [5.0, 10.0, 20.0, 40.0, 40.0, 40.0]
    assert logins.locked_for("b") == 0.0  # other sources are not touched


def test_a_success_clears_the_source_and_an_old_count_lapses() -> None:
    clock = Clock()
    logins = FailedLogins(clock=clock)
    for _ in range(6):
        logins.failed("a")
    assert logins.locked_for("a") == throttle.FIRST_LOCKOUT_S
    logins.succeeded("a")
    assert logins.locked_for("a") == 0.0 and logins.failed("a") == 0.0
    for _ in range(5):
        logins.failed("b")
    clock.now += throttle.WINDOW_S + 1
    assert logins.failed("b") == 0.0  # the window passed: a fresh count


def test_memory_is_bounded_by_forgetting_the_oldest_sources(monkeypatch) -> None:
    monkeypatch.setattr(throttle, "MAX_SOURCES", 100)
    logins = FailedLogins(clock=Clock())
    for _ in range(6):
        logins.failed("old")
    for n in range(100):
        logins.failed(f"new-{n}")
    assert logins.locked_for("old") == 0.0 and len(logins._sources) == 100


def test_parallel_guesses_from_one_source_are_all_counted() -> None:
    logins = FailedLogins(clock=Clock())
    workers = [
        threading.Thread(target=lambda: [logins.failed("a") for _ in range(100)]) for _ in range(8)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert logins._sources["a"].failures == 800
