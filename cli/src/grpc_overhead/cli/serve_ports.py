"""Where ``serve`` takes OTLP: its intake port, and the standard ports when they are free.

Defaults that meet: SDKs with no endpoint configured send OTLP/gRPC to 4317 and
OTLP/HTTP to 4318 (the Java agent, Node and .NET default to HTTP). A plain serve takes
both when free; a held one is named, with what to do. Whoever picks the intake port
(``--otlp-port``) wires things explicitly, so then the standard ports are left alone
unless asked for, and a port asked for that is taken is an error.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from grpc_overhead.analyzer.intake import DEFAULT_OTLP_PORT, STANDARD_OTLP_HTTP_PORT, Intake
from grpc_overhead.cli.ports import OFF, STANDARD_OTLP_PORT, port_number
from grpc_overhead.processes import holder

#: ``--otlp-http-port`` absent (None means ``off``).
NOT_GIVEN = -1


def optional_port_or_free(text: str) -> int | None:
    """A port number (0: a free one), or None for ``off``."""
    if text.strip().lower() in OFF:
        return None
    return port_number(text)


@dataclass(frozen=True)
class OtlpPorts:
    """Where serve takes OTLP: the intake port, the standard port and OTLP/HTTP if wanted."""

    intake: int
    standard: int | None
    standard_required: bool
    #: The OTLP/HTTP port (0: a free one), None for none.
    http: int | None = None
    #: Asked for explicitly: a taken port is an error, not a note.
    http_required: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> OtlpPorts:
        intake = DEFAULT_OTLP_PORT if args.otlp_port is None else args.otlp_port
        asked = args.standard_otlp_port  # None: not given; 0: off
        if asked is None:  # the default: only a plain serve takes the standard port
            standard = STANDARD_OTLP_PORT if args.otlp_port is None else None
        else:
            standard = asked or None
        if standard == intake:
            standard = None
        http_asked = args.otlp_http_port != NOT_GIVEN
        if http_asked:
            http = args.otlp_http_port
        else:  # like the standard gRPC port: only a plain serve takes 4318
            http = STANDARD_OTLP_HTTP_PORT if args.otlp_port is None else None
        return cls(intake, standard, bool(asked) and standard is not None, http, http_asked)


def say_standard_port(host: str, ports: OtlpPorts, intake: Intake) -> None:
    """Say where services with no endpoint configured end up: here, or at another holder."""
    if ports.standard is None:
        return
    if intake.extra_ports:
        print(
            f"OTLP also on {host}:{ports.standard} (the standard port: services with no "
            "endpoint configured send here)",
            flush=True,
        )
    else:
        print(f"note: {standard_port_taken(host, ports)}", flush=True)


def held_by(error: Exception, ports: OtlpPorts) -> str:
    """Who holds the port the intake could not take, and the flag that moves it."""
    if not isinstance(error, OSError):
        return ""
    http = "OTLP/HTTP" in str(error)
    port = ports.http if http else ports.intake
    who = holder(port) if port else None
    flag = "--otlp-http-port N|off" if http else "--otlp-port N"
    return f" (held by {who}: stop it or pass {flag})" if who else ""


def say_http_port(host: str, ports: OtlpPorts, intake: Intake) -> None:
    """Say where OTLP/HTTP senders (Java agent, Node, .NET defaults) end up."""
    if intake.http_url:
        print(f"OTLP/HTTP listening on {intake.http_url}", flush=True)
    elif ports.http:
        who = holder(ports.http) or "another process"
        print(
            f"note: the standard OTLP/HTTP port {host}:{ports.http} is held by {who}: services "
            "sending OTLP/HTTP with no endpoint configured (the Java agent, Node, .NET) send "
            f"there, so it must forward to this intake (port {ports.intake}), as `grpc-overhead "
            "collector run --config embedded` does; or stop it, or pass --otlp-http-port N|off",
            flush=True,
        )


def standard_port_taken(host: str, ports: OtlpPorts) -> str:
    who = holder(ports.standard or 0) or "another process"
    return (
        f"the standard OTLP port {host}:{ports.standard} is held by {who}: services with no "
        f"endpoint configured send there, so it must forward to this intake (port "
        f"{ports.intake}), as `grpc-overhead collector run --config embedded` does; or stop it, "
        "or pass --standard-otlp-port N|off"
    )
