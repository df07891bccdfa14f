"""The real collector binary, as the collector tests get it."""

from tests.collector.conftest import collector_bin

__all__ = ["collector_bin"]
