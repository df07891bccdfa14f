"""The process toolkit: start, watch and stop ``grpc-overhead``'s processes, and find ports.

Commands, benchmarks and tests start the stack's pieces as child processes the
same way, so this is the only place that knows how: ``free_port`` (the one
loopback port picker), ``port_is_free`` and ``holder`` (who listens there),
``stop_process`` (signal, wait, SIGKILL), ``offline_env``, ``ServiceProcess``
(``grpc-overhead service``, awaited until it listens), ``run_load`` (``grpc-overhead
load`` to completion) and ``Child`` (any sub-command in its own session, its output
in a log file, as the demo runs them):

    with ServiceProcess(["--workers", "4"]) as service:
        run_load("--target", service.target, ...)

It imports nothing of grpc-overhead's: the commands (``cli``), the collector's runner,
``harness/``, ``bench/`` and the tests all stand on it.
"""

from grpc_overhead.processes.children import (
    LISTENING,
    STOP_TIMEOUT_S,
    TLS_CA,
    Child,
    ComponentFailed,
    LoadProcessResult,
    ServiceProcess,
    ServiceStartError,
    child_env,
    offline_env,
    run_load,
    stop_process,
)
from grpc_overhead.processes.ports import free_port, holder, port_is_free

__all__ = [
    "LISTENING",
    "STOP_TIMEOUT_S",
    "TLS_CA",
    "Child",
    "ComponentFailed",
    "LoadProcessResult",
    "ServiceProcess",
    "ServiceStartError",
    "child_env",
    "free_port",
    "holder",
    "offline_env",
    "port_is_free",
    "run_load",
    "stop_process",
]
