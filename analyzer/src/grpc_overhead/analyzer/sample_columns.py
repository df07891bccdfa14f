"""``grpc_calls`` columns of a sampled message's measured compressibility.

Our instrumentation measures, for a few sent messages (at most one per method
per interval and process side), what gzip and deflate would make of them and
what that costs in CPU: span attributes ``grpc_overhead.compressibility.*``
(the instrumentation's vocabulary.py). A client span's sample is a request, a
server span's a response, so each direction's columns are filled by one half
only. Calls without a sample (almost all of them) hold -1 in every one of
these columns, a value no reader counts (``SAMPLED``). The algorithm list is
fixed here, not read from the installed grpcio: the table's columns must not
depend on which grpcio the analyzer happens to run with.
"""

from __future__ import annotations

#: The algorithms gRPC Python offers (grpcio 1.85: no zstd).
ALGORITHMS: tuple[str, ...] = ("gzip", "deflate")
DIRECTIONS: tuple[str, ...] = ("request", "response")
#: Which half samples each direction: the sender.
SENDER = {"request": "client", "response": "server"}
#: (measure, column type): compressed / measured bytes, CPU ns per MB (1e6 bytes).
MEASURES: tuple[tuple[str, str], ...] = (
    ("ratio", "Float64"),
    ("compress_ns_per_mb", "Int64"),
    ("decompress_ns_per_mb", "Int64"),
)
_PREFIX = "grpc_overhead.compressibility."


def column(direction: str, algorithm: str, measure: str) -> str:
    """e.g. ``request_gzip_ratio``."""
    return f"{direction}_{algorithm}_{measure}"


def size_column(direction: str) -> str:
    """The sampled message's size in bytes (uncompressed), e.g. ``request_sample_bytes``."""
    return f"{direction}_sample_bytes"


def sampled(direction: str) -> str:
    """SQL: the merged call carries a sample of this direction."""
    return f"{size_column(direction)} >= 0"


def _attribute(name: str, kind: str) -> str:
    return f"to{kind}OrDefault(SpanAttributes['{_PREFIX}{name}'], to{kind}(-1))"


def specs() -> list[tuple[str, str, str, str, str]]:
    """(column, type, half that fills it, its expression, absent value) per column."""
    out = []
    for direction in DIRECTIONS:
        side = SENDER[direction]
        out.append(
            (
                size_column(direction),
                "Int64",
                side,
                _attribute("message_bytes", "Int64"),
                "toInt64(-1)",
            )
        )
        for algorithm in ALGORITHMS:
            for measure, kind in MEASURES:
                out.append(
                    (
                        column(direction, algorithm, measure),
                        kind,
                        side,
                        _attribute(f"{algorithm}.{measure}", kind),
                        f"to{kind}(-1)",
                    )
                )
    return out


_MEANINGS = {
    "ratio": "compressed / uncompressed bytes",
    "compress_ns_per_mb": "CPU ns per MB (1e6 bytes) to compress",
    "decompress_ns_per_mb": "CPU ns per MB (1e6 bytes) to decompress",
}


def sample_view_columns() -> list[tuple[str, str, str]]:
    """(column, expression, what it is) of ``grpc_call_phases``: NULL where not sampled."""
    out = []
    for direction in DIRECTIONS:
        size = size_column(direction)
        out.append(
            (
                size,
                f"if({sampled(direction)}, {size}, NULL)",
                f"size of the {direction} message sampled for its compressibility (NULL: none)",
            )
        )
        for algorithm in ALGORITHMS:
            for measure, _ in MEASURES:
                name = column(direction, algorithm, measure)
                out.append(
                    (
                        name,
                        f"if({sampled(direction)}, {name}, NULL)",
                        f"sampled {direction}: {algorithm} {_MEANINGS[measure]} (NULL: none)",
                    )
                )
    return out
