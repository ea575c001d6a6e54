"""The stall watchdog of one processor: every task's reads looked at, stalls recovered.

What a stall is, and when one is declared, is processor/runtime/stalls.py's. This
module gathers each read's position and target from the runtime's consumers and tasks,
asks the committed ends of the active partitions beside the loop (processor/runtime/
end_offsets.py), and carries a stall's recovery out: a new active consumer, or a new
replay (or activation) consumer, each partition assigned where its task or replica
goes on, so nothing is skipped or read twice (an active task's open transaction goes
on; a replica applies from its T2).

Not watched, because their positions stand still on purpose: a replica whose state
comes from Spark meanwhile (the bulk path), and the warmups and standbys while an
activation replays (they wait for the handoff's pause to end); a partition that an
expansion barrier holds is not read yet.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Mapping

from confluent_kafka import Consumer

from metrics import ProcessorMetrics
from orchestrator.wire.clock import Clock, Deadline
from processor.active import ActiveTask
from processor.replica import Replay
from processor.runtime.consumers import Consumers
from processor.runtime.end_offsets import EndOffsets
from processor.runtime.stalls import Read, Stall, Watched, observe

__all__ = ["StallWatch"]

log = logging.getLogger("baton.processor.runtime")

# how often the reads are looked at, and the ends looked up, as a share of the timeout
# (bounded): a stall is declared at most this much after its timeout
_LOOKS_PER_TIMEOUT = 10
_LOOK_S = (0.1, 1.0)


class StallWatch:
    """Watches the reads of one processor's tasks (see the module doc).

    Args:
        timeout_s: processor.stall_timeout_ms in seconds.
        consumers: the runtime's consumers (read positions, recoveries).
        ends: makes the consumer the ends are looked up on.
        metrics: counts each stall (`baton_task_stalls_total`).
        clock: paces the looks and times the stalls.
    """

    def __init__(self, timeout_s: float, consumers: Consumers, ends: Callable[[], Consumer],
                 metrics: ProcessorMetrics, clock: Clock) -> None:
        self._timeout_s = timeout_s
        self._consumers = consumers
        self._metrics = metrics
        self._clock = clock
        look = min(max(timeout_s / _LOOKS_PER_TIMEOUT, _LOOK_S[0]), _LOOK_S[1])
        self._look_s = look
        self._ends = EndOffsets(ends, look)
        self._due = Deadline.after(clock, look)
        self._book: dict[Read, Watched] = {}
        self._roles: dict[str, str] = {}

    def stalled(self) -> dict[str, list[str]]:
        """Task -> its partitions stalled now (until their positions move)."""
        out: dict[str, list[str]] = {}
        for (task, partition), watched in self._book.items():
            if watched.stalled:
                out.setdefault(task, []).append(partition)
        return out

    def look(self, active: Mapping[str, ActiveTask], replicas: Mapping[str, Replay],
             bulk: Container[str]) -> None:
        """Once every look interval: find the reads stalled for the timeout and recover
        them (called from the loop, which owns the consumers)."""
        if not self._due.expired():
            return
        self._due.arm(self._look_s)
        seen: dict[Read, tuple[int, int | None]] = {}
        self._roles = {}
        reading = self._consumers.active.reading()
        self._ends.want(reading)
        ends = self._ends.ends()
        read = self._consumers.active.read_positions(
            [p for p, t in reading.items() if t in active])
        for partition, task in reading.items():
            owner = active.get(task)
            if owner is None or partition not in owner.pending:
                continue
            position = max(owner.pending[partition], read.get(partition, -1))
            seen[(task, partition)] = (position, ends.get(partition))
            self._roles[task] = "active"
        replaying = self._consumers.replays.activating
        watched = [r for t, r in replicas.items() if t not in bulk
                   and (r.role == "activating" or not replaying)]
        through = self._consumers.replays.read_through(
            [p for r in watched for p in r.partitions
             if self._consumers.replays.holder(p) is r])
        for replica in watched:
            for partition in replica.partitions:
                if self._consumers.replays.holder(partition) is not replica:
                    continue
                position = max(replica.positions.get(partition, 0), through.get(partition, -1))
                seen[(replica.name, partition)] = (position, replica.cap(partition))
                self._roles[replica.name] = replica.role
        self._book, stalls = observe(self._book, self._clock.monotonic(), seen,
                                     self._timeout_s)
        if stalls:
            self._recover(stalls, active)

    def _recover(self, stalls: list[Stall], active: Mapping[str, ActiveTask]) -> None:
        active_stalled = False
        replays: list[str] = []
        for stall in stalls:
            role = self._roles.get(stall.task, "active")
            if stall.first:
                log.warning("task %r (%s): partition %s stalled at offset %d for %.1f s "
                            "while its end moved to %d: its consumer is replaced",
                            stall.task, role, stall.partition, stall.position, stall.seconds,
                            stall.target)
                self._metrics.record_stall(stall.task, role)
            else:
                log.warning("task %r (%s): partition %s still stalled at offset %d (%.1f "
                            "s): its consumer is replaced again", stall.task, role,
                            stall.partition, stall.position, stall.seconds)
            if role == "active":
                active_stalled = True
            else:
                replays.append(stall.partition)
        if active_stalled:
            self._consumers.active.recover(active)
        if replays:
            self._consumers.replays.recover(replays)

    def close(self) -> None:
        self._ends.close()
