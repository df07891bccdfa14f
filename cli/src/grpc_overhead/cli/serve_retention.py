"""``serve --retention/--rollup-retention/--max-store-gb``: what the store keeps.

The SQL is the analyzer's (``analyzer.retention``); here are the flags, their checks and
the keeper serve runs beside its settle loop.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field

from grpc_overhead.analyzer.errors import AnalyzerError, BadInput
from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.retention import (
    Retention,
    apply_retention,
    keep_within_budget,
    parse_duration,
)
from grpc_overhead.analyzer.store import Store

#: How often the keeper looks: cheap (system tables only) unless the budget is exceeded.
KEEP_INTERVAL_S = 5.0


def add_retention_arguments(result: argparse.ArgumentParser) -> None:
    kept = result.add_argument_group("what the store keeps (default: everything, forever)")
    kept.add_argument(
        "--retention",
        metavar="DURATION",
        help="drop spans and calls this long after they started (30m, 12h, 7d, 2w); the "
        "engine expires them in its background merges",
    )
    kept.add_argument(
        "--rollup-retention",
        metavar="DURATION",
        help="keep the per-minute rollups (what pages read for long ranges) and run records "
        "this long; at least --retention (default: kept)",
    )
    kept.add_argument(
        "--max-store-gb",
        type=gigabytes,
        metavar="GB",
        help="disk budget of an embedded store: past it, the oldest spans and calls go (to "
        "80 %% of it) so new spans keep being stored",
    )


def gigabytes(text: str) -> float:
    """A positive, finite number of gigabytes (argparse says what is wrong otherwise)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size in GB above 0 (e.g. 20, 0.5)")
    return value


def retention_from_args(args: argparse.Namespace) -> Retention:
    """The flags as a ``Retention``; ``BadInput`` says what is wrong with them."""
    if args.max_store_gb is not None and args.clickhouse:
        raise BadInput(
            "--max-store-gb is for an embedded store: a ClickHouse server manages its own "
            "disk (use --retention there, or the server's storage policies)"
        )
    return Retention(
        raw=parse_duration(args.retention) if args.retention else None,
        rollups=parse_duration(args.rollup_retention) if args.rollup_retention else None,
        max_bytes=None if args.max_store_gb is None else int(args.max_store_gb * 1e9),
    )


@dataclass
class StoreKeeper:
    """Keeps the TTLs in place and the store within its budget, every ``KEEP_INTERVAL_S``.

    A failure is said and retried next time, never fatal: serve goes on storing spans.
    """

    store: Store
    options: CallsOptions
    retention: Retention
    every_s: float = KEEP_INTERVAL_S
    _last: float = field(default=0.0, repr=False)

    def __call__(self) -> None:
        if not self.retention.active or time.monotonic() - self._last < self.every_s:
            return
        self._last = time.monotonic()
        try:
            apply_retention(self.store, self.options, self.retention)
            if self.retention.max_bytes:
                budget = keep_within_budget(self.store, self.options, self.retention.max_bytes)
                if budget.cutoff is not None:
                    print(f"grpc-overhead serve: {budget.describe()}", flush=True)
                elif budget.bytes_before > self.retention.max_bytes:
                    print(
                        f"grpc-overhead serve: {budget.describe()}, with no spans left to "
                        "drop: the rollups alone outgrow it (raise --max-store-gb or give "
                        "--rollup-retention)",
                        file=sys.stderr,
                        flush=True,
                    )
        except AnalyzerError as error:
            print(
                f"grpc-overhead serve: keeping the store's retention failed (retrying): {error}",
                file=sys.stderr,
                flush=True,
            )
