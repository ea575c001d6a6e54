"""The broker's own floor under each step of a transactional handoff, measured on the
bench's broker with plain clients (no Baton), so a bench can put each phase of Baton's
pause beside what the broker alone takes for the same step.

- `commit`: begin, produce one record, send the input offsets, commit: the old owner's
  last commit (`release`) and the new owner's first (`first_commit`);
- `fence`: `init_transactions` of a new producer under the same transactional id, the
  previous one's transaction committed: the new owner's `fence`;
- `committed`: a read of the group's committed offsets: the new owner's `t1`;
- `first_read`: a connected `read_committed` consumer with the processors' fetch
  settings assigned to a partition whose records are there -> its first record: the
  new owner's `first_read` once its replay is done.

Each is measured `rounds` times, the first few dropped (connections warming up), and
reported as p50 and p99 in ms. A bench runs as a script, so its folder is on the import
path and it imports this module as `_floor`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from _common import percentile
from confluent_kafka import Consumer, Producer, TopicPartition

from orchestrator.devkit.cluster import create_topics
from processor.runtime.consumers import FETCH_BOUNDS, FETCH_PACE

__all__ = ["FLOOR_OF", "measure_floor"]

# the floor step under each phase of bench/_handoffs.py's phase table (None: no broker
# step: the coordinator's round trips, or the replay's own records)
FLOOR_OF: dict[str, str | None] = {
    "release_told": None, "release": "commit", "activate_told": None, "fence": "fence",
    "t1": "committed", "replay": None, "first_read": "first_read", "first_commit": "commit"}
_WARM = 3


def _timed(step: Callable[[], None]) -> float:
    started = time.monotonic()
    step()
    return (time.monotonic() - started) * 1000


def measure_floor(settings: dict[str, Any], rounds: int = 30) -> dict[str, dict[str, float]]:
    """p50 and p99 (ms) of each step (module docstring) on the broker of `settings` (a
    plain client's librdkafka settings)."""
    tag = uuid.uuid4().hex[:8]
    source, sink, group = f"floor-in-{tag}", f"floor-out-{tag}", f"floor-{tag}"
    create_topics(settings, {source: 1, sink: 1})
    seed = Producer({**settings, "enable.idempotence": True})
    for i in range(rounds + _WARM):
        seed.produce(source, key=b"k", value=str(i).encode())
    assert seed.flush(60) == 0
    member = Consumer({**settings, "group.id": group, "enable.auto.commit": False,
                       "isolation.level": "read_committed"})
    member.assign([TopicPartition(source, 0, 0)])
    times: dict[str, list[float]] = {"commit": [], "fence": [], "committed": [],
                                     "first_read": []}
    # the new owner's consumer is connected and knows the topic before it is assigned
    reader = Consumer({**settings, **FETCH_BOUNDS, **FETCH_PACE, "group.id": f"{group}-r",
                       "enable.auto.commit": False, "isolation.level": "read_committed"})
    reader.list_topics(sink, timeout=30)
    txn = f"floor-{tag}"
    producer = Producer({**settings, "transactional.id": txn})
    producer.init_transactions(60)
    try:
        for i in range(rounds + _WARM):
            keep = i >= _WARM

            def commit(at: int = i, p: Producer = producer) -> None:
                p.begin_transaction()
                p.produce(sink, key=b"k", value=str(at).encode())
                p.send_offsets_to_transaction([TopicPartition(source, 0, at + 1)],
                                              member.consumer_group_metadata(), 30)
                p.commit_transaction(30)

            spent = _timed(commit)
            if keep:
                times["commit"].append(spent)
            successor = Producer({**settings, "transactional.id": txn})
            successor.list_topics(timeout=30)     # connected, as a prepared producer is
            spent = _timed(lambda s=successor: s.init_transactions(60))
            if keep:
                times["fence"].append(spent)
            producer = successor
            spent = _timed(lambda: member.committed([TopicPartition(source, 0)], 30))
            if keep:
                times["committed"].append(spent)
            def first(c: Consumer = reader) -> None:
                c.assign([TopicPartition(sink, 0, 0)])
                while True:
                    msg = c.poll(5)
                    assert msg is not None, "no record within 5 s"
                    if msg.error() is None:
                        return

            spent = _timed(first)
            reader.unassign()
            if keep:
                times["first_read"].append(spent)
    finally:
        member.close()
        reader.close()
    return {step: {"p50": round(percentile(values, 50), 1),
                   "p99": round(percentile(values, 99), 1)}
            for step, values in times.items()}
