"""``make bench``: run every benchmark module, in a fixed order, and say where results went.

Every ``bench/<name>.py`` exposing ``main(argv) -> int`` is a benchmark; a module
named ``<benchmark>_<part>.py`` is a part of one (``instrumentation_report``). ``ORDER``
fixes which run first (add one line to place a new one); modules not listed run
after them, alphabetically, so a new benchmark is never silently skipped.

    python -m bench.run                       # all of them
    python -m bench.run instrumentation       # only the named ones
    python -m bench.run instrumentation -- --quick   # arguments after -- go to each main()
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

ORDER: tuple[str, ...] = ("instrumentation",)
_NOT_BENCHMARKS = {"run", "common"}


def discover() -> list[str]:
    """Benchmark module names in run order."""
    found = {
        module.name
        for module in pkgutil.iter_modules([str(Path(__file__).parent)])
        if not module.ispkg
        and module.name not in _NOT_BENCHMARKS
        and not module.name.startswith("_")
    }
    found = {name for name in found if not any(name.startswith(f"{other}_") for other in found)}
    listed = [name for name in ORDER if name in found]
    return listed + sorted(found - set(listed))


def _entry(name: str) -> Callable[[list[str]], int] | None:
    entry = getattr(importlib.import_module(f"bench.{name}"), "main", None)
    return entry if callable(entry) else None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    passed: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, passed = argv[:split], argv[split + 1 :]
    available = discover()
    unknown = [name for name in argv if name not in available]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(available)}")
        return 2
    selected = argv or available
    outcomes: list[tuple[str, int, float]] = []
    for name in selected:
        entry = _entry(name)
        if entry is None:
            continue
        print(f"== bench.{name}", flush=True)
        started = time.monotonic()
        try:
            code = entry(list(passed))
        except Exception:  # one broken benchmark must not hide the others
            traceback.print_exc()
            code = 1
        outcomes.append((name, code, time.monotonic() - started))
    print("\n== summary")
    for name, code, seconds in outcomes:
        print(f"bench.{name}: {'ok' if code == 0 else f'exit {code}'} in {seconds:.0f} s")
    return max((code for _, code, _ in outcomes), default=0)


if __name__ == "__main__":
    sys.exit(main())
