"""`grpc-overhead load` arguments: bad ones exit 2 with a clear message, never a traceback."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from grpc_overhead.cli import load as command
from grpc_overhead.instrumentation import SpanPipeline, set_default_pipeline
from grpc_overhead.processes import free_port, offline_env


def _main(capsys, *argv: str) -> tuple[int, str, str]:
    code = command.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.unit
@pytest.mark.parametrize(
    "argv,message",
    [
        ([], "--target HOST:PORT is required"),
        (["--target", "localhost"], "expected HOST:PORT"),
        (["--target", "h:0"], "expected HOST:PORT"),
        (["--target", "::1:80"], "[ADDR]:PORT"),
        (["--target", "h:1", "--calls", "0"], "must be > 0"),
        (["--target", "h:1", "--duration", "-1"], "must be > 0"),
        (["--target", "h:1", "--rps", "abc"], "not a number"),
        (["--target", "h:1", "--mode", "bidi"], "invalid choice"),
        (["--target", "h:1", "--compression", "brotli"], "invalid choice"),
        (
            ["--target", "h:1", "--compression", "zstd", "--encoding", "repeated"],
            "--compression zstd compresses the packed feature blob",
        ),
        (["--target", "h:1", "--features", "5000"], "the model supports at most"),
        (["--target", "h:1", "--tls-ca", "/nonexistent/ca.pem"], "no such file"),
        (["--target", "h:1", "--transport", "rest", "--mode", "stream"], "unary only"),
        (["--target", "h:1", "--transport", "rest", "--compression", "gzip"], "sends JSON"),
        (["--target", "h:1", "--transport", "rest", "--tls"], "plaintext"),
        (["--target", "h:1", "--payload", "image", "--mode", "chunks"], "unary or batch"),
        (["--target", "h:1", "--payload", "image", "--compression", "lz4"], "not images"),
        (["--target", "h:1", "--transport", "rest", "--rest-body", "binary"], "carries images"),
        (["--target", "h:1", "--image-bytes", "0"], "must be > 0"),
    ],
)
def test_bad_arguments(capsys, argv: list[str], message: str) -> None:
    code, out, err = _main(capsys, *argv)
    assert code == 2
    assert message in err
    assert "Traceback" not in err and out == ""


@pytest.mark.unit
def test_compression_choice_selects_encoding() -> None:
    parse = command.build_parser().parse_args
    config = command.config_from_args(parse(["--target", "h:1", "--compression", "snappy"]))
    assert (config.workload.encoding, config.workload.codec, config.grpc_compression) == (
        "packed",
        "snappy",
        "none",
    )
    config = command.config_from_args(
        parse(["--target", "h:1,h:2", "--target", "h:3", "--compression", "gzip"])
    )
    assert config.targets == ["h:1", "h:2", "h:3"]
    assert (config.workload.encoding, config.grpc_compression) == ("repeated", "gzip")
    assert config.calls == 200 and config.concurrency == 8
    config = command.config_from_args(parse(["--target", "h:1", "--duration", "3", "--rps", "5"]))
    assert config.calls is None and config.duration_s == 3 and config.concurrency == 32


@pytest.mark.unit
def test_run_id_default_format(monkeypatch) -> None:
    monkeypatch.delenv("GRPC_OVERHEAD_RUN_ID", raising=False)
    assert re.fullmatch(r"run-\d{8}-\d{6}-[0-9a-f]{4}", command.default_run_id())
    monkeypatch.setenv("GRPC_OVERHEAD_RUN_ID", "from-env")
    config = command.config_from_args(command.build_parser().parse_args(["--target", "h:1"]))
    assert config.run_id == "from-env"


@pytest.mark.unit
def test_help_mentions_forced_packed_encoding(capsys) -> None:
    code, out, _ = _main(capsys, "--help")
    assert code == 0
    assert "forces --encoding packed" in " ".join(out.split())


@pytest.fixture
def own_default_pipeline() -> Iterator[InMemorySpanExporter]:
    """main() flushes and shuts down the process-wide pipeline: give it one of its own."""
    exporter = InMemorySpanExporter()
    set_default_pipeline(SpanPipeline(exporter=exporter))
    yield exporter
    set_default_pipeline(None)


@pytest.mark.unit
def test_json_run_in_process(capsys, target, own_default_pipeline) -> None:
    code, out, err = _main(
        capsys,
        "--target",
        target,
        "--calls",
        "6",
        "--json",
        "--quiet",
        "--entities",
        "10",
        "--run-id",
        "in-process",
    )
    assert code == 0, err
    summary = json.loads(out)
    assert summary["run_id"] == "in-process" and summary["ok"] == 6
    # flushed before the summary was printed: it says every client span left
    assert summary["spans"] == {"exported": 6, "failed": 0, "dropped": 0, "unsent": 0}
    clients = [s for s in own_default_pipeline.get_finished_spans() if s.kind.name == "CLIENT"]
    assert len(clients) == 6
    assert {s.attributes["grpc_overhead.run_id"] for s in clients} == {"in-process"}


def _load_subprocess(*argv: str) -> subprocess.CompletedProcess:
    """``grpc-overhead load ...`` as a user runs it: its own process, no collector, no stdin."""
    return subprocess.run(
        [sys.executable, "-m", "grpc_overhead", "load", *argv],
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.e2e
def test_unreachable_target_subprocess() -> None:
    port = free_port()
    done = _load_subprocess(
        "--target", f"127.0.0.1:{port}", "--connect-timeout", "1", "--calls", "5"
    )
    assert done.returncode == 2
    assert f"cannot connect to 127.0.0.1:{port} within 1 s" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.e2e
def test_bad_argument_subprocess() -> None:
    done = _load_subprocess("--target", "x:1", "--calls", "-3")
    assert done.returncode == 2
    assert "--calls: must be > 0" in done.stderr.replace("argument ", "")
    assert "Traceback" not in done.stderr


@pytest.mark.e2e
def test_spans_with_no_collector_are_counted_as_not_delivered(target) -> None:
    """No collector listens: the load still reports its calls, and says in the JSON and
    the text summary that none of their spans left."""
    done = _load_subprocess("--target", target, "--calls", "5", "--json", "--quiet")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    spans = summary["spans"]
    assert summary["calls"] == 5 and spans["exported"] == 0
    assert spans["failed"] + spans["dropped"] + spans["unsent"] == 5
    assert "Traceback" not in done.stderr
    text = _load_subprocess("--target", target, "--calls", "5", "--quiet")
    assert text.returncode == 0, text.stderr
    assert "Spans:        0 exported, 5 not delivered" in text.stdout


def _ignore_sigint() -> None:
    """What a shell does to a background job (``make demo &``, ``nohup``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _default_sigint() -> None:
    """A job in a terminal's foreground, whatever this suite was started as (it inherits
    SIGINT ignored when it runs in the background itself)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.e2e
@pytest.mark.parametrize(
    "stop, background",
    [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGTERM, True)],
    ids=["ctrl-c", "sigterm", "sigterm-in-a-background-job"],
)
def test_a_stopped_run_finishes_its_calls_flushes_and_summarizes(
    target, otlp_sink, stop: int, background: bool
) -> None:
    """Stopped halfway, the load still prints its partial summary and every span of the
    calls it made reaches the collector, whichever way it was started and stopped."""
    sink, port = otlp_sink
    options = ["--json", "--quiet", "--duration", "600", "--rps", "50", "--concurrency", "2"]
    load = subprocess.Popen(
        [sys.executable, "-m", "grpc_overhead", "load", "--target", target, *options],
        env=offline_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ignore_sigint if background else _default_sigint,
    )
    try:
        # The first batch of client spans arrives once calls flow (the run is driven).
        assert sink.wait_for_spans(1, timeout_s=60), "no span within 60 s"
        load.send_signal(stop)
        out, err = load.communicate(timeout=60)
    finally:
        if load.poll() is None:
            load.kill()
    assert load.returncode == 130, err
    assert "Traceback" not in err
    summary = json.loads(out)
    assert summary["interrupted"] is True and summary["calls"] > 0
    assert summary["spans"]["exported"] == summary["calls"], summary["spans"]
    assert len(sink.spans()) == summary["calls"]
