"""Processor liveness: which execution of each processor id is the valid one (SAMZA-871).

A processor id has one valid execution at a time. Registering a new execution under
an id invalidates the previous one; a processor silent for `processor_timeout` is
lost; the coordinator may declare one dead (release timeout). An invalid or unknown
execution is answered `alive: false` on every endpoint, which makes it stop without
committing; its producers are fenced by whoever activates its tasks next.

A dead processor is kept (as invalid, with when it died) until it registers again or is
forgotten (orchestrator/core/forgetting.py). A forgotten id's last execution is
remembered, so that execution, should it still run somewhere, is told it is dead
rather than welcomed back as a newcomer; the id itself is free for a new execution.

Pure bookkeeping over an injected clock reading; the coordinator core decides what a
loss means for tasks and handoffs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.wire.protocol import HeartbeatRequest, TaskReport

__all__ = ["FORGOTTEN_KEPT", "Liveness", "Processor"]

# forgotten executions remembered (the oldest go first): far more than a job ever
# loses for good, and a bound on what the coordinator stream keeps for them
FORGOTTEN_KEPT = 1000


@dataclass
class Processor:
    """One processor id and its current execution.

    Attributes:
        id: the stable processor id (`--id`).
        execution_id: the execution registered last under `id`.
        metrics_url: where its /metrics is, as it reported.
        valid: the execution may run tasks; False once lost, replaced or declared dead.
        reason: why it is not valid, for operators.
        died_at: wall-clock time it stopped being valid (None while valid).
        registered_at: wall-clock time of the registration.
        last_seen: monotonic time of its last valid message (not persisted).
        reports: its last report of every task it holds (not persisted).
        reported: it reported since this coordinator started (not persisted).
        generation: the model generation it last heard in a reply (not persisted).
        disk_full: its state directory's disk is short of space (not persisted).
        busy: its main loop's busy share, as last reported (not persisted).
    """

    id: str
    execution_id: str
    metrics_url: str | None = None
    valid: bool = True
    reason: str = ""
    died_at: float | None = None
    registered_at: float = 0.0
    last_seen: float = 0.0
    reports: dict[str, TaskReport] = field(default_factory=dict)
    reported: bool = False
    generation: int = 0
    disk_full: bool = False
    busy: float | None = None

    def to_record(self) -> dict[str, Any]:
        record = {"execution_id": self.execution_id, "metrics_url": self.metrics_url,
                  "valid": self.valid, "reason": self.reason,
                  "registered_at": self.registered_at}
        if self.died_at is not None:
            record["died_at"] = self.died_at
        return record

    @classmethod
    def from_record(cls, pid: str, record: Mapping[str, Any], now: float) -> Processor:
        """Rebuild from the stream; `last_seen=now` gives it a full timeout to report."""
        died_at = record.get("died_at")
        return cls(pid, str(record["execution_id"]), record.get("metrics_url"),
                   bool(record.get("valid", True)), str(record.get("reason", "")),
                   None if died_at is None else float(died_at),
                   float(record.get("registered_at", 0.0)), last_seen=now)


class Liveness:
    """The processors by id; answers "is this execution the valid one?"."""

    def __init__(self) -> None:
        self._by_id: dict[str, Processor] = {}
        # forgotten id -> its last execution, oldest first (persisted: "forgotten")
        self.forgotten: dict[str, str] = {}

    def __iter__(self) -> Iterator[Processor]:
        return iter(sorted(self._by_id.values(), key=lambda p: p.id))

    def __contains__(self, pid: object) -> bool:
        return pid in self._by_id

    def get(self, pid: str) -> Processor | None:
        return self._by_id.get(pid)

    def add(self, processor: Processor) -> None:
        self._by_id[processor.id] = processor

    def remove(self, pid: str) -> None:
        self._by_id.pop(pid, None)

    def forget(self, pid: str) -> Processor | None:
        """Remove `pid` for good, remembering its last execution as a dead one."""
        found = self._by_id.pop(pid, None)
        if found is not None:
            self.forgotten.pop(pid, None)
            self.forgotten[pid] = found.execution_id
            while len(self.forgotten) > FORGOTTEN_KEPT:
                del self.forgotten[next(iter(self.forgotten))]
        return found

    def was_forgotten(self, request: HeartbeatRequest) -> bool:
        """Does `request` come from the last execution of an id that was forgotten?"""
        return self.forgotten.get(request.processor_id) == request.execution_id

    def live(self) -> list[Processor]:
        """The valid processors, by id."""
        return [p for p in self if p.valid]

    def alive(self, execution_id: str) -> bool:
        """The pinned /containerHeartbeat answer: is `execution_id` some id's valid one?"""
        return any(p.valid and p.execution_id == execution_id for p in self._by_id.values())

    def valid(self, request: HeartbeatRequest) -> Processor | None:
        """The processor if `request` comes from its valid execution, else None."""
        found = self._by_id.get(request.processor_id)
        if found is None or not found.valid or found.execution_id != request.execution_id:
            return None
        return found

    def register(self, request: HeartbeatRequest, now: float, wall: float) -> Processor:
        """Make `request`'s execution the valid one of its id (the caller has already
        dealt with the previous execution's tasks)."""
        found = self._by_id.get(request.processor_id)
        if found is not None and found.valid and found.execution_id == request.execution_id:
            return found  # a repeated registration (a retry): nothing changes
        processor = Processor(request.processor_id, request.execution_id,
                              request.metrics_url, registered_at=wall, last_seen=now)
        self._by_id[processor.id] = processor
        self.forgotten.pop(processor.id, None)      # a new execution: the id lives again
        return processor

    def seen(self, processor: Processor, request: HeartbeatRequest, now: float) -> None:
        """Record a valid message: its time, its reports (level-triggered: all of them)."""
        processor.last_seen = now
        processor.reported = True
        if request.metrics_url is not None:
            processor.metrics_url = request.metrics_url
        processor.reports = {r.task: r for r in request.tasks}
        processor.disk_full = request.disk_full
        processor.busy = request.busy

    def excuse(self, now: float) -> None:
        """This coordinator could hear no one until `now` (it answered 503): no live
        processor's silence counts before it."""
        for processor in self.live():
            processor.last_seen = max(processor.last_seen, now)

    def silent(self, now: float, timeout: float) -> list[Processor]:
        """Valid processors not heard from for `timeout` seconds."""
        return [p for p in self.live() if now - p.last_seen >= timeout]

    def invalidate(self, pid: str, reason: str, wall: float) -> Processor | None:
        """Mark `pid`'s execution invalid as of wall-clock time `wall`; returns it if it
        was valid."""
        found = self._by_id.get(pid)
        if found is None or not found.valid:
            return None
        found.valid = False
        found.reason = reason
        found.died_at = wall
        found.reports = {}
        return found
