"""Write (or check) the dashboards' JSON files.

python -m grpc_overhead.analyzer.grafana dashboards/           write them
python -m grpc_overhead.analyzer.grafana dashboards/ --check   exit 1 if any differs
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grpc_overhead.analyzer.grafana.dashboards import DASHBOARDS


def render(builder_name: str) -> str:
    """One dashboard's file text: stable key order, two-space indent, final newline."""
    return json.dumps(DASHBOARDS[builder_name](), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpc_overhead.analyzer.grafana")
    parser.add_argument("directory", type=Path, help="where the dashboards' JSON files go")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    stale = []
    for name in DASHBOARDS:
        path = args.directory / name
        text = render(name)
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print("out of date (regenerate with the command without --check):", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
