"""A round's replay batch: every replica here applies its share of one consume().

Warmups, standbys and activating replays share the replay consumers
(processor/runtime/replay_consumers.py). A round refreshes the caps (as the catch-up
source says), consumes at most `replay_bite` records, hands each replica its share,
commits it (state and T2 in one WriteBatch) and pauses the partitions that reached
their cap. An activating replay that has caught up is handed back to the runtime,
which runs the activation's next replay or makes the task active.

An activation that replayed many records (a task moved after a broker restart, with
its store far behind) leaves their batches' memory freed but kept by the C heap: it
asks the daemon's collector for a full collection, which trims the heap, rather than
keeping that peak until the next scheduled one (orchestrator/wire/collector.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, MutableMapping

from confluent_kafka import KafkaError, Message

from metrics import ProcessorMetrics
from orchestrator.wire.collector import want_full_collection
from processor.replica import Replay
from processor.retention import OffsetOutOfRange
from processor.runtime.batches import replay_by_task
from processor.runtime.catch_up import CatchUp, Settle
from processor.runtime.consumers import log_error
from processor.runtime.replay_consumers import ReplayConsumers

__all__ = ["BATCH", "LARGE_REPLAY", "ReplayRound", "replay_bite"]

BATCH = 5000                 # records per consume() call: amortises Python per-call cost
_REPLAY_BATCH_BESIDE_ACTIVE = 1000
_REPLAY_BATCH_BEFORE_ACTIVATION = 1000   # see replay_bite
# an activating replay of at least this many records asks for a full collection
LARGE_REPLAY = 10_000

# runs a change of one task, marking the task failed if it raises (the driver's guard)
Guard = Callable[[str, Callable[[str], object]], None]


def replay_bite(active_took: int | None, activation_next: bool, input_replays: bool) -> int:
    """The most records one round's replay batch may hold.

    Args:
        active_took: what the round's active batch took (None: no active task here);
            the replay has what it left of a full batch, and at least a small bite.
        activation_next: an activation here is running, or a warmup has caught up.
        input_replays: a replica here replays the input through process().

    Then an input replay takes small bites: a full one, through process(), holds the
    loop long enough to show inside the handoff pause, where the activation waits for
    it. A changelog apply keeps its bite: a full one is short, and small ones only
    added rounds to the other tasks' catch-up in a join (docs/performance.md,
    "Measurements behind the code").
    """
    bite = BATCH if active_took is None else max(_REPLAY_BATCH_BESIDE_ACTIVE,
                                                 BATCH - active_took)
    if activation_next and input_replays:
        return min(bite, _REPLAY_BATCH_BEFORE_ACTIVATION)
    return bite


def _out_of_range_apart(out_of_range: dict[str, Message], msg: Message) -> None:
    """An error message the grouping took apart from the runs: a fetch below the
    broker's first offset is kept for its replica, the others are logged."""
    if msg.error().code() == KafkaError._AUTO_OFFSET_RESET:  # noqa: SLF001
        out_of_range[f"{msg.topic()}:{msg.partition()}"] = msg
    else:
        log_error(msg)


class ReplayRound:
    """Runs the replay batches of one processor's replicas.

    Args:
        consumers: the replay and activation consumers.
        source: the catch-up source (caps, settling, fetches out of range).
        metrics: counts the records each replica applied.
        guard: runs a task's change, failing only that task if it raises.
        caught_up: takes an activating replay that has caught up (off the consumers).
    """

    def __init__(self, consumers: ReplayConsumers, source: CatchUp, metrics: ProcessorMetrics,
                 guard: Guard, caught_up: Callable[[Replay], None]) -> None:
        self._consumers = consumers
        self._source = source
        self._metrics = metrics
        self._guard = guard
        self._caught_up = caught_up

    def run(self, replicas: MutableMapping[str, Replay], timeout: float,
            batch: int = BATCH) -> int:
        """One replay batch of at most `batch` records (less beside busy active tasks,
        whose latency it adds to) within `timeout`. Returns the records read."""
        self._consumers.refresh_caps(replicas.values(), self._source.refresh_caps)
        messages = self._consumers.consume(batch, timeout)
        owner = {p: r.name for r in replicas.values() for p in r.partitions}
        out_of_range: dict[str, Message] = {}
        batches = replay_by_task(messages, owner,
                                 functools.partial(_out_of_range_apart, out_of_range))
        settle = self._source.settler(list(replicas.values()))
        for task in list(replicas):
            mine = [out_of_range[p] for p in replicas[task].partitions
                    if p in out_of_range]       # the replica raises on it (retention.py)
            self._guard(task, functools.partial(self._apply, replicas=replicas,
                                                messages=mine + batches.get(task, []),
                                                settle=settle))
        return len(messages)

    def _apply(self, task: str, replicas: MutableMapping[str, Replay],
               messages: list[Message], settle: Settle) -> None:
        """Apply one replica's share of a poll batch and commit it (state and T2)."""
        replica = replicas[task]
        before = replica.applied_total
        try:
            capped = replica.apply(messages)
        except OffsetOutOfRange as exc:
            error = self._source.out_of_range(task, replica, exc)
            if error is exc:
                raise
            raise error from exc
        if replica.applied_total > before:
            self._metrics.record_catch_up(task, "consumer", replica.applied_total - before,
                                          replica.source)
        settle(replica)
        replica.commit()
        self._consumers.pause_at_caps(capped)
        if replica.role == "activating" and replica.caught_up():
            del replicas[task]
            self._consumers.unassign(replica)
            if replica.applied_total >= LARGE_REPLAY:
                want_full_collection()
            self._caught_up(replica)
