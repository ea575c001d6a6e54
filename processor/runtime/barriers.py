"""The processor's view of the expansion barriers, and what follows from it per task.

The coordinator sends the barriers with the job model; a barrier marker read from a
parent partition (orchestrator/wire/barrier.py) settles one before the model says so,
since the marker commits together with the model that names it. `BarrierBook` keeps
the one view both arrive at, and gives every active task and replica the `Reroute` of
each partition it consumes that is the parent of a settled barrier: the active task
forwards misrouted records through it, a replica skips them. Whenever the view
changes (a new model, a marker), every holder gets its reroutes again at once, before
it reads the next record.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from orchestrator.wire.barrier import BarrierInfo, Marker, Reroute, reroutes
from orchestrator.wire.partitions import split_partition
from orchestrator.wire.protocol import Barrier
from processor.timed_job import TimedJob

__all__ = ["BarrierBook", "BarrierHolder"]

log = logging.getLogger("baton.processor.runtime")


class BarrierHolder(Protocol):
    """An active task or a replay: it reads `reroutes` and reports markers."""

    partitions: list[str]
    job_name: str
    reroutes: dict[str, Reroute]
    on_marker: Callable[[str, int, Marker], None]


class BarrierBook:
    """The barriers this processor holds.

    Args:
        job: the job's name (whose markers count).
        partitioner: the producers' partitioner name (`[job] partitioner`).
        barriers: the live map the consumers hold back child partitions by (child ->
            Barrier); the book updates it in place when a marker settles one.
        holders: every active task and replay of the processor now.
    """

    def __init__(self, job: str, partitioner: str, barriers: dict[str, Barrier],
                 holders: Callable[[], Iterable[BarrierHolder]]) -> None:
        self.job = job
        self.partitioner = partitioner
        self.barriers = barriers
        self._holders = holders
        self.counts: dict[str, int] = {}

    def update(self, barriers: Mapping[str, Barrier], counts: Mapping[str, int]) -> None:
        """A new job model: its barriers and topic partition counts."""
        # a marker read before the model arrived settles its children; a model sent
        # before the marker was written may still call them unsettled
        learned = {c: b for c, b in self.barriers.items()
                   if b.settled and c in barriers and not barriers[c].settled}
        self.barriers.clear()
        self.barriers.update(barriers)
        self.barriers.update(learned)
        for topic, count in counts.items():
            self.counts[topic] = max(count, self.counts.get(topic, 0))
        self.refresh()

    def attach(self, holder: BarrierHolder) -> None:
        """Give a new active task or replay its reroutes and the marker callback."""
        holder.job_name = self.job
        holder.on_marker = functools.partial(self._marker_read, holder)
        holder.reroutes = self._reroutes(holder.partitions)

    def _marker_read(self, holder: BarrierHolder, partition: str, offset: int,
                     marker: Marker) -> None:
        """`holder` read a marker: the book learns it, and a job with timers moves the
        timers of keys that now live on a child there (processor/timers.py)."""
        self.on_marker(partition, offset, marker)
        job, store = getattr(holder, "job", None), getattr(holder, "store", None)
        if isinstance(job, TimedJob) and store is not None and marker.job == self.job:
            job.rehome(partition, marker.children, marker.count, store.state)

    def refresh(self) -> None:
        for holder in self._holders():
            holder.reroutes = self._reroutes(holder.partitions)

    def on_marker(self, partition: str, offset: int, marker: Marker) -> None:
        """A marker of this job read at `offset` of `partition`: its children's barrier."""
        topic, _ = split_partition(partition)
        self.counts[topic] = max(marker.count, self.counts.get(topic, 0))
        changed = False
        for child in marker.children:
            known = self.barriers.get(child)
            if known is not None and known.settled:
                continue        # the model's own (a marker written twice is not one)
            self.barriers[child] = Barrier(parent=partition, offset=offset, settled=True)
            changed = True
        if changed:
            log.info("expansion barrier marker at %s offset %d settles %s", partition, offset,
                     ", ".join(marker.children))
            self.refresh()

    def _reroutes(self, partitions: Iterable[str]) -> dict[str, Reroute]:
        if not self.barriers:
            return {}
        infos = {c: BarrierInfo(b.parent, b.offset, b.settled) for c, b in self.barriers.items()}
        try:
            return reroutes(list(partitions), infos, self.partitioner, self.counts)
        except KeyError as exc:     # a topic the model has not counted yet
            log.warning("no partition count for %s yet: misrouted records on it are not "
                        "recognised until the job model arrives", exc)
            return {}
