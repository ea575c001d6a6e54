"""What every daemon exports about itself: its build and its process.

`baton_build_info{job, version}` is 1, so a query can join it (`* on (instance)
group_left (version) baton_build_info`) to see which version each target runs, e.g.
during an upgrade. prometheus_client's process collector (CPU, resident memory, open
file descriptors, start time: `process_*`) and platform collector (`python_info`) are
registered on the daemon's own registry, never on the global REGISTRY.

The version is read back from the installed distribution's metadata, so
`pyproject.toml` is its one place.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from prometheus_client import CollectorRegistry, Gauge, PlatformCollector, ProcessCollector

__all__ = ["BUILD_METRIC_NAMES", "baton_version", "register_daemon_metrics"]

BUILD_METRIC_NAMES: tuple[str, ...] = ("baton_build_info",)


def baton_version() -> str:
    """The installed Baton's version ("unknown" when run from a tree never installed)."""
    try:
        return version("baton")
    except PackageNotFoundError:
        return "unknown"


def register_daemon_metrics(registry: CollectorRegistry, job: str) -> None:
    """Register `baton_build_info` and the process and platform collectors.

    Once per daemon registry: a second call on the same registry raises ValueError
    (duplicate families), as any double registration does.
    """
    Gauge("baton_build_info", "Always 1; the Baton version this daemon runs.",
          ["job", "version"], registry=registry).labels(job=job, version=baton_version()).set(1)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
