"""The five seeds reproduced: each bundled experiment (``experiments/*.yaml``) beside the
figure of the source it stands for.

    python -m bench.run seeds                    # reduced: fewer calls and rounds
    python -m bench.run seeds -- --full          # the files as shipped, for docs/seeds.md
    python -m bench.run seeds -- --full tls      # one seed

Each runs as a user runs it (``grpc-overhead experiment FILE --format json`` on a fresh
store, ``--require-quiet`` for a full run: a busy machine is refused, not measured);
``SEEDS`` turns its cells and verdicts into the numbers the source's claim is about.
Results: ``bench/results/seeds.json`` and ``.md`` (full), ``seeds_reduced.*`` (reduced),
each with the machine check the experiment took (load average before, other processes'
CPU during).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from bench.common import machine_info, write_results
from bench.seeds_report import PHASES, render
from grpc_overhead.processes import offline_env

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
#: Reduced versions for ``make bench``: settings replaced, matrix values kept or narrowed.
REDUCED: dict[str, dict[str, Any]] = {
    "compression": {"calls": 60, "rounds": 2, "warmup_calls": 5},
    "connection_age": {"duration": 4, "rounds": 2},
    "channels_streaming": {"duration": 1, "rounds": 1, "matrix": {"concurrency": [1, 16]}},
    "tls": {"calls": 150, "rounds": 2, "warmup_calls": 10},
    "rest_vs_grpc": {"calls": 12, "rounds": 2, "warmup_calls": 2},
}
Document = dict[str, Any]
#: Each seed's setting and published figure, beside which ours is put.
SOURCES: dict[str, dict[str, str]] = {
    "compression": {
        "source": "DoorDash, gRPC model serving (Kotlin, grpc-java)",
        "setting": "five algorithms on a characteristic ranking request, production network",
        "figure": "zstd the lowest end-to-end latency, over 12 % below gzip",
    },
    "connection_age": {
        "source": "DoorDash, client-side load balancing",
        "setting": "long-lived gRPC connections to instances behind one address",
        "figure": "connections pin load to instances; a small max connection age spreads it",
    },
    "tls": {
        "source": "a crude Python gRPC benchmark over TLS (two t3a.micro hosts)",
        "setting": "Python grpcio, a loop of small requests, perf_counter_ns",
        "figure": "about 0.6-0.7 ms for a full RPC over TLS between the two hosts",
    },
    "channels_streaming": {
        "source": "Hazelcast Jet, 10 M queries/s on one node (grpc-java, 36 vCPU)",
        "setting": "8-byte payloads, channels x outstanding RPCs, unary vs bidi streaming",
        "figure": "channels the biggest factor (20-30x); an outstanding-RPC sweet spot; "
        "bidi streaming ~2x unary, batching ~7x",
    },
    "rest_vs_grpc": {
        "source": "Torchserve REST vs gRPC for images (Python, FastAPI)",
        "setting": "structured 0.001 MB; images 0.23 / 0.87 / 2.3 MB, base64 JSON or binary",
        "figure": "gRPC ~6x faster for the small structured request; the gap shrinks as "
        "images grow; base64 costs more than binary",
    },
}


def _find(cells: list[Document], **config: Any) -> Document | None:
    return next((c for c in cells if all(c["config"].get(k) == v for k, v in config.items())), None)


def _against(document: Document, cell: Document | None) -> Document | None:
    """The cell's comparison with its baseline (the experiment's own verdict)."""
    if cell is None:
        return None
    return next((c for c in document["comparisons"] if c["run_id"] == cell["run_id"]), None)


def _verdict(comparison: Document | None, phase: str = "total") -> Document | None:
    if comparison is None:
        return None
    item = next((p for p in comparison["phases"] if p["phase"] == phase), None)
    cause = comparison.get("explained_by") or {}
    return (
        None
        if item is None
        else {
            "verdict": item["verdict"],
            "diff_us": item["diff_us"],
            "ci_us": item["ci_us"],
            "baseline_p50_us": item["baseline_p50_us"],
            "p50_us": item["p50_us"],
            "explained_by": cause.get("phase"),
            "explained_us": cause.get("diff_us"),
        }
    )


def _p50(cell: Document | None, phase: str = "total") -> float | None:
    return None if cell is None else (cell["phases"].get(phase) or {}).get("p50_us")


def compression(document: Document) -> Document:
    cells, out = document["cells"], {}
    for path, limit in (("loopback", None), ("5 MB/s", 5000)):
        mine = [c for c in cells if c["config"]["bandwidth_kb_s"] == limit]
        if not mine:
            continue
        zstd, gzip = _find(mine, compression="zstd"), _find(mine, compression="gzip")
        out[path] = {
            "p50_us": {c["config"]["compression"]: _p50(c) for c in mine},
            "fastest": min(mine, key=lambda c: _p50(c) or 1e18)["config"]["compression"],
            "zstd_vs_gzip": _verdict(_against(document, zstd)),
            "zstd_over_gzip_p50": None
            if not (_p50(zstd) and _p50(gzip))
            else round(_p50(zstd) / _p50(gzip), 3),
            "none_vs_gzip": _verdict(_against(document, _find(mine, compression="none"))),
        }
    return out


def connection_age(document: Document) -> Document:
    return {
        str(c["config"]["max_connection_age_s"]): {
            "instances": c["instances"],
            "imbalance": c["imbalance"],
            "calls_per_s": c["calls_per_s"],
            "p50_us": c["p50_us"],
            "p99_us": c["p99_us"],
            "errors": c["errors"],
            "against_no_age": _verdict(_against(document, c)),
        }
        for c in document["cells"]
    }


def tls(document: Document) -> Document:
    cells, out = document["cells"], {}
    for path, latency in (("loopback", None), ("1 ms each way", 1)):
        plain = _find(cells, latency_ms=latency, tls=False)
        secure = _find(cells, latency_ms=latency, tls=True)
        if plain and secure:
            out[path] = {
                "plaintext_p50_us": _p50(plain),
                "tls_p50_us": _p50(secure),
                "tls_vs_plaintext": _verdict(_against(document, secure)),
                "handshake_ms": {"plaintext": plain["connect_ms"], "tls": secure["connect_ms"]},
            }
    return out


def channels_streaming(document: Document) -> Document:
    cells, out = document["cells"], {}
    for mode in ("unary", "stream", "batch"):
        for channels in sorted({c["config"]["channels"] for c in cells}):
            mine = [
                c
                for c in cells
                if (c["config"]["mode"], c["config"]["channels"]) == (mode, channels)
            ]
            curve = sorted(mine, key=lambda c: c["config"]["concurrency"])
            points = [
                {
                    "outstanding": c["config"]["concurrency"],
                    "predictions_per_s": c["predictions_per_s"],
                    "p99_us": c["p99_us"],
                }
                for c in curve
            ]
            out[f"{mode}, {channels} channel(s)"] = {"curve": points, "knee": knee(points)}
    best = {
        mode: max(
            (c["predictions_per_s"] for c in cells if c["config"]["mode"] == mode), default=None
        )
        for mode in ("unary", "stream", "batch")
    }
    out["best_predictions_per_s"] = best
    if best["unary"]:
        out["stream_over_unary"] = round((best["stream"] or 0) / best["unary"], 3)
        out["batch_over_unary"] = round((best["batch"] or 0) / best["unary"], 3)
    return out


def _shape(cell: Document) -> tuple[str, int]:
    return cell["config"]["mode"], cell["config"]["channels"]


def knee(points: list[Document]) -> int | None:
    """The outstanding RPCs past which throughput grows less than 10 % more (None: it kept
    growing over the range measured)."""
    for here, after in itertools.pairwise(points):
        if after["predictions_per_s"] < 1.10 * here["predictions_per_s"]:
            return here["outstanding"]
    return None


def rest_vs_grpc(document: Document) -> Document:
    cells, out = document["cells"], {}
    sizes = [("structured", "structured", 230000)] + [
        (f"image {size / 1e6:g} MB", "image", size) for size in (230000, 870000, 2300000)
    ]
    for name, payload, size in sizes:
        grpc = _find(cells, transport="grpc", payload=payload, image_bytes=size)
        if grpc is None:
            continue
        entry: Document = {"grpc_p50_us": _p50(grpc)}
        for body in ("json", "binary"):
            rest = _find(cells, transport="rest", payload=payload, image_bytes=size, rest_body=body)
            if rest is None:
                continue
            entry[f"rest_{body}_p50_us"] = _p50(rest)
            entry[f"rest_{body}_over_grpc"] = (
                round(_p50(rest) / _p50(grpc), 3) if _p50(grpc) else None
            )
            entry[f"rest_{body}_vs_grpc"] = _verdict(_against(document, rest))
            entry[f"rest_{body}_client_serialize_us"] = _p50(rest, "client_serialize")
        out[name] = entry
    return out


SEEDS: dict[str, Callable[[Document], Document]] = {
    "compression": compression,
    "connection_age": connection_age,
    "tls": tls,
    "channels_streaming": channels_streaming,
    "rest_vs_grpc": rest_vs_grpc,
}


CELL_KEYS = (
    "label",
    "calls",
    "errors",
    "calls_per_s",
    "predictions_per_s",
    "p50_us",
    "p99_us",
    "under_load",
)
COMPARISON_KEYS = ("label", "baseline_label", "verdict", "diff_us", "ci_us", "explained_by")


#: How long a full run waits for the load average of its own previous seed to settle.
SETTLE_S = 420.0
QUIET_LOAD = 1.5


def settle(limit_s: float = SETTLE_S) -> float:
    """Wait until the 1-minute load average is below ``QUIET_LOAD`` (the previous seed's
    own processes keep it up for a minute or two after they end), at most ``limit_s``;
    the load average reached. ``--require-quiet`` then judges the machine."""
    deadline = time.monotonic() + limit_s
    while os.getloadavg()[0] >= QUIET_LOAD and time.monotonic() < deadline:
        time.sleep(5)
    return os.getloadavg()[0]


def _phases(cell: Document) -> Document:
    """p50 and its interval per phase (µs), as the experiment took them."""
    return {
        phase: {
            "p50_us": (cell["phases"].get(phase) or {}).get("p50_us"),
            "ci_us": (cell["phases"].get(phase) or {}).get("ci_us"),
        }
        for phase in PHASES
    }


def run_seed(name: str, full: bool, workdir: Path) -> Document:
    path = EXPERIMENTS / f"{name}.yaml"
    document = yaml.safe_load(path.read_text())
    if not full:
        reduced = REDUCED.get(name, {})
        matrix = {**document.get("matrix", {}), **reduced.get("matrix", {})}
        document.update({k: v for k, v in reduced.items() if k != "matrix"})
        document["matrix"] = matrix
    spec = workdir / f"{name}.yaml"
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    command = [
        sys.executable,
        "-m",
        "grpc_overhead",
        "experiment",
        str(spec),
        "--store",
        str(workdir / f"{name}-store"),
        "--format",
        "json",
    ]
    if full:
        command.append("--require-quiet")
        settle()
    started = time.monotonic()
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=offline_env(),
        stdin=subprocess.DEVNULL,
        timeout=5400,
    )
    if done.returncode == 3:
        raise RuntimeError(f"{path.name}: refused, the machine is busy: {done.stderr.strip()}")
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{path.name}: exit {done.returncode}: {done.stderr[-800:]}")
    result = json.loads(done.stdout)
    return {
        "file": f"experiments/{path.name}",
        "seconds": round(time.monotonic() - started),
        "rounds": result["rounds"],
        "machine": result["machine"],
        "source": SOURCES[name],
        "ours": SEEDS[name](result),
        "cells": [
            {**{key: cell[key] for key in CELL_KEYS}, "phases": _phases(cell)}
            for cell in result["cells"]
        ],
        "comparisons": [
            {key: item[key] for key in COMPARISON_KEYS} for item in result["comparisons"]
        ],
        "failed": result["failed"],
    }


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    full = "--full" in argv
    names = [name for name in argv if not name.startswith("--")] or list(SEEDS)
    unknown = [name for name in names if name not in SEEDS]
    if unknown:
        print(f"unknown seed(s): {', '.join(unknown)}; known: {', '.join(SEEDS)}")
        return 2
    output = "seeds" if full else "seeds_reduced"
    results: Document = {"full": full, "machine": machine_info(), "seeds": {}}
    previous = ROOT / "bench" / "results" / f"{output}.json"
    if previous.is_file() and set(names) != set(SEEDS):  # one seed rerun: keep the others
        results["seeds"] = json.loads(previous.read_text()).get("seeds", {})
    code = 0
    with tempfile.TemporaryDirectory(prefix="bench-seeds-") as workdir:
        for name in names:
            print(f"seed {name} ({'full' if full else 'reduced'})", flush=True)
            try:
                outcome = run_seed(name, full, Path(workdir))
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                print(f"  failed: {error}", flush=True)
                code = 1
                continue
            results["seeds"][name] = outcome
            load = outcome["machine"]["before"].get("load_average")
            print(
                f"  {len(outcome['cells'])} cells x {outcome['rounds']} rounds in "
                f"{outcome['seconds']} s (load before {load}, under load: "
                f"{outcome['machine']['under_load']}): {json.dumps(outcome['ours'])}",
                flush=True,
            )
    for path in write_results(output, results, render(results)):
        print(f"wrote {path}")
    return code


if __name__ == "__main__":
    sys.exit(main())
