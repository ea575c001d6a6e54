"""The Spark path's check that its input ranges are still on the broker.

A bulk replay of the input must start where the replica's history does (processor/
retention.py): a range whose start retention or DeleteRecords removed would build a
state from a suffix of the input. The driver looks each range's partition up once,
before any Spark task runs, and refuses with the same error as the consumer path; the
executors' readers would also fail on such a range (auto.offset.reset = error), but
with a fetch error and after Spark's task retries.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.kafka.logs import client_logging
from orchestrator.kafka.offsets import watermarks
from processor.retention import check_retained

__all__ = ["check_ranges_retained"]


def check_ranges_retained(settings: Mapping[str, Any], ranges: Mapping[str, tuple[int, int]],
                          task: str) -> None:
    """Refuse `ranges` ({"topic:N": (start, end)}) whose start the broker no longer holds.

    Raises:
        InputTrimmedError: a partition's first offset is above its range's start.
    """
    from confluent_kafka import Consumer

    consumer = Consumer({**settings, **client_logging("processor.retained"),
                         "group.id": "baton.reader", "enable.auto.commit": False})
    try:
        check_retained(task, {p: lo for p, (lo, _) in ranges.items()},
                       {p: hi for p, (_, hi) in ranges.items()},
                       lambda partition: watermarks(consumer, partition)[0])
    finally:
        consumer.close()
