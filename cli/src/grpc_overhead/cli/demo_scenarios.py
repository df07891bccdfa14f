"""What ``grpc-overhead demo`` plays: two prediction services and the load scenarios.

Data only, so the scenarios can be read (and tested) without starting anything:
``demo_stack.Demo`` starts the services and plays the scenarios, ``demo`` is the
command.
"""

from __future__ import annotations

from dataclasses import dataclass

#: One pass over every scenario lasts this long (shorter when --duration is shorter).
CYCLE_S = 120.0
#: A scenario shorter than this is mostly process start-up.
MIN_SCENARIO_S = 3.0
#: What starting and stopping one load generator process costs (imports, connecting).
LOAD_OVERHEAD_S = 1.5


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    args: tuple[str, ...]
    summary: str


SERVICES: tuple[ServiceSpec, ...] = (
    ServiceSpec(
        "predictor-a",
        ("--workers", "2", "--model-cost-ms", "2", "--max-connection-age-s", "20"),
        "2 workers, 2 ms model, connections recycled every 20 s",
    ),
    ServiceSpec("predictor-b", ("--aio", "--workers", "8"), "grpc.aio, 8 model workers"),
)


@dataclass(frozen=True)
class Scenario:
    """One ``grpc-overhead load`` run; ``weight`` is its share of a cycle."""

    name: str
    summary: str
    args: tuple[str, ...]
    weight: float = 1.0
    #: Service names to target (round-robin); empty: all of them.
    targets: tuple[str, ...] = ()
    #: The run id's suffix when it is not the name: scenarios meant to be compared share one.
    run: str = ""

    @property
    def run_id(self) -> str:
        return f"demo-{self.run or self.name}"


_TINY = ("--entities", "50", "--features", "16")
_MID = ("--entities", "300", "--features", "32", "--encoding", "packed", "--rps", "15")
SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "small",
        "small unary calls (20 x 16 features), 60/s",
        ("--entities", "20", "--features", "16", "--rps", "60"),
    ),
    Scenario(
        "large",
        "large payloads (1,000 x 64 features, ~250 KB), 4/s",
        ("--entities", "1000", "--features", "64", "--rps", "4", "--concurrency", "8"),
        weight=2,
    ),
    Scenario(
        "burst",
        "burst: 16 concurrent callers on predictor-a's 2 workers (queuing)",
        (*_TINY, "--concurrency", "16"),
        # Twice the others' time: its calls are what pins most of Predict to predictor-a
        # (load_imbalance), and a busy machine halves how many it makes in its slot; the
        # rate-bound scenarios make as many calls there as on a quiet one.
        weight=2,
        targets=("predictor-a",),
    ),
    Scenario(
        "stream",
        "bidirectional streams of 10 messages, 6/s",
        ("--mode", "stream", "--stream-messages", "10", *_TINY, "--rps", "6"),
    ),
    Scenario(
        "batch",
        "batched calls (8 requests per message), 8/s",
        ("--mode", "batch", "--batch-size", "8", *_TINY, "--rps", "8"),
    ),
    *(
        Scenario(
            f"compression-{codec}",
            f"38 KB requests compressed with {codec}, 15/s",
            (*_MID, "--compression", codec),
            run="compression",
        )
        for codec in ("none", "gzip", "zstd", "lz4", "snappy")
    ),
)
