"""Attach to a user's service the way users do, next to OpenTelemetry's own gRPC instrumentation.

Real processes, started from a temporary directory outside the repository, in a
venv holding only grpc-overhead-instrumentation (a built wheel) and the
OpenTelemetry packages users typically have (harness/user_venv.py). The
service (tests/pipeline/user_apps) is a plain sync ``grpc.server`` and a
``grpc.aio.server`` serving the four call shapes through generic handlers,
grpcio's health service and reflection; the client calls all of it over a
sync and an aio channel. Both run under ``opentelemetry-instrument``; spans
go through the real collector into ``serve``'s chDB store.

The matrix: ours alone; ours next to opentelemetry-instrumentation-grpc (no
SDK exporter configured); ours next to it with opentelemetry-distro's
TracerProvider and OTLP exporter (four spans per RPC reach the store). Both
load orders of the instrumentors, forced through ``sys.path`` order
(``user_venv.overlay``). And the partial attaches: a server whose client is
not instrumented, a client whose server is not.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from grpc_overhead.analyzer.stream_phases import UNARY_ONLY
from grpc_overhead.processes import offline_env, stop_process
from harness import user_venv
from harness.browser import chromium, open_page, start_app
from harness.ground_truth.pipeline import report, through_collector

pytestmark = pytest.mark.e2e

APPS = Path(__file__).with_name("user_apps")
ROOT = Path(__file__).resolve().parents[2]
OFFICIAL = "grpc_client,grpc_server,grpc_aio_client,grpc_aio_server"
REPEAT = 2
ECHO = ("UnaryUnary", "UnaryStream", "StreamUnary", "StreamStream")
#: Per side (sync, aio): each echo shape REPEAT times, one health check, one reflection stream.
CALLS_PER_SIDE = len(ECHO) * REPEAT + 2
CALLS = 2 * CALLS_PER_SIDE
#: Phases our instrumentation yields on one side alone.
SERVER_PHASES = ("server_queue", "request_deserialize", "processing", "response_serialize")
CLIENT_PHASES = ("client_serialize", "client_deserialize", "total")
BOTH_SIDES = ("request_network", "response_network", "unattributed")


@dataclass(frozen=True)
class Pair:
    """One server process and one client process, instrumented the same way (or not)."""

    name: str
    first: str | None = None  # whose entry point loads first (user_venv.overlay)
    disabled: str = ""  # OTEL_PYTHON_DISABLED_INSTRUMENTATIONS
    exporter: str = "none"  # OTEL_TRACES_EXPORTER: the distro's own exporter
    server_attached: bool = True
    client_attached: bool = True


PAIRS = (
    Pair("ours-alone", disabled=OFFICIAL),
    Pair("official-ours-first", first="grpc_overhead"),
    Pair("official-official-first", first="official"),
    Pair("distro-ours-first", first="grpc_overhead", exporter="otlp"),
    Pair("distro-official-first", first="official", exporter="otlp"),
    Pair("server-only", disabled=OFFICIAL, client_attached=False),
    Pair("client-only", disabled=OFFICIAL, server_attached=False),
)


@dataclass
class Ran:
    pair: Pair
    order: list[str]
    answers: dict
    server: subprocess.CompletedProcess
    client: subprocess.CompletedProcess


def _environment(pair: Pair, collector_port: int, side: str) -> dict[str, str]:
    location = user_venv.ensure()
    env = offline_env(
        OTEL_SERVICE_NAME=f"{pair.name}-{side}",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{collector_port}",
        OTEL_EXPORTER_OTLP_INSECURE="true",
        OTEL_TRACES_EXPORTER=pair.exporter,
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=pair.disabled,
        GRPC_OVERHEAD_RUN_ID=pair.name,
        GRPC_OVERHEAD_EXPORT_INTERVAL_MS="100",
        PATH=f"{location / 'venv' / 'bin'}:/usr/bin:/bin",
    )
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    if pair.first:
        env["PYTHONPATH"] = str(user_venv.overlay(pair.first))
    return env


def _command(attached: bool, script: str, *args: str) -> list[str]:
    bin_dir = user_venv.ensure() / "venv" / "bin"
    python = [str(bin_dir / "python"), script, *args]
    return [str(bin_dir / "opentelemetry-instrument"), *python] if attached else python


def _run_pair(pair: Pair, workdir: Path, collector_port: int) -> Ran:
    server = subprocess.Popen(
        _command(pair.server_attached, "server.py"),
        cwd=workdir,
        env=_environment(pair, collector_port, "server"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        order = json.loads(server.stdout.readline().split(" ", 1)[1])
        words = server.stdout.readline().split()
        if not words or words[0] != "ports":
            raise AssertionError(f"server did not start: {server.stderr.read()}")
        sync_port, aio_port = words[1], words[2]
        client = subprocess.run(
            _command(
                pair.client_attached,
                "client.py",
                f"127.0.0.1:{sync_port}",
                f"127.0.0.1:{aio_port}",
                str(REPEAT),
            ),
            cwd=workdir,
            env=_environment(pair, collector_port, "client"),
            capture_output=True,
            text=True,
            timeout=90,
            stdin=subprocess.DEVNULL,
        )
        out, err = server.communicate("", timeout=60)
    finally:
        if server.poll() is None:
            stop_process(server)
    finished = subprocess.CompletedProcess(server.args, server.returncode, out, err)
    answers = json.loads(client.stdout) if client.returncode == 0 else {}
    return Ran(pair, order, answers, finished, client)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    """Every pair run once against one collector and one store; the store read after."""
    user_venv.ensure()
    workdir = tmp_path_factory.mktemp("user-service")
    assert ROOT not in workdir.resolve().parents
    for script in APPS.glob("*.py"):
        shutil.copy(script, workdir / script.name)
    store = tmp_path_factory.mktemp("coexistence") / "store"
    with through_collector(store) as collector_port:
        ran = {pair.name: _run_pair(pair, workdir, collector_port) for pair in PAIRS}
    pages = subprocess.run(
        [sys.executable, "-m", "tests.pipeline.page_counts", str(store), *ran],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=offline_env(),
    )
    assert pages.returncode == 0, pages.stderr
    return ran, store, json.loads(pages.stdout)


def _expected_answers() -> dict:
    echo = {
        "UnaryUnary": [["uu:hello"]],
        "UnaryStream": [["us0:hello", "us1:hello", "us2:hello"]],
        "StreamUnary": [["su:hello+hello"]],
        "StreamStream": [["ss:hello", "ss:hello"]],
    }
    side = {
        "echo": {name: calls * REPEAT for name, calls in echo.items()},
        "health": 1,  # SERVING
        "services": [
            "coexistence.Echo",
            "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection",
        ],
    }
    return {"sync": side, "aio": side}


@pytest.mark.parametrize("name", [pair.name for pair in PAIRS])
def test_calls_are_unaffected(matrix, name):
    ran = matrix[0][name]
    for process in (ran.server, ran.client):
        assert process.returncode == 0, process.stderr
        assert "Traceback" not in process.stderr, process.stderr
    assert ran.answers == _expected_answers()


@pytest.mark.parametrize("name", [p.name for p in PAIRS if p.first])
def test_load_order_is_the_one_forced(matrix, name):
    ran = matrix[0][name]
    ours, official = ran.order.index("grpc_overhead"), ran.order.index("grpc_server")
    assert (ours < official) == (ran.pair.first == "grpc_overhead"), ran.order


def test_each_rpc_is_counted_once_in_report_and_pages(matrix):
    ran, store, pages = matrix
    # Every call of every pair, once: official spans (exported by the distro pairs) add none.
    assert report(store)["calls"] == CALLS * len(PAIRS)  # the command, as users run it
    # The distro pairs exported the official spans too (a client and a server span per RPC):
    # each is folded into ours and shares its trace.
    distro = [p for p in PAIRS if p.exporter == "otlp"]
    assert pages[""]["official_spans"] == {
        "spans": 2 * CALLS * len(distro),
        "folded": 2 * CALLS * len(distro),
        "other_trace": 0,
    }
    assert pages[""]["overview_calls"] == CALLS * len(PAIRS)
    for name in ran:
        assert pages[name]["overview_calls"] == CALLS, name
        assert pages[name]["sidebar_calls"] == CALLS, name
    for name in ran:
        per_run = pages[name]["report"]
        assert per_run["calls"] == CALLS, name
        methods = {(m["service"], m["method"]): m["calls"] for m in per_run["methods"]}
        for method in ECHO:
            assert methods[("coexistence.Echo", method)] == 2 * REPEAT, (name, methods)
        assert methods[("grpc.health.v1.Health", "Check")] == 2, name
        assert methods[("grpc.reflection.v1alpha.ServerReflection", "ServerReflectionInfo")] == 2


def _expected_calls(method: dict, phase: str) -> int:
    """How many of a report method's calls define ``phase``: all of them, except the
    phases the report says are undefined for its shape (a stream's unary-only phases and
    those derived from them: docs/reference.md, "Streams, per message")."""
    assert set(UNARY_ONLY) <= set(method["undefined_for_shape"]) or method["shape"] == "unary"
    return 0 if phase in method["undefined_for_shape"] else method["calls"]


def test_transport_phases_are_present_with_both_sides_attached(matrix):
    """Every call has every phase, except a one-way network phase whose two events came
    out in reverse order on the shared clock (a preempted thread stamped its "sent"
    late: on a busy machine, 2 of 4 calls once). The analyzer leaves that value out
    by design, so those calls are counted from their events apart and taken off."""
    _, _, pages = matrix
    for name in [p.name for p in PAIRS if p.server_attached and p.client_attached]:
        per_run = pages[name]["report"]
        out_of_order = pages[name]["out_of_order"]
        for method in per_run["methods"]:
            phases = method["phases"]
            reversed_events = out_of_order.get(method["method"], {})
            for phase in (*SERVER_PHASES, *CLIENT_PHASES, *BOTH_SIDES):
                expected = _expected_calls(method, phase)
                if expected:
                    expected -= reversed_events.get(phase, 0)
                assert phases[phase]["calls"] == expected, (name, method["method"], phase)
            if method["shape"] != "unary":  # a stream: described by its messages instead
                for phase in ("request_message_transfer", "stream_duration"):
                    assert phases[phase]["calls"] == method["calls"], (name, method, phase)
        unary = sum(
            m["calls"] - out_of_order.get(m["method"], {}).get("request_network", 0)
            for m in per_run["methods"]
            if m["shape"] == "unary"
        )
        assert pages[name]["phase_calls"]["request_network"] == unary, name


@pytest.mark.parametrize(
    ("name", "measured", "left_out", "count"),
    [
        ("server-only", SERVER_PHASES, (*CLIENT_PHASES, *BOTH_SIDES), "server_only_calls"),
        ("client-only", CLIENT_PHASES, (*SERVER_PHASES, *BOTH_SIDES), "client_only_calls"),
    ],
)
def test_one_side_attached_has_its_phases_and_a_count(matrix, name, measured, left_out, count):
    """A server whose callers are not instrumented gets its server phases and a call count; a
    client calling a server that is not gets its client phases and the total. Nothing that
    needs the other half is made up, and the pages say "server side only: N calls"."""
    _, _, pages = matrix
    per_run = pages[name]["report"]
    assert per_run["calls"] == CALLS
    for method in per_run["methods"]:
        phases = method["phases"]
        for phase in measured:
            assert phases[phase]["calls"] == _expected_calls(method, phase), (method, phase)
        for phase in left_out:
            assert phases[phase]["calls"] == 0, (method["method"], phase)
    other = "client_only_calls" if count == "server_only_calls" else "server_only_calls"
    assert pages[name]["overview"][count] == CALLS and pages[name]["overview"][other] == 0
    assert pages[name]["sides"][count] == CALLS
    for both in ("ours-alone", "distro-official-first"):  # both sides attached: neither
        assert pages[both]["sides"][count] == 0, both


@pytest.mark.browser
def test_the_pages_say_server_side_only_in_a_browser(matrix):
    """The Overview and Phases pages as a user sees them, on the matrix's store (Chromium)."""
    _, store, _ = matrix
    running = start_app(store, offline_env())
    try:
        with chromium() as context:
            page = context.new_page()
            for path in ("overview", "phases"):
                open_page(page, f"{running.url}/{path}?run=server-only")
                captions = " ".join(
                    page.locator('[data-testid="stCaptionContainer"]').all_inner_texts()
                )
                assert f"Server side only: {CALLS} calls" in captions, (path, captions)
                assert "Client side only" not in captions, path
            page.close()
    finally:
        running.stop()
