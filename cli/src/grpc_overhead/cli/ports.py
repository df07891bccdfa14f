"""Port options on the command line: what a command accepts as a port, and what it says.

Whether a port is free and who holds it: ``grpc_overhead.processes.ports``.
"""

from __future__ import annotations

import argparse

#: OpenTelemetry's default OTLP/gRPC port: where an SDK sends with no endpoint configured.
STANDARD_OTLP_PORT = 4317


def port_number(text: str) -> int:
    """argparse type of a port option: 0..65535 (0: a free one), or a usage error.

    Not ``type=int``: gRPC takes 99999 as 34463 (modulo 65536) and listens there
    without a word, and a socket bind raises OverflowError (a traceback).
    """
    return _port_from(text, lowest=0)


def fixed_port_number(text: str) -> int:
    """A port others are told about (1..65535: "any free one" means nothing there)."""
    return _port_from(text, lowest=1)


def optional_port(text: str) -> int:
    """A fixed port number, or 0 for ``off``."""
    if text.strip().lower() in OFF:
        return 0
    return _port_from(text, lowest=1, expected="a port number or 'off'")


#: What turns an optional port off.
OFF = frozenset({"off", "none", "no"})


def _port_from(text: str, *, lowest: int, expected: str = "a port number") -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {expected}: {text!r}") from None
    if not lowest <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range {lowest}-65535: {value}")
    return value
