"""catch_up.source = "changelog" on a changelog Apache Kafka really compacted: short
segments, a cleaner that runs at once, tombstones kept 100 ms. A standby that followed
along, a new warmup that reads only what compaction left, and a replica that comes back
to a checkpoint whose earlier records (applied before it left) and later ones were
compacted away, tombstones included, all end with the owner's store.

The job is ResettableSum (a value of 0 deletes the key: its changelog carries
tombstones)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from orchestrator.devkit.kafka import KafkaBroker
from orchestrator.wire.changelog import changelog_topic
from orchestrator.wire.config import parse_config
from orchestrator.wire.partitions import format_partition
from orchestrator.wire.protocol import HeartbeatReply, RoleListing
from processor.runtime import TaskRuntime
from tests.brokers import Broker
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

TASK = "Partition 0"
# the log cleaner looks for work every 100 ms instead of every 15 s: compaction (and the
# later pass that drops tombstones past delete.retention.ms) comes within seconds
CLEANER = {"log.cleaner.backoff.ms": "100"}
COMPACTED = {"cleanup.policy": "compact", "segment.ms": "100", "min.compaction.lag.ms": "0",
             "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "100"}


@pytest.fixture(scope="module")
def compacting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    kafka = KafkaBroker(tmp_path_factory.mktemp("compacting"), settings=CLEANER)
    kafka.start()
    try:
        yield Broker(kafka.bootstrap, {}, kafka)
    finally:
        kafka.close()


def _reply(model: dict[str, list[str]], active: list[str] = (), warmup: list[str] = (),
           standby: list[str] = ()) -> HeartbeatReply:
    return HeartbeatReply(alive=True, tasks=model, changelog={t: n for n, t in enumerate(model)},
                          assignment=RoleListing(active=list(active), warmup=list(warmup),
                                                 standby=list(standby)))


def _produce(broker: Broker, topic: str, records: list[tuple[str, int]]) -> None:
    producer = broker.producer()
    for key, value in records:
        producer.produce(topic, key=key.encode(), value=str(value).encode())
    assert producer.flush(30) == 0


def _present(broker: Broker, topic: str, below: int) -> list[int]:
    return [m.offset() for m in broker.read_all(topic) if m.offset() < below]


def _tombstones(broker: Broker, topic: str) -> int:
    return sum(1 for m in broker.read_all(topic) if m.value() is None)


def _state(runtime: TaskRuntime) -> dict[Any, Any]:
    holder = runtime.active.get(TASK) or runtime.replicas[TASK]
    return dict(holder.store.state.iter_items())


def test_replicas_of_a_compacted_changelog_equal_the_owner(
        compacting: Broker, job_config: Callable[..., dict[str, Any]], tmp_path: Path) -> None:
    raw = job_config(partitions=1, catch_up={"source": "changelog"})
    raw["job"]["class"] = "processor.examples:ResettableSum"
    raw["kafka"] = compacting.kafka_table()
    inputs, output = raw["job"]["inputs"][0], raw["job"]["output"]
    compacting.create_topic(inputs, 1)
    compacting.create_topic(output, 1)
    changelog = changelog_topic(raw["job"]["name"])
    admin = AdminClient({"bootstrap.servers": compacting.bootstrap})
    admin.create_topics([NewTopic(changelog, 1, 1, config=COMPACTED)])[changelog].result(30)
    partition = format_partition(inputs, 0)
    model = {TASK: [partition]}
    runtimes = {name: TaskRuntime(parse_config(
        {**raw, "processor": {**raw["processor"], "state_dir": str(tmp_path / name)}}), name)
        for name in ("p1", "p2", "p3", "p4")}
    owner, standby, returning, fresh = runtimes.values()

    def poll() -> None:
        for runtime in runtimes.values():
            runtime.poll(0.02)

    def applied(runtime: TaskRuntime, offset: int) -> bool:
        replica = runtime.replicas.get(TASK)
        return (replica is not None and replica.caught_up()
                and replica.reported_positions().get(partition) == offset)

    def owner_at(offset: int) -> bool:
        assert not owner.failed, owner.failed
        return TASK in owner.active and owner.active[TASK].committed.get(partition) == offset

    try:
        owner.apply(_reply(model, active=[TASK]))
        standby.apply(_reply(model, standby=[TASK]))
        # every key gets state, k0 and k1 included; k9 is deleted and written again
        first = [(f"k{i % 10}", i % 9 + 1) for i in range(300)] + [("k9", 0), ("k9", 4)]
        _produce(compacting, inputs, first)
        wait_for(lambda: owner_at(302), 60, "the owner to commit the first records", poll)
        returning.apply(_reply(model, warmup=[TASK]))
        wait_for(lambda: applied(returning, 302), 60, "the warmup to apply them", poll)
        left_at = returning.replicas[TASK].positions[returning.replicas[TASK].partitions[0]]
        returning.apply(_reply(model))         # it leaves; its store keeps the checkpoint
        assert TASK not in returning.replicas
        before = _present(compacting, changelog, left_at)
        # the keys it held get new values; k0 and k1 end deleted (tombstones past its
        # checkpoint), then, in a later segment, more writes
        second = [(f"k{i % 10}", i % 7 + 1) for i in range(300)] + [("k0", 0), ("k1", 0)]
        _produce(compacting, inputs, second)
        wait_for(lambda: owner_at(604), 60, "the owner to commit the second records", poll)
        time.sleep(0.2)                         # past segment.ms: the next write rolls
        _produce(compacting, inputs, [(f"k{i}", 1) for i in range(2, 10)])
        wait_for(lambda: owner_at(612), 60, "the owner to commit the last records", poll)
        # The cleaner drops a tombstone in a pass that comes after delete.retention.ms
        # and finds something dirty; a pass can only clean rolled segments. Writes to k2
        # keep rolling segments (segment.ms) and making work for the cleaner until it
        # has passed over the tombstones again.
        fed, last = [612], [0.0]

        def feed_and_poll() -> None:
            if time.monotonic() - last[0] > 0.3:
                _produce(compacting, inputs, [("k2", 1)])
                fed[0], last[0] = fed[0] + 1, time.monotonic()
            poll()

        wait_for(lambda: len(_present(compacting, changelog, left_at)) < len(before)
                 and _tombstones(compacting, changelog) == 0, 120,
                 "compaction to drop applied records and the tombstones", feed_and_poll)
        wait_for(lambda: owner_at(fed[0]), 60, "the owner to commit the writes to k2", poll)
        returning.apply(_reply(model, warmup=[TASK]))
        fresh.apply(_reply(model, warmup=[TASK]))
        wait_for(lambda: all(applied(r, fed[0]) for r in (standby, returning, fresh)), 60,
                 "the replicas to apply the compacted changelog", poll)
        expected = _state(owner)
        assert b"k0" not in expected and b"k1" not in expected and len(expected) == 8
        assert _state(standby) == expected
        assert _state(fresh) == expected
        assert _state(returning) == expected
    finally:
        for runtime in runtimes.values():
            runtime.close(commit=False)
