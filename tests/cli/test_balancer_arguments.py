"""The balancer's argument errors are one line and exit status 2 (``cli/balancer.py``)."""

from __future__ import annotations

import pytest

from grpc_overhead.cli import balancer

pytestmark = pytest.mark.unit

ONE = ["--backend", "127.0.0.1:50051"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "at least one --backend HOST:PORT is needed"),
        (["--backend", "no-port"], "not HOST:PORT: 'no-port'"),
        (["--backend", "127.0.0.1:0"], "a backend needs a port: '127.0.0.1:0'"),
        ([*ONE, *ONE], "a --backend is given twice"),
        ([*ONE, "--listen", "127.0.0.1:70000"], "not HOST:PORT: '127.0.0.1:70000'"),
        ([*ONE, "--policy", "least_loaded"], "argument --policy: invalid choice"),
        ([*ONE, "--seed", "many"], "argument --seed: invalid int value: 'many'"),
        ([*ONE, "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert balancer.main(args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1
    assert err.startswith(f"balancer: error: {message}"), err


def test_a_balancer_is_refused_what_it_could_not_run() -> None:
    with pytest.raises(ValueError, match="at least one backend"):
        balancer.Balancer([])
    with pytest.raises(ValueError, match="policy must be one of"):
        balancer.Balancer(["127.0.0.1:50051"], policy="least_loaded")


def test_random_is_repeatable_by_seed_and_round_robin_takes_turns() -> None:
    backends = ["a:1", "b:2", "c:3"]
    first, again = (balancer.picker(backends, "random", 7) for _ in range(2))
    assert [first() for _ in range(20)] == [again() for _ in range(20)]
    in_turn = balancer.picker(backends, "round_robin", 0)
    assert [in_turn() for _ in range(4)] == ["a:1", "b:2", "c:3", "a:1"]
