"""An active task's changelog (catch_up.source = "changelog"): what it writes, and when.

Theory of operation
-------------------
* At each commit, before the input offsets join the transaction, the task writes its
  transaction's state changes to its own partition of `baton.<job>.changelog`: one
  record per key written in the transaction, the last value (the store's overlay
  already holds only that; a delete is a tombstone), then one record per input
  partition whose offset the transaction commits (the store's own applied-offset
  entries). All inside the task's Kafka transaction, so the changelog holds a
  transaction's changes exactly when its outputs and offsets committed: a reader with
  read_committed never applies the changes of an aborted or fenced transaction.
* Because the offsets travel with the state, a store rebuilt from the changelog holds
  input offsets that belong to its state, and the activation can check that nothing
  is missing (processor/runtime/catch_up.py).
* The last record's delivery report (served by the flush that precedes
  send_offsets_to_transaction) gives the store's changelog position, committed with
  the state: after a crash the owner resumes applying the changelog from there.
* A store with no position on the task's partition never followed it (built from the
  input, or the partition is new because the job switched source): its first
  transaction writes a snapshot of the whole store, so the changelog alone rebuilds
  the state from then on.
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat

from confluent_kafka import KafkaError, Message

from orchestrator.kafka.watched_producer import WatchedProducer
from orchestrator.wire.changelog import changelog_topic
from orchestrator.wire.partitions import format_partition
from store import Change, Changes, Store, changelog_offset_record

__all__ = ["ChangelogTarget", "ChangelogWriter", "produce_run", "transaction_records"]


@dataclass(frozen=True)
class ChangelogTarget:
    """A task's changelog partition."""

    topic: str
    number: int
    name: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", format_partition(self.topic, self.number))

    @classmethod
    def of(cls, job: str, number: int) -> ChangelogTarget:
        return cls(changelog_topic(job), number)


def transaction_records(changes: Iterable[Change], offsets: Mapping[str, int]) -> list[Change]:
    """One transaction's changelog records: its state changes as given (one per key),
    then the input offsets it commits, in partition order."""
    return [*changes, *(changelog_offset_record(p, o) for p, o in sorted(offsets.items()))]


class ChangelogWriter:
    """Writes an active task's changelog records into its open transaction.

    Args:
        target: the task's changelog partition.
        snapshot_due: the store never followed this partition: write it whole first.
    """

    def __init__(self, target: ChangelogTarget, snapshot_due: bool) -> None:
        self.target = target
        self.snapshot_due = snapshot_due
        self.position: int | None = None     # after the open transaction's last record
        # the open transaction's state records as written (encoded): the store's commit
        # takes them as they are; None after a snapshot
        self.changes: Changes | None = None
        self.records_total = 0

    def write(self, producer: WatchedProducer, store: Store, offsets: Mapping[str, int],
              committed: Mapping[str, int]) -> int:
        """Produce this transaction's records (and the snapshot, once) to the partition.

        Args:
            producer: the task's transactional producer, inside the open transaction.
            store: the task's store, its overlay holding the transaction's writes.
            offsets: the input offsets the transaction commits.
            committed: every input offset committed before (the snapshot carries them).

        Returns:
            The number of records produced.
        """
        self.position = None
        self.changes = None
        if self.snapshot_due:
            records = transaction_records(store.snapshot(), {**committed, **offsets})
            keys, values = list(map(_KEY, records)), list(map(_VALUE, records))
        else:
            self.changes = changes = store.changes()
            marks = transaction_records((), offsets)
            keys = changes.raw_keys + list(map(_KEY, marks))
            values = changes.raw_values + list(map(_VALUE, marks))
        if not keys:
            return 0
        topic, number = self.target.topic, self.target.number
        done, last = 0, len(keys) - 1
        while done < last:                  # all but the last, as the queue takes them
            done += produce_run(producer.produce, topic, number, keys[done:last],
                                values[done:last])
            if done < last:
                producer.poll(0.05)         # local queue full: let deliveries drain
        while True:                         # the last, whose delivery gives the position
            try:
                producer.produce(topic, values[last], keys[last], number, self._delivered)
                break
            except BufferError:
                producer.poll(0.05)
        self.records_total += len(keys)
        return len(keys)

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        """Delivery report of a transaction's last record: only records its offset (a
        failed delivery fails the transaction's commit, which is what counts)."""
        if err is None:
            self.position = int(msg.offset()) + 1

    def committed(self) -> dict[str, int]:
        """The transaction committed: the store's changelog position to commit with it
        (empty when nothing was delivered), and the snapshot is done."""
        if self.position is None:
            return {}
        self.snapshot_due = False
        return {self.target.name: self.position}


_KEY = operator.itemgetter(0)
_VALUE = operator.itemgetter(1)


def produce_run(produce: Callable[..., None], topic: str, partition: int,
                keys: Sequence[bytes], values: Sequence[bytes | None]) -> int:
    """Produce records in order until the producer's local queue is full; how many it
    took. Without a Python step per record (a changelog record per changed key is the
    changelog's cost to active tasks): `map` drives `produce`, and when the queue
    refuses one (BufferError) the values' iterator tells how far it got."""
    remaining = iter(values)
    try:
        deque(map(produce, repeat(topic), remaining, iter(keys), repeat(partition)), maxlen=0)
    except BufferError:             # the refused record was taken from the iterator too
        return len(values) - operator.length_hint(remaining) - 1
    return len(values)
