"""The runtime's end-to-end tests run real daemons from one job config, as the
orchestrator's do: they share its `job` fixture."""

from tests.orchestrator.conftest import job

__all__ = ["job"]
