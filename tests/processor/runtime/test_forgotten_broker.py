"""The processors' consumers across restarts of their only broker: each one reads again.

During a broker's controlled shutdown librdkafka can take a metadata answer that lists no
broker and forget the one it knew. Without re-bootstrap such a client never connects
again: a consumer assigned its partitions reads nothing more, and says nothing
(docs/operations.md, "When the broker restarts"). The fault does not come at every
restart: with `metadata.recovery.strategy = "none"` in [kafka], this test failed one run
in two (consumers that read nothing after the first restart). The traffic is written as
fast as the producer goes: with paced traffic and two restarts it caught nothing.

Re-bootstrap does not catch every such client: a consumer can stay cut off from a
broker that is back while the processor's other clients are not, so a processor
replaces an active consumer found so (processor/runtime/cut_off.py). Each consumer is
read here as the runtime reads it, through that watch: one replaced is probed for 10 s
and found cut off for 30 s first, so a restart's reads may take up to a minute more.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import Consumer, Message

from orchestrator.wire.clock import SystemClock
from orchestrator.wire.config import parse_config
from processor.runtime.batches import topic_partition
from processor.runtime.consumers import Consumers
from tests.brokers import Broker
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

PROCESSORS = 6
PARTITIONS = 4
# how long the broker stays away at each restart (the stops that left consumers knowing
# no broker had it away for seconds); more restarts, more chances to meet the fault
DOWNTIMES_S = (6.0, 2.0, 6.0, 4.0)


@pytest.fixture
def broker(restartable_broker: Broker) -> Broker:
    return restartable_broker


class _Traffic:
    """Keyed records written without a pause, through the restarts."""

    def __init__(self, broker: Broker, topic: str) -> None:
        self._producer = broker.producer()
        self._topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self._producer.produce(self._topic, key=f"k{i % 31}".encode(), value=b"1")
                i += 1
            except BufferError:     # the broker is away and the local queue is full
                pass
            self._producer.poll(0.002)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(30)


class _Readers:
    """Each processor's active consumer, read as its runtime reads it (one task that
    owns every partition, going on where it has read to), without a pause on one
    thread; where each got to in every partition."""

    def __init__(self, fleet: list[Consumers], topic: str) -> None:
        partitions = [f"{topic}:{p}" for p in range(PARTITIONS)]
        self._tasks = [SimpleNamespace(name="t", partitions=partitions,
                                       committed=dict.fromkeys(partitions, 0),
                                       pending=dict.fromkeys(partitions, 0))
                       for _ in fleet]
        self._active = [c.active for c in fleet]
        for active, task in zip(self._active, self._tasks, strict=True):
            active.add(task)
        self.next_offsets: list[dict[int, int]] = [{} for _ in fleet]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for i, active in enumerate(self._active):
                for msg in active.poll(500, 0.02, {"t": self._tasks[i]}):
                    self._note(i, msg)

    def _note(self, i: int, msg: Message) -> None:
        if msg.error() is None:
            self.next_offsets[i][msg.partition()] = msg.offset() + 1
            self._tasks[i].pending[f"{msg.topic()}:{msg.partition()}"] = msg.offset() + 1

    @property
    def replaced(self) -> int:
        """How many active consumers were found cut off and replaced."""
        return sum(active.replaced for active in self._active)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _ends(settings: dict[str, Any], topic: str) -> dict[int, int]:
    consumer = Consumer({**settings, "group.id": "ends"})
    try:
        return {p: consumer.get_watermark_offsets(topic_partition(f"{topic}:{p}"), 10)[1]
                for p in range(PARTITIONS)}
    finally:
        consumer.close()


def _read_to(readers: _Readers, ends: dict[int, int], least: int = 0) -> bool:
    """Whether every consumer has read each partition up to `ends` (and at least
    `least` records of it)."""
    return all(all(seen.get(p, 0) >= max(end, least) for p, end in ends.items())
               for seen in readers.next_offsets)


def _short(readers: _Readers, ends: dict[int, int]) -> dict[int, dict[int, int]]:
    """Consumer -> partition -> next offset, where a consumer has not read to `ends`:
    which client a failure left behind, and whether it read anything since."""
    short = {}
    for i, seen in enumerate(readers.next_offsets):
        behind = {p: seen.get(p, 0) for p, end in ends.items() if seen.get(p, 0) < end}
        if behind:
            short[i] = behind
    return short


@pytest.fixture
def fleet(job_config: Any) -> Iterator[tuple[str, dict[str, Any], list[Consumers]]]:
    config = parse_config(job_config(partitions=PARTITIONS))
    topic = config.job.inputs[0]
    made = [Consumers(config, f"baton.{config.job.name}", SystemClock())
            for _ in range(PROCESSORS)]
    yield topic, config.kafka_settings(), made
    for consumers in made:
        consumers.close()


def test_every_consumer_reads_again_after_each_restart(
        broker: Broker, fleet: tuple[str, dict[str, Any], list[Consumers]]) -> None:
    topic, settings, consumers = fleet
    local = broker.local
    assert local is not None, "a broker of the module's own"
    traffic = _Traffic(broker, topic)
    readers = _Readers(consumers, topic)
    try:
        first = _ends(settings, topic)
        wait_for(lambda: _read_to(readers, first, least=1), 60,
                 "every consumer to read every partition before the first restart")
        for restart, downtime in enumerate(DOWNTIMES_S, 1):
            local.stop()
            time.sleep(downtime)
            local.start()
            ends = _ends(settings, topic)
            try:
                wait_for(functools.partial(_read_to, readers, ends), 120,
                         f"every consumer to read past restart {restart} (to {ends})")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; short of it: {_short(readers, ends)}; "
                                     f"replaced: {readers.replaced}") from None
    finally:
        readers.close()
        traffic.close()
