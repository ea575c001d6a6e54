"""The reference the Spark bulk path is checked against, and the input it reads: keyed
records written to a topic, the same ranges applied record by record into a TaskStore
(as the processor's replica does), and every byte of a store to compare.

Shared by the bulk path's tests (tests/processor/spark/test_bulk.py, the remote-driver
test beside it) and the runtime's bulk catch-up tests (tests/processor/runtime/).
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import rocksdict
from confluent_kafka import Consumer, TopicPartition

from processor.job import Record
from processor.spark import load_job
from store import TaskStore, decode_changelog, decode_value
from tests.waiting import wait_for

__all__ = ["TRAIL", "consumer_path", "input_ranges", "produce_input", "store_bytes"]

# an order-sensitive job with a poison value (tests/processor/conftest.py), by the name
# Spark's workers load it
TRAIL = "tests.processor.conftest:Trail"


def produce_input(broker: Any, topic: str, partitions: int, records: int, keys: int,
                  seed: int, spread: bool = False) -> dict[str, tuple[int, int]]:
    """Keyed records (the default partitioner: a key stays in one partition), or with
    `spread` on random partitions, so a key's records span partitions and chunks."""
    rng = random.Random(seed)
    producer = broker.producer()
    for _ in range(records):
        where = {"partition": rng.randrange(partitions)} if spread else {}
        producer.produce(topic, key=f"k{rng.randrange(keys)}".encode(),
                         value=str(rng.randint(0, 9)).encode(), **where)  # b"0": poison
    assert producer.flush(30) == 0
    return input_ranges(broker, topic, partitions)


def input_ranges(broker: Any, topic: str, partitions: int) -> dict[str, tuple[int, int]]:
    """Each partition's range from 0 to its end, by the "topic:N" name the bulk path takes,
    once every transaction written to it has ended: a commit returns before its markers
    are written, and until they are the committed end (the last stable offset) leaves
    the last transaction out."""
    committed = Consumer(broker.settings(**{"group.id": "ranges"}))
    written = Consumer(broker.settings(**{"group.id": "ranges",
                                          "isolation.level": "read_uncommitted"}))

    def ends(consumer: Consumer) -> dict[str, int]:
        return {f"{topic}:{p}": consumer.get_watermark_offsets(
            TopicPartition(topic, p), timeout=10, cached=False)[1] for p in range(partitions)}

    try:
        wait_for(lambda: ends(committed) == ends(written), 30,
                 f"the transactions written to {topic} ended")
        return {name: (0, end) for name, end in ends(committed).items()}
    finally:
        committed.close()
        written.close()


def consumer_path(broker: Any, path: Path, ranges: dict[str, tuple[int, int]], source: str,
                  job_class: str = TRAIL, key_filter: Any = None) -> None:
    """The reference: per-record process() (or changelog write) into a TaskStore."""
    job = load_job(job_class)()
    store = TaskStore(path)
    consumer = Consumer(broker.settings(**{
        "group.id": "reference", "enable.auto.commit": False,
        "isolation.level": "read_committed"}))
    try:
        for name, (start, end) in ranges.items():
            topic, _, number = name.rpartition(":")
            tp = TopicPartition(topic, int(number), start)
            consumer.assign([tp])
            position, deadline = start, time.monotonic() + 30
            while position < end:
                assert time.monotonic() < deadline, f"reference reader stuck on {name}"
                batch = [m for m in consumer.consume(1000, 0.5) if m.offset() < end]
                for msg in batch:
                    assert msg.error() is None, msg.error()
                    if key_filter is None or key_filter(msg.key()):
                        _apply(job, store, source, msg)
                    position = msg.offset() + 1
                    if position % 250 == 0:
                        store.commit({name: position})
                if not batch:
                    position = max(position, consumer.position([tp])[0].offset)
            store.commit({name: end})
    finally:
        consumer.close()
        store.close()


def _apply(job: Any, store: TaskStore, source: str, msg: Any) -> None:
    if source == "changelog":
        key, raw = decode_changelog(msg.key(), msg.value())
        if raw is None:
            store.state.delete(key)
        else:
            store.state[key] = decode_value(raw)
        return
    record = Record(msg.key(), msg.value(), msg.topic(), msg.partition(), msg.offset(),
                    msg.timestamp()[1])
    store.begin_record()
    try:
        for _ in job.process(record, store.state):
            pass
    except ValueError:  # a poison record is skipped, its writes undone
        store.rollback_record()


def store_bytes(path: Path) -> list[tuple[bytes, bytes]]:
    """Every byte of a closed store: data and metadata (applied offsets)."""
    db = rocksdict.Rdict(str(path), rocksdict.Options(raw_mode=True),
                         access_type=rocksdict.AccessType.read_only())
    try:
        return list(db.items())
    finally:
        db.close()
