"""Findings whose cause is on the path between client and server: latency, bytes, compression.

Every scenario here calls the prediction service through toxiproxy; the cure is
the same proxy without the toxic (or the same path with the calls' compression
changed), played in turn with the cause, round by round.

* ``network_latency``: 3 ms each way on small calls; cure: no toxic.
* ``slow_upload``: a 2.5 MB/s request path, ~209 KB requests; cure: no toxic.
* ``slow_download``: a 320 KB/s response path, ~32 KB responses (8,000
  scores); cure: no toxic.
* ``compression_would_help``: a 500 KB/s request path with ~52 KB compressible
  requests (gzip keeps ~a third), sent plain; cure: gRPC gzip on the same path.
  Compression pays only on a narrow path, which is itself a slow_upload finding
  with a larger saving (the whole path's cost): that one may rank above it,
  nothing else.
* ``compression_costs_more``: gRPC gzip on a fast path (loopback), ~830 KB
  requests whose gzip costs tens of ms of CPU; cure: no compression.

The compression kinds need sampled messages: the load generator samples one
per 0.3 s here (``GRPC_OVERHEAD_COMPRESSIBILITY_INTERVAL_S``; 5 s by default).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from harness.ground_truth.findings.common import SMALL, calls, interleaved, latency_ms
from harness.ground_truth.findings.result import Plan
from harness.ground_truth.pipeline import Pipeline
from harness.ground_truth.profile import Profile
from harness.ground_truth.toxiproxy import DOWNSTREAM, UPSTREAM, Proxy, Toxiproxy

UPLOAD = ("--entities", "1400", "--features", "32")  # ~209 KB requests, gzip keeps ~32 %
#: 8,000 scores per response (~32 KB); few features keep the model's work small (20,000
#: entities took 30 ms of processing, which moved by as much as the path between rounds).
DOWNLOAD = ("--entities", "8000", "--features", "1")
SAMPLED = {"GRPC_OVERHEAD_COMPRESSIBILITY_INTERVAL_S": "0.3"}


@contextmanager
def _proxied(pipeline: Pipeline, *service_args: str) -> Iterator[tuple[Toxiproxy, Proxy]]:
    with ExitStack() as stack:
        toxiproxy = stack.enter_context(Toxiproxy())
        service = stack.enter_context(pipeline.service("--workers", "4", *service_args))
        yield toxiproxy, toxiproxy.proxy(service.target)


def _toxic_or_not(
    pipeline: Pipeline,
    profile: Profile,
    name: str,
    toxics: dict[str, dict[str, int]],
    load: tuple[str, ...],
    count: int,
    cure_load: tuple[str, ...] | None = None,
    cure_toxics: bool = False,
) -> tuple[float, dict[str, Any]]:
    """Cause (toxic on) and cure (off, or ``cure_load`` with the toxic on), interleaved;
    the measured saving (µs, client clock, p50) and observations."""
    with _proxied(pipeline) as (toxiproxy, proxy):

        def play(run: str, args: tuple[str, ...], toxic: bool) -> dict[str, Any]:
            toxiproxy.set_toxics(proxy, toxics if toxic else {})
            try:
                return pipeline.load(
                    proxy.listen,
                    run,
                    "--calls",
                    str(count),
                    "--concurrency",
                    "1",
                    *args,
                    env=SAMPLED,
                )
            finally:
                toxiproxy.clear_toxics(proxy)

        cause, cure = f"{name}-cause", f"{name}-cure"
        summaries = interleaved(
            profile,
            {
                cause: lambda: play(cause, load, True),
                cure: lambda: play(cure, cure_load or load, cure_toxics),
            },
        )
    measured = (latency_ms(summaries[cause]) - latency_ms(summaries[cure])) * 1e3
    latency = {run: round(latency_ms(found) * 1e3, 1) for run, found in summaries.items()}
    return measured, {"client_latency_p50_us": latency}


def network_latency(pipeline: Pipeline, workdir: Path, profile: Profile) -> Plan:
    toxics = {
        f"latency:{UPSTREAM}": {"latency": 3, "jitter": 0},
        f"latency:{DOWNSTREAM}": {"latency": 3, "jitter": 0},
    }
    measured, observed = _toxic_or_not(
        pipeline, profile, "latency", toxics, SMALL, calls(profile, 40, 100)
    )
    return Plan(
        "network_latency",
        "network_latency",
        "latency-cause",
        "3 ms of latency each way (toxiproxy), ~1 KB calls",
        measured,
        cure="the same proxy without latency",
        observations=observed,
    )


def slow_upload(pipeline: Pipeline, workdir: Path, profile: Profile) -> Plan:
    toxics = {f"bandwidth:{UPSTREAM}": {"rate": 2500}}
    measured, observed = _toxic_or_not(
        pipeline, profile, "upload", toxics, UPLOAD, calls(profile, 15, 40)
    )
    return Plan(
        "slow_upload",
        "slow_upload",
        "upload-cause",
        "a 2.5 MB/s request path (toxiproxy bandwidth), ~209 KB requests",
        measured,
        cure="the same proxy without the limit",
        observations=observed,
    )


def slow_download(pipeline: Pipeline, workdir: Path, profile: Profile) -> Plan:
    toxics = {f"bandwidth:{DOWNSTREAM}": {"rate": 320}}
    measured, observed = _toxic_or_not(
        pipeline, profile, "download", toxics, DOWNLOAD, calls(profile, 15, 40)
    )
    return Plan(
        "slow_download",
        "slow_download",
        "download-cause",
        "a 320 KB/s response path (toxiproxy bandwidth), ~32 KB responses",
        measured,
        cure="the same proxy without the limit",
        observations=observed,
    )


def compression_would_help(pipeline: Pipeline, workdir: Path, profile: Profile) -> Plan:
    # The saving is bytes saved minus gzip's CPU: on a 2.5 MB/s path with ~209 KB requests
    # (57 ms saved, 20-50 ms of CPU as the machine's load came and went) it measured 38 ms
    # in one run and 7 in another; ~104 KB at 1 MB/s +26 % over the measured saving (gRPC
    # core's gzip took ~1.4 x the samples' CPU on the loaded machine). On a narrower path
    # the bytes dominate.
    toxics = {f"bandwidth:{UPSTREAM}": {"rate": 500}}
    upload = ("--entities", "350", "--features", "32")  # ~52 KB requests, gzip keeps ~32 %
    measured, observed = _toxic_or_not(
        pipeline,
        profile,
        "gzip-helps",
        toxics,
        upload,
        calls(profile, 15, 40),
        cure_load=(*upload, "--compression", "gzip"),
        cure_toxics=True,
    )
    return Plan(
        "compression_would_help",
        "compression_would_help",
        "gzip-helps-cause",
        "~52 KB compressible requests sent plain on a 500 KB/s request path",
        measured,
        cure="gRPC gzip on the same path",
        observations=observed,
        ranks_below=("slow_upload",),
    )


def compression_costs_more(pipeline: Pipeline, workdir: Path, profile: Profile) -> Plan:
    big = ("--entities", "3000", "--features", "64")  # ~830 KB, gzip: ~60 ms of CPU
    measured, observed = _toxic_or_not(
        pipeline,
        profile,
        "gzip-costs",
        {},
        (*big, "--compression", "gzip"),
        calls(profile, 12, 30),
        cure_load=big,
    )
    return Plan(
        "compression_costs_more",
        "compression_costs_more",
        "gzip-costs-cause",
        "gRPC gzip on ~830 KB requests over loopback",
        measured,
        cure="no compression",
        observations=observed,
    )


SCENARIOS = {
    "network_latency": network_latency,
    "slow_upload": slow_upload,
    "slow_download": slow_download,
    "compression_would_help": compression_would_help,
    "compression_costs_more": compression_costs_more,
}
