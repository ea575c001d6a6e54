"""What bench/vs_kafka_streams.py does the same way for both systems: the input (topics,
preload, steady keyed traffic), reading a topic back, the pause and failover figures
from the output topic's timestamps, the oracle, and CPU seconds from /proc.

Both systems stamp each output with the time it was processed (Baton's job,
processor.examples:StampedSum, and the Kafka Streams peer set it explicitly: both
default to the input's timestamp), so a gap between outputs read from the topic is a
gap in processing, measured the same way for both.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterable
from typing import Any

import _common
from _common import CpuWindow, cpu_seconds, percentile, wait_until
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from orchestrator.kafka.topics import replication_for
from processor.oracle import OracleResult, check_running_sums

__all__ = ["PARTITIONS", "RATE", "CpuWindow", "Traffic", "committed", "cpu_seconds",
           "create_topics", "first_outputs_after", "moved_gaps_ms", "oracle", "partition_of",
           "percentile", "preload", "read_topic", "wait_until"]

PARTITIONS = 8
RATE = 1000.0          # steady records/s over the state's keys: ~8 ms between outputs of a task
_READ_BATCH = 50_000


def partition_of(key: bytes) -> int:
    """The input partition of a key; a task of either system holds one partition."""
    return zlib.crc32(key) % PARTITIONS


def create_topics(bootstrap: str, *names: str) -> None:
    """The topics, replicated as Baton replicates its own (3 on a three-node cluster)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    replicas = replication_for(len(admin.list_topics(timeout=30).brokers))
    for future in admin.create_topics([NewTopic(n, PARTITIONS, replicas)
                                       for n in names]).values():
        future.result(60)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "vs-topics"})
    try:        # a topic is usable once every partition has a leader
        wait_until(f"leaders of {names}", lambda: all(
            len(consumer.list_topics(n, timeout=10).topics[n].partitions) == PARTITIONS
            and all(p.leader >= 0 for p in consumer.list_topics(n, timeout=10)
                    .topics[n].partitions.values()) for n in names), 60)
    finally:
        consumer.close()


def committed(bootstrap: str, topic: str, group: str) -> tuple[int, int]:
    """(records the group has committed, end of the topic) over all partitions."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        done = sum(max(tp.offset, 0) for tp in consumer.committed(tps, timeout=10))
        end = sum(consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in tps)
        return done, end
    finally:
        consumer.close()


def read_topic(bootstrap: str, topic: str, start_ms: int | None = None) -> list[Any]:
    """The committed records of a topic in partition-offset order, from its beginning or
    from the first record stamped at or after `start_ms`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"vs-read-{time.time()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "receive.message.max.bytes": 1_000_000_000})
    try:
        tps = [TopicPartition(topic, p, 0) for p in range(PARTITIONS)]
        if start_ms is not None:
            tps = [TopicPartition(topic, tp.partition, tp.offset if tp.offset >= 0 else
                                  consumer.get_watermark_offsets(tp, timeout=10)[1])
                   for tp in consumer.offsets_for_times(
                       [TopicPartition(topic, p, start_ms) for p in range(PARTITIONS)], 10)]
        ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in tps}
        consumer.assign(tps)
        out: list[Any] = []
        idle = 0
        while idle < 20:        # a read_committed reader stops at the last stable offset
            batch = [m for m in consumer.consume(_READ_BATCH, 0.5) if not m.error()]
            out += batch
            positions = consumer.position([TopicPartition(topic, p) for p in ends])
            if all(tp.offset >= ends[tp.partition] for tp in positions):
                break
            idle = 0 if batch else idle + 1
        out.sort(key=lambda m: (m.partition(), m.offset()))
        return out
    finally:
        consumer.close()


def oracle(bootstrap: str, input_topic: str, output_topic: str) -> OracleResult:
    """Baton's running-sum oracle over the whole input and output topics."""
    inputs = read_topic(bootstrap, input_topic)
    outputs = read_topic(bootstrap, output_topic)
    return check_running_sums(((m.key(), m.value()) for m in inputs),
                              ((m.key(), m.value()) for m in outputs))


def moved_gaps_ms(outputs: Iterable[Any], moved: set[int], start: float,
                  end: float) -> dict[int, float]:
    """Per moved input partition: the longest gap (ms) between consecutive outputs of its
    keys stamped within [start, end] (epoch seconds)."""
    stamps: dict[int, list[float]] = {p: [] for p in moved}
    for m in outputs:
        at = m.timestamp()[1] / 1000
        if start <= at <= end:
            part = partition_of(m.key())
            if part in stamps:
                stamps[part].append(at)
    gaps: dict[int, float] = {}
    for part, times in stamps.items():
        times.sort()
        widths = [b - a for a, b in zip(times, times[1:], strict=False)]
        gaps[part] = round(max(widths, default=end - start) * 1000, 1)
    return gaps


def first_outputs_after(bootstrap: str, topic: str, after_ms: int, partitions: set[int],
                        timeout: float) -> dict[int, float]:
    """Per input partition in `partitions`: the epoch seconds of its keys' first committed
    output stamped after `after_ms`, waiting up to `timeout` for all of them."""
    deadline = time.monotonic() + timeout
    first: dict[int, float] = {}
    while time.monotonic() < deadline:
        for m in read_topic(bootstrap, topic, start_ms=after_ms - 1000):
            at, part = m.timestamp()[1], partition_of(m.key())
            if at > after_ms and part in partitions:
                first[part] = min(first.get(part, at / 1000), at / 1000)
        if set(first) >= partitions:
            return first
        time.sleep(0.5)
    raise TimeoutError(f"outputs of partitions {sorted(partitions - set(first))} not seen "
                       f"again within {timeout:.0f} s of the kill")


def preload(bootstrap: str, topic: str, keys: int) -> None:
    """One record of value 1 per key: the state both systems build first."""
    _common.preload(bootstrap, topic, keys, partition_of)


class Traffic(_common.Traffic):
    """Steady keyed traffic over the state's keys at `RATE`, on a thread of its own."""

    def __init__(self, bootstrap: str, topic: str, keys: int) -> None:
        super().__init__(bootstrap, topic, keys, RATE, partition_of)
