"""A replica rebuilds a task's state by replaying its input through `process()`.

Three uses, one mechanism: a **warmup** (a future owner catching up), a **standby**
(kept warm indefinitely) and the catch-up an owner does while **activating** (replay
T2 -> final T1 before producing output). A replica never applies a record at or past
its cap, the owner's committed offset T1: the state it builds must be a prefix of the
owner's, or the new owner would apply those records twice when it resumes from T1.
Output is discarded; a record whose process() raises is skipped, as the owner either
skipped it too (skip/dlq) or never committed past it (fail).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Literal

from confluent_kafka import Message

from processor.job import Job, Record
from processor.offsets import partition_name
from store import TaskStore

__all__ = ["Replica", "ReplicaRole"]

log = logging.getLogger("baton.processor.replica")

ReplicaRole = Literal["warmup", "standby", "activating"]


class Replica:
    """Replay state of one task: positions (T2), caps (T1), progress counters."""

    def __init__(self, name: str, partitions: Sequence[str], job: Job, store: TaskStore,
                 role: ReplicaRole, positions: Mapping[str, int], caps: Mapping[str, int]) -> None:
        self.name = name
        self.partitions = list(partitions)
        self.job = job
        self.store = store
        self.role: ReplicaRole = role
        self.positions = dict(positions)      # T2: next offset to apply, per partition
        self.caps = dict(caps)                # T1: never apply at or past these
        self.applied_total = 0
        self.dirty = False
        self._rate_mark = (time.monotonic(), 0)
        self.rate = 0.0

    def lag(self) -> int:
        return sum(max(0, self.caps.get(p, 0) - self.positions.get(p, 0)) for p in self.partitions)

    def caught_up(self) -> bool:
        return self.lag() == 0

    def apply(self, messages: Sequence[Message]) -> set[str]:
        """Apply a batch; return the partitions that reached their cap (to pause)."""
        capped: set[str] = set()
        store, process = self.store, self.job.process
        for msg in messages:
            name = partition_name(msg.topic(), msg.partition())
            offset = msg.offset()
            if offset < self.positions.get(name, 0):
                continue
            if offset >= self.caps.get(name, 0):
                capped.add(name)
                continue
            record = Record(msg.key(), msg.value(), msg.topic(), msg.partition(), offset,
                            msg.timestamp()[1])
            store.begin_record()
            try:
                for _ in process(record, store):
                    pass
            except Exception as exc:  # noqa: BLE001 - user code, see module docstring
                store.rollback_record()
                log.debug("replica %r: skipped %s offset %d: %r", self.name, name, offset, exc)
            self.positions[name] = offset + 1
            self.applied_total += 1
            self.dirty = True
        return capped | {p for p in self.partitions
                         if self.positions.get(p, 0) >= self.caps.get(p, 0)}

    def commit(self) -> None:
        """State and T2 in one WriteBatch."""
        if self.dirty:
            self.store.commit(self.positions)
            self.dirty = False

    def update_rate(self) -> float:
        now = time.monotonic()
        then, count = self._rate_mark
        if now - then >= 1.0:
            self.rate = (self.applied_total - count) / (now - then)
            self._rate_mark = (now, self.applied_total)
        return self.rate
