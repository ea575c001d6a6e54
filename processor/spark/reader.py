"""The executor-side reader: one (partition, offset range) read with confluent-kafka,
in offset order, and the planning of ranges into Spark tasks."""

from __future__ import annotations

import re
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.wire.barrier import MARKER_HEADER
from processor.spark.session import SparkError

__all__ = [
    "CONSUME_BATCH", "CONSUME_WAIT_S", "Chunk", "READ_IDLE_TIMEOUT_S", "Ranges",
    "ReadError", "key_partition", "parse_ranges", "plan_chunks", "read_batches",
    "read_range",
]


Ranges = Mapping[str, tuple[int, int]]


# Records per consume() call: large batches amortise the Python/C boundary.
CONSUME_BATCH = 10_000


# Longest wait of one consume() call (it returns early once it has the records asked for).
CONSUME_WAIT_S = 0.2


# A reader that gets no record and no progress this long is stuck (e.g. end beyond the
# last stable offset, or the broker is gone): fail the Spark task, Spark retries it.
READ_IDLE_TIMEOUT_S = 30.0


class ReadError(SparkError):
    """A range could not be read (raised in an executor; Spark retries the task)."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """A contiguous offset range of one partition: one Spark read task.

    `order` is the position of its range in the caller's `ranges`: under the bulk
    path's shuffle plan a key's records are folded in (order, offset) order.
    """

    order: int
    topic: str
    partition: int
    start: int
    end: int


def read_range(settings: Mapping[str, Any], topic: str, partition: int, start: int,
               end: int, idle_timeout_s: float = READ_IDLE_TIMEOUT_S) -> Iterator[Any]:
    """Committed messages of topic:partition with start <= offset < end, in order.

    See `read_batches`, which this flattens.
    """
    for batch in read_batches(settings, topic, partition, start, end, idle_timeout_s):
        yield from batch


def without_markers(messages: Iterable[Any], where: str, refuse: bool) -> Iterator[Any]:
    """`messages` less expansion barrier markers (orchestrator/wire/barrier.py).

    Args:
        refuse: raise ReadError at a marker instead (a bulk replay: its ranges end
            before the barriers it knows, so a marker in one is a barrier it does not
            know yet, and the records after it may have to be skipped; the consumer
            path, which learns the barrier from the marker, takes over).
    """
    for msg in messages:
        if msg.key() is None and any(name == MARKER_HEADER for name, _ in msg.headers() or ()):
            if refuse:
                raise ReadError(f"reading {where}: an expansion barrier marker at offset "
                                f"{msg.offset()} the bulk plan did not know of; the "
                                "consumer path replays the rest")
            continue
        yield msg


def read_batches(settings: Mapping[str, Any], topic: str, partition: int, start: int,
                 end: int, idle_timeout_s: float = READ_IDLE_TIMEOUT_S) -> Iterator[list[Any]]:
    """Committed messages of topic:partition with start <= offset < end, in order, in
    batches (hot loops iterate lists, not a generator per record).

    Args:
        settings: librdkafka settings (bootstrap servers and any broker quirks).
        topic, partition, start, end: the range; `end` is exclusive.
        idle_timeout_s: fail after this long without progress.

    Yields:
        Non-empty lists of confluent_kafka.Message (aborted records and transaction
        markers are skipped by the client).

    Raises:
        ReadError: the range cannot be read (log start above `start`, no
            progress, a broker error); the message names the partition and offsets.
    """
    if end <= start:
        return
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({**settings, "group.id": "baton.reader", "enable.auto.commit": False,
                         "enable.auto.offset.store": False, "auto.offset.reset": "error",
                         "isolation.level": "read_committed", "enable.partition.eof": False})
    where = f"{topic}:{partition} [{start}, {end})"
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        position, idle_since = start, time.monotonic()
        while position < end:
            # consume() waits for the full count: never ask for more than the range holds
            batch = consumer.consume(min(CONSUME_BATCH, end - position), CONSUME_WAIT_S)
            if batch:
                idle_since = time.monotonic()
                batch, position = _in_range(batch, start, end, where)
                if batch:
                    yield batch
                continue
            position = max(position, consumer.position([TopicPartition(topic, partition)])[0]
                           .offset)
            if time.monotonic() - idle_since > idle_timeout_s:
                raise ReadError(
                    f"reading {where}: stuck at offset {position} for {idle_timeout_s:.0f}s; "
                    "is the end beyond the partition's last stable offset, or is the broker "
                    "down?")
    except KafkaException as exc:
        raise ReadError(f"reading {where}: {exc}") from exc
    finally:
        consumer.close()


def _in_range(batch: list[Any], start: int, end: int, where: str) -> tuple[list[Any], int]:
    """The batch's messages within [start, end), and the position after it."""
    for msg in batch:
        if msg.error() is not None:
            raise ReadError(f"reading {where} near offset {batch[0].offset()}: "
                                   f"{msg.error()}; is the input retained from {start}?")
    first, last = batch[0].offset(), batch[-1].offset()
    if first >= start and last < end:
        return batch, last + 1
    kept = [msg for msg in batch if start <= msg.offset() < end]
    return kept, end if last >= end else last + 1


def parse_ranges(ranges: Ranges) -> list[Chunk]:
    """Validate {"topic:N": (start, end)} into one whole-range Chunk per entry, in order.

    Raises:
        ValueError: a malformed partition name or offsets, or no ranges at all.
    """
    out = []
    for order, (name, bounds) in enumerate(ranges.items()):
        found = re.fullmatch(r"(.+):(\d+)", name)
        start, end = bounds
        if found is None or not (isinstance(start, int) and isinstance(end, int)
                                 and 0 <= start <= end):
            raise ValueError(f"range {name!r}: {bounds!r}: need 'topic:N': (start, end) "
                             "with 0 <= start <= end")
        out.append(Chunk(order, found.group(1), int(found.group(2)), start, end))
    if not out:
        raise ValueError("no ranges to catch up")
    return out


def plan_chunks(ranges: Ranges, chunk_records: int | None = None) -> list[Chunk]:
    """One read chunk per non-empty range, or sub-ranges of `chunk_records` offsets."""
    chunks: list[Chunk] = []
    for whole in parse_ranges(ranges):
        step = chunk_records or max(whole.end - whole.start, 1)
        chunks.extend(Chunk(whole.order, whole.topic, whole.partition, lo,
                            min(lo + step, whole.end))
                      for lo in range(whole.start, whole.end, step))
    return chunks


def key_partition(key: bytes | None) -> int:
    """A stable hash of a record key (Python's hash() differs between processes)."""
    return zlib.crc32(key) if key is not None else 0
