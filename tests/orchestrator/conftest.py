"""The `job` fixture of the orchestrator's end-to-end tests (a coordinator and its
processors as subprocesses, from one config)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.orchestrator.test_e2e import PARTITIONS, Job


@pytest.fixture
def job(coordinated: Any, daemons: Any) -> Callable[..., Job]:
    def make(**sections: dict[str, Any]) -> Job:
        config, path = coordinated(PARTITIONS, **sections)
        return Job(config, path, daemons)
    return make
