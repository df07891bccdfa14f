"""The fault suite's unauthenticated phase: an intake asking for tokens, flooded over gRPC
and HTTP by senders with no token, a wrong one or a bad basic-auth pair, while senders with
the token send beside them (``fault_suite`` runs it after the flood and the crash)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from harness.fault_load import (
    Ledger,
    Scale,
    SenderPlan,
    invariants,
    run_senders,
    stored_counts,
)


def unauthenticated(scale: Scale, directory: str) -> dict[str, Any]:
    from grpc_overhead.analyzer.intake import Credentials, Intake, IntakeConfig
    from grpc_overhead.analyzer.store import open_store

    Path(directory).mkdir(parents=True, exist_ok=True)
    tokens = Path(directory) / "tokens"
    tokens.write_text("fault-suite-token\n")
    good, flooded, stop = Ledger(), Ledger(), threading.Event()
    store = open_store(str(Path(directory) / "store"))
    config = IntakeConfig(port=0, http_port=0, credentials=Credentials(tokens))
    intake = Intake(store, config)
    intake.start()
    grpc_target, http_target = f"127.0.0.1:{intake.port}", intake.http_url
    plans = [
        (
            SenderPlan(
                sender,
                (grpc_target, http_target)[sender % 2],
                scale.requests,
                scale.spans,
                transport=("grpc", "http")[sender % 2],
                authorization="Bearer fault-suite-token",
            ),
            good,
        )
        for sender in range(1, scale.senders // 2 + 1)
    ]
    wrong = ("", "Bearer not-the-token", "Basic Zm9vOmJhcg==", "Bearer ")
    plans += [
        (
            SenderPlan(
                200 + sender,
                (grpc_target, http_target)[sender % 2],
                scale.requests * 2,
                scale.spans,
                transport=("grpc", "http")[sender % 2],
                authorization=wrong[sender % len(wrong)],
                attempts=1,
            ),
            flooded,
        )
        for sender in range(scale.senders * 2)
    ]
    started = time.monotonic()
    for thread in run_senders(plans, stop):
        thread.join()
    elapsed = time.monotonic() - started
    intake.stop()
    stats = intake.stats()
    store.close()
    stored = stored_counts(str(Path(directory) / "store"))
    flood_ids = flooded.acknowledged | flooded.refused | flooded.unknown
    return {
        "seconds": round(elapsed, 1),
        "authenticated": {"requests": dict(good.requests), **invariants(good, stored)},
        "unauthenticated": {
            "requests": dict(flooded.requests),
            "attempts": dict(flooded.attempts),
            "spans_sent": len(flood_ids),
            "stored": len(flood_ids & stored.keys()),
        },
        "intake_unauthenticated_counter": stats.requests_unauthenticated,
        "stored_rows": sum(stored.values()),
    }
