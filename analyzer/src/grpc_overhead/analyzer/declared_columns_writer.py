"""``python -m grpc_overhead.analyzer.declared_columns_writer``: write ``declared_columns``'
generated block from the installed engine (``DESCRIBE`` of each SELECT on a fresh store)."""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

from grpc_overhead.analyzer import declared_columns
from grpc_overhead.analyzer.call_rollup import settled_calls_parameters, settled_calls_select_sql
from grpc_overhead.analyzer.calls import create_calls
from grpc_overhead.analyzer.declared_columns import ColumnTypes, described
from grpc_overhead.analyzer.phase_view import messages_view_select_sql, view_select_sql
from grpc_overhead.analyzer.schema import create_schema
from grpc_overhead.analyzer.store import open_store


def engine_types() -> dict[str, ColumnTypes]:
    """Every declared SELECT's columns, described on a fresh embedded store."""
    with tempfile.TemporaryDirectory() as directory:
        store = open_store(str(Path(directory) / "store"))
        try:
            create_schema(store)
            create_calls(store)
            return {
                "PHASES_VIEW_COLUMNS": described(store, view_select_sql()),
                "MESSAGES_VIEW_COLUMNS": described(store, messages_view_select_sql()),
                "SETTLED_CALLS_COLUMNS": described(
                    store, settled_calls_select_sql(), settled_calls_parameters()
                ),
            }
        finally:
            store.close()


def _generated(types: dict[str, ColumnTypes]) -> str:
    lines = []
    for name, columns in types.items():
        lines.append(f"{name}: ColumnTypes = (")
        # JSON's quoting is ruff's: the file stays formatted as generated.
        lines += [f"    ({json.dumps(column)}, {json.dumps(kind)})," for column, kind in columns]
        lines.append(")")
    return "\n".join(lines) + "\n"


def main() -> int:
    """Rewrite ``declared_columns``' generated block from the installed engine."""
    path = Path(declared_columns.__file__)
    text = path.read_text()
    block = re.compile(r"(# BEGIN generated[^\n]*\n).*?(# END generated)", re.DOTALL)
    if not block.search(text):
        print(f"{path}: no generated block to rewrite", file=sys.stderr)
        return 1
    body = _generated(engine_types())
    path.write_text(block.sub(lambda match: match.group(1) + body + match.group(2), text))
    print(f"wrote the declared columns into {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
