"""The grpc-overhead OpenTelemetry Collector: build it, pick a config, run it.

The collector itself is Go, built from ``manifest.yaml`` by ``build.sh``;
this package only locates, validates and supervises it (see ``runner``);
``grpc_overhead.cli.collector`` is the ``grpc-overhead collector`` sub-command.
"""

from grpc_overhead.collector.runner import (
    CONFIG_NAMES,
    CollectorConfigError,
    CollectorError,
    CollectorProcess,
    CollectorStartError,
    CollectorUnavailable,
    build_collector,
    collector_binary,
    collector_dir,
    config_path,
    resolve_config,
    validate_config,
)

__all__ = [
    "CONFIG_NAMES",
    "CollectorConfigError",
    "CollectorError",
    "CollectorProcess",
    "CollectorStartError",
    "CollectorUnavailable",
    "build_collector",
    "collector_binary",
    "collector_dir",
    "config_path",
    "resolve_config",
    "validate_config",
]
