"""Regenerate the Python modules for prediction.proto with grpc_tools.protoc.

    python -m grpc_overhead.prediction.protos.generate            # rewrite in place
    python -m grpc_overhead.prediction.protos.generate --check    # exit 1 if stale

protoc names generated modules after the proto's path relative to its include
root and writes ``import prediction_pb2`` style imports, which break inside a
package. Instead of patching the output, the proto is staged under
``grpc_overhead/prediction/protos/`` in a temporary include root: the generated
imports then use the full namespace (``from grpc_overhead.prediction.protos
import prediction_pb2``) and the descriptor is registered under a unique name
(``grpc_overhead/prediction/protos/prediction.proto``), so it cannot clash with
another ``prediction.proto`` in the process-wide descriptor pool.

The output depends on the grpcio-tools version (pinned in pyproject's dev
extra); tests/prediction/test_prediction_protos.py fails when the committed
files differ from a fresh generation.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
PROTO_NAME = "prediction.proto"
PACKAGE_PATH = Path("grpc_overhead", "prediction", "protos")
GENERATED = ("prediction_pb2.py", "prediction_pb2_grpc.py", "prediction_pb2.pyi")


def generate(output_dir: Path, proto: Path = PROTO_DIR / PROTO_NAME) -> list[Path]:
    """Generate the three modules from ``proto`` into ``output_dir``; return their paths."""
    import grpc_tools
    from grpc_tools import protoc

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    well_known = Path(grpc_tools.__file__).resolve().parent / "_proto"
    with tempfile.TemporaryDirectory(prefix="grpc-overhead-protos-") as tmp:
        root = Path(tmp, "include")
        staged = root / PACKAGE_PATH / PROTO_NAME
        staged.parent.mkdir(parents=True)
        shutil.copyfile(proto, staged)
        out = Path(tmp, "out")
        out.mkdir()
        args = [
            "grpc_tools.protoc",
            f"-I{root}",
            f"-I{well_known}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            str(PACKAGE_PATH / PROTO_NAME),
        ]
        # protoc resolves the input relative to an include root: run from it.
        code = _run_protoc(protoc, args, cwd=root)
        if code != 0:
            raise RuntimeError(f"protoc failed with exit code {code} for {proto}")
        written = []
        for name in GENERATED:
            source = out / PACKAGE_PATH / name
            target = output_dir / name
            shutil.copyfile(source, target)
            written.append(target)
    return written


def _run_protoc(protoc, args: list[str], cwd: Path) -> int:
    import os

    previous = os.getcwd()
    os.chdir(cwd)
    try:
        return protoc.main(args)
    finally:
        os.chdir(previous)


def stale_files(directory: Path = PROTO_DIR) -> list[str]:
    """Names of generated files in ``directory`` that differ from a fresh generation."""
    with tempfile.TemporaryDirectory(prefix="grpc-overhead-protos-check-") as tmp:
        fresh = generate(Path(tmp))
        stale = []
        for path in fresh:
            committed = Path(directory, path.name)
            if not committed.exists() or committed.read_bytes() != path.read_bytes():
                stale.append(path.name)
        return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m grpc_overhead.prediction.protos.generate",
        description="Regenerate prediction_pb2{,_grpc}.py and prediction_pb2.pyi.",
    )
    parser.add_argument("--output-dir", type=Path, default=PROTO_DIR)
    parser.add_argument(
        "--check", action="store_true", help="only check that the committed files are current"
    )
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.output_dir)
        if stale:
            print(f"stale generated files: {', '.join(stale)}", file=sys.stderr)
            return 1
        print("generated files are current")
        return 0
    for path in generate(args.output_dir):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
