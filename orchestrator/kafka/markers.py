"""Find the barrier markers a settlement already committed (orchestrator/wire/barrier.py).

A settlement writes its markers and the job model in one transaction. When the commit
fails in a way that leaves its outcome unknown (the broker went away during it), the
markers may be committed after all. Writing new ones would put a second marker at
another offset, and a reader that met the first would disagree with the model about
where the barrier is. So before it tries again the coordinator looks for its own
committed markers from each parent's floor (its end when the expansion was seen) to
its end, and settles the barrier there. Only that retry reads: the common path writes.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from orchestrator.kafka.logs import client_logging
from orchestrator.wire.barrier import Marker, decode_marker
from orchestrator.wire.clock import Clock, Deadline, SystemClock
from orchestrator.wire.partitions import split_partition

__all__ = ["find_markers"]

# one search gives up after this long without reaching the end of a parent
_SEARCH_S = 60.0
_BATCH = 10_000


def find_markers(settings: Mapping[str, Any], job: str, due: Mapping[str, Sequence[str]],
                 floors: Mapping[str, int], clock: Clock | None = None) -> dict[str, int]:
    """Parent partition -> the offset of `job`'s committed marker that settles `due`'s
    children on it, for the parents that have one (`clock` bounds each parent's search;
    the system clock by default).

    Raises:
        TimeoutError: a parent could not be read to its end in time (retry later).
    """
    consumer = Consumer({**settings, **client_logging("coordinator.markers"),
                         "group.id": f"baton.{job}.markers",
                         "client.id": f"baton-markers-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": False, "auto.offset.reset": "earliest"})
    try:
        return {parent: offset for parent, children in due.items()
                if (offset := _search(consumer, job, parent, set(children),
                                      floors.get(parent, 0), clock or SystemClock()))
                is not None}
    finally:
        consumer.close()


def _search(consumer: Consumer, job: str, parent: str, children: set[str],
            floor: int, clock: Clock) -> int | None:
    topic, number = split_partition(parent)
    tp = TopicPartition(topic, number)
    _, high = consumer.get_watermark_offsets(tp, timeout=_SEARCH_S, cached=False)
    if high <= floor:
        return None
    consumer.assign([TopicPartition(topic, number, floor)])
    deadline = Deadline.after(clock, _SEARCH_S)
    position = floor
    while position < high:
        if deadline.expired():
            raise TimeoutError(f"searching {parent} [{floor}, {high}) for barrier markers "
                               f"took over {_SEARCH_S:.0f} s")
        for msg in consumer.consume(_BATCH, 0.5):
            if msg.error() is not None:
                continue
            position = msg.offset() + 1
            if msg.key() is None:
                marker = decode_marker(job, msg.headers(), msg.value())
                if isinstance(marker, Marker) and children <= set(marker.children):
                    return int(msg.offset())
        position = max(position, consumer.position([tp])[0].offset)
    return None
