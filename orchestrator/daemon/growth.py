"""Input growth: the job model follows its input topics, and the barriers it leaves settle.

Admin I/O (watermarks, partition counts, create_partitions) runs *outside* the core
lock, so a slow broker never stalls heartbeats; the expansion path has its own lock
so the monitor and POST /expand never apply the same growth twice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from orchestrator.core.grouping import GroupingError
from orchestrator.daemon.guarded_core import GuardedCore
from orchestrator.daemon.stream_writer import StreamWriter
from orchestrator.kafka.topics import Watermarks
from orchestrator.wire.changelog import changelog_partition

__all__ = ["Admin", "ExpansionError", "InputGrowth", "WriteMarkers"]

# writes barrier markers (parent partition -> children) and, in the same transaction,
# the records `changes_for(offsets)` gives for the markers' offsets; returns the offsets
WriteMarkers = Callable[[Mapping[str, Sequence[str]], Mapping[str, int],
                         Callable[[Mapping[str, int]], Mapping[str, Any | None]],
                         Mapping[str, int]],
                        Mapping[str, int]]


class Admin(Protocol):
    """The admin I/O input growth needs (orchestrator.kafka.topics.TopicAdmin; fakes in tests)."""

    def partition_counts(self, topics: Sequence[str]) -> dict[str, int]: ...

    def watermarks(self, partitions: Iterable[str]) -> dict[str, Watermarks]: ...

    def committed(self, partitions: Iterable[str]) -> dict[str, int]: ...

    def create_partitions(self, topic: str, count: int) -> None: ...


class ExpansionError(ValueError):
    """An expansion request Baton refuses (not an input, a shrink, not a multiple)."""


class InputGrowth:
    """Grows the job model when an input topic grows, settles the barriers that leaves,
    and reads the offsets lags are measured with.

    Args:
        guard: the core behind its lock.
        writer: the coordinator stream's writer (markers commit with the model).
        admin: admin I/O for offsets and expansion.
        inputs: the job's input topics, in order (`job.inputs`).
    """

    def __init__(self, guard: GuardedCore, writer: StreamWriter, admin: Admin,
                 inputs: Sequence[str]) -> None:
        self._guard = guard
        self._writer = writer
        self._admin = admin
        self._inputs = list(inputs)
        self._expand_lock = threading.Lock()

    def expand(self, topic: str, partitions: int) -> dict[str, Any]:
        """Grow an input topic and apply the expansion at once (POST /expand).

        The growth is checked against the grouping *before* the topic is touched.
        The barrier offsets are read after the partitions exist: a record a producer
        wrote to a parent before it saw the new count is then still below the
        barrier, so the child never overtakes it (reading earlier could miss it).

        Raises:
            ExpansionError: not an input, a shrink, or not a multiple.
        """
        guard = self._guard
        with self._expand_lock:
            if topic not in self._inputs:
                raise ExpansionError(f"{topic!r} is not an input of job "
                                     f"{guard.core.picture.config.job!r} (inputs: "
                                     f"{', '.join(self._inputs)})")
            with guard.lock:
                model = guard.core.picture.model
            counts = model.counts()
            try:
                model.plan_expansion([(t, partitions if t == topic else counts.get(t, n))
                                      for t, n in model.grouping.inputs])
            except GroupingError as exc:
                raise ExpansionError(str(exc)) from exc
            self._admin.create_partitions(topic, partitions)
            self._sync_locked(self._admin.partition_counts(self._inputs))
            with guard.lock:
                return {"topic": topic, "partitions": partitions,
                        "generation": guard.core.picture.model.generation,
                        "barriers": {c: {"parent": p, "offset": o}
                                     for c, (p, o) in guard.core.picture.model.barriers.items()
                                     if c.startswith(topic + ":")}}

    def sync_partitions(self, counts: Mapping[str, int]) -> None:
        """The monitor saw these partition counts: expand, or refuse and say why.

        Skipped while POST /expand is at work (it applies the growth itself), so the
        daemon's loop never waits on its admin calls.
        """
        if not self._expand_lock.acquire(blocking=False):
            return
        try:
            self._sync_locked(counts)
        finally:
            self._expand_lock.release()

    def _sync_locked(self, counts: Mapping[str, int]) -> None:
        guard = self._guard
        with guard.lock:
            model = guard.core.picture.model
        if any(t not in counts for t in self._inputs):
            return  # a partial answer must never look like a removed input
        inputs = [(t, counts[t]) for t in self._inputs]
        if inputs == list(model.grouping.inputs):
            return
        try:
            grouping, parents = model.plan_expansion(inputs)
        except GroupingError as exc:
            with guard.deciding():
                guard.core.refuse_expansion(str(exc))
                guard.commit()
            return
        marks = self._admin.watermarks(sorted(set(parents.values())))
        ends = {p: m.high for p, m in marks.items()}
        with guard.deciding():
            if guard.core.picture.model is model:
                due = guard.core.picture.clock.time() + guard.core.picture.config.expansion_grace_s
                guard.core.apply_expansion(model.expanded(grouping, parents, ends, due))
                guard.commit()

    def settle_barriers(self, write: WriteMarkers) -> bool:
        """Settle the expansion barriers that are due (orchestrator/wire/barrier.py):
        their markers and the model naming the markers' offsets commit in one stream
        transaction, so no reader of a parent meets a marker the job does not know.
        Returns whether any was settled.

        Raises:
            FencedError, StreamError: the write failed; nothing changed (the markers
                of an aborted transaction are invisible), the next turn tries again.
        """
        core = self._guard.core
        picture = core.picture
        if not picture.model.unsettled or not picture.model.due(picture.clock.time()):
            return False        # the common case: no lock taken, no reply cache dropped
        with self._guard.deciding():
            model = core.picture.model
            due = model.due(core.picture.clock.time())
            if not due:
                return False
            written: dict[str, Any] = {}

            def changes_for(offsets: Mapping[str, int]) -> Mapping[str, Any | None]:
                markers = {c: offsets[p] for p, kids in due.items() for c in kids}
                written["model"] = model.settled(markers)
                written["markers"] = markers
                changes: dict[str, Any | None] = {**core.picture.pending_changes(),
                                                  "model": written["model"].to_record()}
                written["changes"] = changes
                return changes

            with self._writer.transaction():
                floors = {model.barriers[c][0]: model.barriers[c][1]
                          for kids in due.values() for c in kids}
                write(due, model.counts(), changes_for, floors)
            core.apply_settlement(written["model"], written["markers"])
            core.picture.confirm(written["changes"])
            return True

    def refresh_offsets(self) -> None:
        """Watermarks and committed offsets of every input partition, for lags, and the
        watermarks of the changelog partitions the tasks have (`baton plan` sizes a
        changelog catch-up with them)."""
        guard = self._guard
        with guard.lock:
            partitions = guard.core.picture.model.partitions
            changelog = sorted({changelog_partition(guard.core.picture.config.job, n)
                                for n in guard.core.picture.model.changelog.values()})
        marks = self._admin.watermarks([*partitions, *changelog])
        committed = self._admin.committed(partitions)
        with guard.lock:
            guard.core.observe_offsets({p: m.low for p, m in marks.items()},
                                         {p: m.high for p, m in marks.items()}, committed)
