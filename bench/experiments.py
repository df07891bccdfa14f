"""The bundled experiments (``experiments/*.yaml``), each compared with the finding of its source.

    python -m bench.run experiments              # reduced versions (fewer calls and cells)
    python -m bench.run experiments -- --full    # the files as shipped (about 20 minutes)

Each experiment runs as a user runs it (``grpc-overhead experiment FILE --format
json`` on a fresh store); ``FINDINGS`` turns its cells into the numbers the
source's claim is about (ratios and shapes: absolute numbers differ on 2
cores over loopback). Results: ``bench/results/experiments.json`` and ``.md``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from bench.common import machine_info, write_results
from grpc_overhead.cli.processes import offline_env

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
#: Reduced versions for ``make bench``: settings replaced, matrix values kept.
REDUCED: dict[str, dict[str, Any]] = {
    "compression": {"calls": 200, "warmup_calls": 20},
    "connection_age": {"duration": 6},
    "channels_streaming": {"duration": 2, "matrix": {"concurrency": [1, 16]}},
    "tls": {"calls": 400, "warmup_calls": 40},
    "rest_vs_grpc": {"calls": 40, "warmup_calls": 5},
}
Cells = list[dict[str, Any]]


def _cell(cells: Cells, **config: Any) -> dict[str, Any] | None:
    for cell in cells:
        if all(cell["config"].get(key) == value for key, value in config.items()):
            return cell
    return None


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or not b else round(a / b, 3)


def compression(cells: Cells) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, limit in (("loopback", None), ("5 MB/s", 5000)):
        rows = {
            c["config"]["compression"]: c for c in cells if c["config"]["bandwidth_kb_s"] == limit
        }
        if not rows:
            continue
        out[path] = {
            codec: {"p50_us": c["p50_us"], "calls_per_s": c["calls_per_s"],
                    "request_network_p50_us": c["phases"]["request_network"]["p50_us"]}
            for codec, c in rows.items()
        }  # fmt: skip
        if "zstd" in rows and "gzip" in rows:
            out[path]["zstd_over_gzip_p50"] = _ratio(rows["zstd"]["p50_us"], rows["gzip"]["p50_us"])
        out[path]["fastest_p50"] = min(rows, key=lambda codec: rows[codec]["p50_us"] or 1e18)
    return out


def connection_age(cells: Cells) -> dict[str, Any]:
    return {
        str(c["config"]["max_connection_age_s"]): {
            "calls_per_s": c["calls_per_s"], "p50_us": c["p50_us"], "p99_us": c["p99_us"],
            "errors": c["errors"],
        }
        for c in cells
    }  # fmt: skip


def channels_streaming(cells: Cells) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for cost in sorted({c["config"]["model_cost_ms"] for c in cells}):
        mine = [c for c in cells if c["config"]["model_cost_ms"] == cost]
        best = {mode: max((c["predictions_per_s"] for c in mine if c["config"]["mode"] == mode),
                          default=None) for mode in ("unary", "stream", "batch")}  # fmt: skip
        top = max(c["config"]["concurrency"] for c in mine)
        by_channels = {ch: _cell(mine, mode="unary", channels=ch, concurrency=top) for ch in (1, 4)}
        out[f"model_cost_ms={cost:g}"] = {
            "best_predictions_per_s": best,
            "batch_over_unary": _ratio(best["batch"], best["unary"]),
            "stream_over_unary": _ratio(best["stream"], best["unary"]),
            f"unary_4_channels_over_1_at_concurrency_{top}": _ratio(
                *(
                    by_channels[ch]["predictions_per_s"] if by_channels[ch] else None
                    for ch in (4, 1)
                )
            ),
            "unary_concurrency_over_1": _ratio(
                max(c["predictions_per_s"] for c in mine if c["config"]["mode"] == "unary"),
                min(c["predictions_per_s"] for c in mine if c["config"]["mode"] == "unary"),
            ),
        }
    return out


def tls(cells: Cells) -> dict[str, Any]:
    out = {}
    for entities in sorted({c["config"]["entities"] for c in cells}):
        plain, secure = (
            _cell(cells, entities=entities, tls=False),
            _cell(cells, entities=entities, tls=True),
        )
        if plain and secure:
            out[f"{entities}_entities"] = {
                "plaintext_p50_us": plain["p50_us"], "tls_p50_us": secure["p50_us"],
                "tls_added_p50_us": round(secure["p50_us"] - plain["p50_us"], 1),
                "tls_calls_per_s_ratio": _ratio(secure["calls_per_s"], plain["calls_per_s"]),
            }  # fmt: skip
    return out


def rest_vs_grpc(cells: Cells) -> dict[str, Any]:
    out: dict[str, Any] = {}
    grpc = _cell(cells, transport="grpc", payload="structured")
    rest = _cell(cells, transport="rest", payload="structured")
    if grpc and rest:
        out["structured"] = {
            "grpc_p50_us": grpc["p50_us"],
            "rest_p50_us": rest["p50_us"],
            "rest_over_grpc_p50": _ratio(rest["p50_us"], grpc["p50_us"]),
        }
    for size in (230000, 870000, 2300000):
        grpc = _cell(cells, transport="grpc", payload="image", image_bytes=size)
        base64 = _cell(cells, transport="rest", payload="image", image_bytes=size, rest_body="json")
        binary = _cell(
            cells, transport="rest", payload="image", image_bytes=size, rest_body="binary"
        )
        if grpc is None:
            continue
        out[f"image_{size / 1e6:g}MB"] = {
            "grpc_p50_us": grpc["p50_us"],
            "rest_base64_p50_us": base64 and base64["p50_us"],
            "rest_binary_p50_us": binary and binary["p50_us"],
            "rest_base64_over_grpc_p50": _ratio(base64 and base64["p50_us"], grpc["p50_us"]),
            "rest_binary_over_grpc_p50": _ratio(binary and binary["p50_us"], grpc["p50_us"]),
            "base64_client_serialize_p50_us": (
                base64 and base64["phases"]["client_serialize"]["p50_us"]
            ),
        }  # fmt: skip
    return out


FINDINGS: dict[str, Callable[[Cells], dict[str, Any]]] = {
    "compression": compression,
    "connection_age": connection_age,
    "channels_streaming": channels_streaming,
    "tls": tls,
    "rest_vs_grpc": rest_vs_grpc,
}


def run_experiment(path: Path, full: bool, workdir: Path) -> dict[str, Any]:
    document = yaml.safe_load(path.read_text())
    if not full:
        reduced = REDUCED.get(path.stem, {})
        matrix = {**document.get("matrix", {}), **reduced.get("matrix", {})}
        document.update({k: v for k, v in reduced.items() if k != "matrix"})
        document["matrix"] = matrix
    spec = workdir / f"{path.stem}.yaml"
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "grpc_overhead", "experiment", str(spec), "--store",
         str(workdir / f"{path.stem}-store"), "--format", "json"],
        capture_output=True, text=True, env=offline_env(), stdin=subprocess.DEVNULL,
        timeout=3600,
    )  # fmt: skip
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{path.name}: exit {done.returncode}: {done.stderr[-800:]}")
    result = json.loads(done.stdout)
    return {
        "file": f"experiments/{path.name}",
        "seconds": round(time.monotonic() - started),
        "cells": result["cells"],
        "failed": result["failed"],
        "winners": result["winners"],
        "explanation": result["explanation"],
        "findings": FINDINGS[path.stem](result["cells"]),
    }


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    full = "--full" in argv
    names = [name for name in argv if not name.startswith("--")] or list(FINDINGS)
    results: dict[str, Any] = {"full": full, "machine": machine_info(), "experiments": {}}
    code = 0
    with tempfile.TemporaryDirectory(prefix="bench-experiments-") as workdir:
        for name in names:
            print(f"experiment {name} ({'full' if full else 'reduced'})", flush=True)
            try:
                outcome = run_experiment(EXPERIMENTS / f"{name}.yaml", full, Path(workdir))
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                print(f"  failed: {error}", flush=True)
                code = 1
                continue
            results["experiments"][name] = outcome
            print(f"  {len(outcome['cells'])} cells in {outcome['seconds']} s: "
                  f"{json.dumps(outcome['findings'])}", flush=True)  # fmt: skip
    for path in write_results("experiments_full" if full else "experiments", results,
                              render(results)):  # fmt: skip
        print(f"wrote {path}")
    return code


def render(results: dict[str, Any]) -> str:
    lines = [f"# Bundled experiments ({'full' if results['full'] else 'reduced'} run)", "",
             f"Machine: {json.dumps(results['machine'])}", ""]  # fmt: skip
    for name, outcome in results["experiments"].items():
        lines += [f"## {name} (`{outcome['file']}`, {len(outcome['cells'])} cells, "
                  f"{outcome['seconds']} s)", "",
                  "| cell | calls/s | predictions/s | p50 µs | p99 µs | errors |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for cell in outcome["cells"]:
            lines.append(
                f"| {cell['label']} | {cell['calls_per_s']:,.0f} "
                f"| {cell['predictions_per_s']:,.0f} | {cell['p50_us'] or 0:,.0f} "
                f"| {cell['p99_us'] or 0:,.0f} | {cell['errors']} |"
            )
        lines += ["", f"{outcome['explanation']}", "", "Findings:", "", "```",
                  json.dumps(outcome["findings"], indent=2), "```", ""]  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
