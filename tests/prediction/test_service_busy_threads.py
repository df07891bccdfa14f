"""``service --busy-threads``: a server busy outside its handlers (findings ground truth's
server_cpu_saturated), with the threads the load generator's ``--busy-threads`` uses."""

from __future__ import annotations

import threading

import pytest

from grpc_overhead.cli.busy import busy_threads
from grpc_overhead.cli.service import build_parser, main

pytestmark = pytest.mark.unit


def _busy() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith("busy-")]


def test_busy_threads_run_while_the_block_lasts_and_stop_after():
    with busy_threads(2):
        assert len(_busy()) == 2
    assert _busy() == []


def test_the_option_defaults_to_none_and_takes_a_count():
    assert build_parser().parse_args([]).busy_threads == 0
    assert build_parser().parse_args(["--busy-threads", "2"]).busy_threads == 2


def test_a_negative_count_is_a_usage_error():
    assert main(["--busy-threads", "-1"]) == 2


def test_rest_refuses_busy_threads(capsys):
    assert main(["--rest", "--busy-threads", "1"]) == 2
    assert "--busy-threads" in capsys.readouterr().err
