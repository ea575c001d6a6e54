"""Fixtures for the metrics tests: fresh registries, fully populated metrics, promtool,
and a factory for real Prometheus servers (see prometheus_harness.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from metrics_support import populate
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from prometheus_harness import PrometheusServer, require_binary

from metrics import render


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()

@pytest.fixture(scope="session")
def exposed_sample_names() -> frozenset[str]:
    """Every sample name Baton exposes (with _bucket/_sum/_count/_created), populated."""
    registry = CollectorRegistry()
    populate(registry)
    return frozenset(
        sample.name
        for family in text_string_to_metric_families(render(registry).decode())
        for sample in family.samples
    )


@pytest.fixture(scope="session")
def promtool() -> str:
    return require_binary("promtool")


@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator[Callable[..., PrometheusServer]]:
    """start(targets, job_name="baton", rule_files=()) -> a running PrometheusServer."""
    started: list[PrometheusServer] = []

    def start(targets: Sequence[str], **options: Any) -> PrometheusServer:
        server = PrometheusServer.start(tmp_path / f"prometheus-{len(started)}", targets,
                                        **options)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
