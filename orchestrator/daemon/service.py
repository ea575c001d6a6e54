"""The coordinator service: the objects that share one guarded core, built together.

- `guard` (orchestrator/daemon/guarded_core.py): the core behind one lock, its changes
  written to the coordinator stream before any answer;
- `heartbeats` (orchestrator/daemon/heartbeats.py): processors' registrations, plain
  heartbeats and long polls, answered from the decision in force;
- `operations` (orchestrator/daemon/operations.py): the operators' requests;
- `decisions`, `views` (orchestrator/daemon/decisions.py): what the daemon's loop does
  with the core: decide, and copy what /metrics shows;
- `growth` (orchestrator/daemon/growth.py): input growth and offsets (admin I/O,
  outside the core lock).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.core.coordinator import Coordinator
from orchestrator.daemon.decisions import Decisions, MetricViews
from orchestrator.daemon.growth import Admin, InputGrowth
from orchestrator.daemon.guarded_core import GuardedCore
from orchestrator.daemon.heartbeats import Heartbeats
from orchestrator.daemon.operations import Operations
from orchestrator.daemon.stream_writer import PersistRecords
from orchestrator.wire.clock import Clock, SystemClock

__all__ = ["CoordinatorService"]


class CoordinatorService:
    """Builds the coordinator's objects over one guarded core and holds them.

    Args:
        core: the coordinator core.
        persist: writes a batch of changes in one transaction (raises on failure).
        admin: admin I/O for offsets and expansion.
        inputs: the job's input topics, in order (`job.inputs`).
        info: extra keys for /status (the coordinator's own URLs).
        waits: bounds the waits of heartbeats and registrations; real time, whatever
            the core's clock (the system clock by default).
    """

    def __init__(self, core: Coordinator, persist: PersistRecords, admin: Admin,
                 inputs: Sequence[str], info: Mapping[str, Any] | None = None,
                 waits: Clock | None = None) -> None:
        self.guard = GuardedCore(core, persist)
        self.growth = InputGrowth(self.guard, self.guard.writer, admin, inputs)
        self.heartbeats = Heartbeats(self.guard, waits or SystemClock())
        self.views = MetricViews(self.guard)
        self.operations = Operations(self.guard, self.growth, info,
                                     lambda: self.views.recommendation)
        self.decisions = Decisions(self.guard)
