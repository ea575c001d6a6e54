"""The core's state as coordinator-stream records, and what changed since the last write.

`records()` is the whole state as coordinator-stream records; `pending_changes()`
diffs it against what was last written, and the daemon writes that batch in one
transaction *before* it answers, so nothing a processor hears was not persisted
first. `Coordinator.restore()` rebuilds the core from the records and resumes
handoffs in flight; the next replies simply carry the persisted roles.

A handoff's `lag` is advisory: it is written with the handoff's transitions, and a
change of the lag alone is not a change of the record. A warmup's lag moves with every
report, and each such write would be a stream transaction the next transition queues
behind: on a replicated cluster, a release acknowledged while a lag was being written
waited for that transaction and for the next one's turn at the transaction
coordinator. A coordinator that takes over learns the lag from the next report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from orchestrator.core import handoff as hs
from orchestrator.core.failures import Failures
from orchestrator.core.liveness import Liveness
from orchestrator.core.model import JobModel
from orchestrator.core.roles import RoleBook

__all__ = ["RecordsView", "StreamRecords", "owned"]

# Keys of the coordinator stream this core writes (others, like the daemon's
# "leader" record, are left alone).
OWNED_KEYS = ("model", "assignment", "drain", "errors", "failures", "forgotten")
OWNED_PREFIXES = ("processor/", "handoff/")


def owned(key: str) -> bool:
    """Is `key` a coordinator-stream record the core writes?"""
    return key in OWNED_KEYS or key.startswith(OWNED_PREFIXES)


class RecordsView(Protocol):
    """What the records are made of (no import cycle with the coordinator)."""

    model: JobModel
    processors: Liveness
    roles: RoleBook
    draining: set[str]
    errors: list[str]
    failures: Failures

    @property
    def handoffs(self) -> dict[str, hs.Handoff]: ...


class StreamRecords:
    """Turns the core's state into records and remembers which of them are written."""

    def __init__(self) -> None:
        # the records of values that rarely change, kept while the value is the same
        # object (the model and handoffs are immutable)
        self._model_record: tuple[JobModel | None, Any] = (None, None)
        self._handoff_records: dict[str, tuple[hs.Handoff, dict[str, Any]]] = {}
        self._persisted: dict[str, Any] = {}

    def load(self, records: Mapping[str, Any]) -> None:
        """The records read back at a restart are the persisted state."""
        self._persisted = {k: v for k, v in records.items() if owned(k)}

    def records(self, core: RecordsView) -> dict[str, Any]:
        """The whole state as coordinator-stream records (key -> JSON value)."""
        if self._model_record[0] is not core.model:     # a big model, rarely changed
            self._model_record = (core.model, core.model.to_record())
        out: dict[str, Any] = {"model": self._model_record[1]}
        for p in core.processors:
            out[f"processor/{p.id}"] = p.to_record()
        out["assignment"] = core.roles.to_record()
        records: dict[str, tuple[hs.Handoff, dict[str, Any]]] = {}
        for task, handoff in sorted(core.handoffs.items()):
            cached = self._handoff_records.get(task)
            if cached is not None and cached[0] is not handoff \
                    and handoff.same_but_lag(cached[0]):
                cached = (handoff, cached[1])   # only the advisory lag moved
            elif cached is None or cached[0] is not handoff:
                cached = (handoff, handoff.to_dict())
            records[task] = cached
            out[f"handoff/{task}"] = cached[1]
        self._handoff_records = records
        if core.draining:
            out["drain"] = {"processors": sorted(core.draining)}
        if core.errors:
            out["errors"] = {"errors": list(core.errors)}
        if core.failures.by_task:
            out["failures"] = core.failures.to_record()
        if core.processors.forgotten:
            out["forgotten"] = dict(core.processors.forgotten)
        return out

    def pending_changes(self, core: RecordsView) -> dict[str, Any | None]:
        """Records changed since the last `confirm()`; None values are deletions."""
        now = self.records(core)
        changes: dict[str, Any | None] = {k: v for k, v in now.items()
                                          if self._persisted.get(k) != v}
        changes.update({k: None for k in self._persisted if k not in now})
        return changes

    def confirm(self, changes: Mapping[str, Any | None]) -> None:
        """The daemon wrote `changes`: they are the persisted state now."""
        for key, value in changes.items():
            if value is None:
                self._persisted.pop(key, None)
            else:
                self._persisted[key] = value
