"""What the coordinator core knows, and the questions placement, lag and views ask of it.

`CorePicture` holds the state (job model, processors, roles, handoffs, drains,
failures, observed offsets) and answers queries; it changes nothing. The calls that
change it and the reconcile step are those of the `Coordinator` that holds it
(orchestrator/core/coordinator.py); placement, lag, replies and views are handed the
picture, never the coordinator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from metrics import CoordinatorMetrics, HandoffSample, LagSample
from orchestrator.core import handoff as hs
from orchestrator.core import lag as lags
from orchestrator.core import replies
from orchestrator.core.assignment import TaskInfo
from orchestrator.core.failures import Failures
from orchestrator.core.handoff_driver import HandoffBook
from orchestrator.core.liveness import Liveness, Processor
from orchestrator.core.model import JobModel
from orchestrator.core.roles import RoleBook
from orchestrator.core.settings import CoreConfig
from orchestrator.core.stream_records import StreamRecords
from orchestrator.wire.clock import Clock
from orchestrator.wire.protocol import HeartbeatReply, TaskReport

__all__ = ["CorePicture"]


class CorePicture:
    """The coordinator's current picture of the job and the queries it answers.

    Args:
        config: thresholds and timeouts.
        clock: the injected clock.
        model: the job model in force.
        metrics: where to record handoff phases, outcomes, pauses, invalid heartbeats.
        lose: called when a handoff declares a processor dead (pid, reason).
        went_live: called when a split child's first activation was sent.
    """

    def __init__(self, config: CoreConfig, clock: Clock, model: JobModel,
                 metrics: CoordinatorMetrics | None, lose: Callable[[str, str], None],
                 went_live: Callable[[str], None]) -> None:
        self.config = config
        self.clock = clock
        self.model = model
        self.metrics = metrics
        self.processors = Liveness()
        self.roles = RoleBook(self._valid)
        self.handoff_book = HandoffBook(config.handoff, self.roles, clock, metrics, lose,
                                        is_pending=lambda task: task in self.model.pending,
                                        went_live=went_live)
        self.draining: set[str] = set()
        self.failures = Failures(config.failure_backoff_s, config.max_task_attempts)
        self.errors: list[str] = []
        self.low: dict[str, int] = {}
        self.high: dict[str, int] = {}
        self.committed: dict[str, int] = {}
        # the last placement left moves for later (warm-ups pending): decide again soon
        self.follow_up = False
        self._task_infos: tuple[JobModel | None, list[TaskInfo]] = (None, [])
        self.stream = StreamRecords()

    def alive(self, execution_id: str) -> bool:
        """The pinned /containerHeartbeat answer."""
        return self.processors.alive(execution_id)

    def _valid(self, pid: str) -> bool:
        processor = self.processors.get(pid)
        return processor is not None and processor.valid

    def report(self, pid: str | None, task: str) -> TaskReport | None:
        """`pid`'s last report on `task`, if `pid` is valid and holds it."""
        processor = self.processors.get(pid) if pid is not None else None
        if processor is None or not processor.valid:
            return None
        return processor.reports.get(task)

    @property
    def handoffs(self) -> dict[str, hs.Handoff]:
        """The handoffs in flight, by task."""
        return self.handoff_book.handoffs

    def owner(self, task: str) -> str | None:
        """The live processor listed with `task` active, if any."""
        return self.roles.owner(task)

    def holder(self, task: str) -> str | None:
        """Who processes `task`'s partitions: its owner, or for a pending split child the
        owner of the parent it is embedded in."""
        parent = self.model.pending.get(task)
        return self.owner(task) if parent is None else self.owner(parent)

    def consumed(self, task: str) -> list[str]:
        """The partitions `task`'s owner consumes: its own and those of its embedded
        children (pending split children whose own handoff has not reached the
        release, orchestrator/core/replies.py)."""
        own = self.model.tasks.get(task, [])
        embedded = replies.embedded(self.model, self.handoffs)
        return own + [p for c, parent in embedded.items() if parent == task
                      for p in self.model.tasks.get(c, [])]

    def task_infos(self) -> list[TaskInfo]:
        """The assignor's view of the model's tasks, built once per model (for a large
        model, building it on every placement would cost noticeable time)."""
        if self._task_infos[0] is not self.model:
            self._task_infos = (self.model, [TaskInfo(t) for t in self.model.tasks])
        return self._task_infos[1]

    def in_line(self, pid: str) -> bool:
        """`pid` reports exactly the active tasks it is listed with, none in flight: it
        has nothing to do until the decision changes (a long poll may wait)."""
        return replies.in_line(self, pid)

    def reply(self, processor: Processor, known: int | None) -> HeartbeatReply:
        """The decision in force for `processor` (orchestrator/core/replies.py)."""
        return replies.reply(self, processor, known)

    def t1(self, task: str) -> dict[str, int | None]:
        """The owner's committed positions on `task` (orchestrator/core/lag.py)."""
        return lags.t1(self, task)

    def consumed_position(self, partition: str) -> int | None:
        """How far the task consuming `partition` has got."""
        return lags.consumed_position(self, partition)

    def lag(self, task: str, pid: str) -> int | None:
        """Records `pid`'s replica of `task` is behind T1; None without a replica report."""
        return lags.lag(self, task, pid)

    def lag_samples(self, processors: Iterable[Processor] | None = None) -> list[LagSample]:
        """Scrape-time view for metrics: every replica of every task."""
        return lags.lag_samples(self, processors)

    def failed_tasks(self) -> list[str]:
        """Tasks that failed and run nowhere now (waiting out a backoff, or stuck)."""
        return [t for t in self.model.tasks
                if t in self.failures.by_task and self.holder(t) is None]

    def handoff_samples(self) -> list[HandoffSample]:
        """Scrape-time view for metrics: the handoffs in flight."""
        return self.handoff_book.samples()

    def pending_changes(self) -> dict[str, Any | None]:
        """Records changed since the last `confirm()`; None values are deletions."""
        return self.stream.pending_changes(self)

    def confirm(self, changes: Mapping[str, Any | None]) -> None:
        """The daemon wrote `changes`: they are the persisted state now."""
        self.stream.confirm(changes)
