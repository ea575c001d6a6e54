"""The broker the tests run on: Apache Kafka (one node, or the three-node cluster of
BATON_TEST_BROKER=kafka3), the embedded noida-db, or the one in BATON_TEST_BOOTSTRAP
(tests/conftest.py's `broker` fixtures start and stop it), with its client settings,
topic creation and a reader of whole topics."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from orchestrator.devkit.embedded import (
    EMBEDDED_CATCH_UP_SETTINGS,
    EMBEDDED_CLIENT_SETTINGS,
    EMBEDDED_KAFKA_SETTINGS,
    EMBEDDED_PROCESSOR_SETTINGS,
    EmbeddedBroker,
)
from orchestrator.devkit.kafka import KafkaBroker
from orchestrator.devkit.kafka_cluster import KafkaCluster
from tests.waiting import wait_for

__all__ = ["Broker", "broker_kind", "local_broker"]

# which local broker the tests start: Apache Kafka (the default: one node), a three-node
# Apache Kafka cluster (replication 3, min.insync.replicas 2), or the embedded noida-db
_BROKER_KINDS = ("kafka", "kafka3", "embedded")


class Broker:
    """What tests know about the broker: where it is, which client settings it needs, and
    the local broker the tests started (None for one given in BATON_TEST_BOOTSTRAP).
    `embedded` is set for the embedded broker, whose profile the daemons then get;
    `cluster` for the three-node cluster, whose nodes fault tests stop, kill and freeze.
    Test topics get as many replicas as the cluster production would give them."""

    def __init__(self, bootstrap: str, extra: dict[str, Any],
                 local: EmbeddedBroker | KafkaBroker | KafkaCluster | None = None) -> None:
        self.bootstrap = bootstrap
        self.extra = extra
        self.local = local
        self.embedded = local if isinstance(local, EmbeddedBroker) else None
        self.cluster = local if isinstance(local, KafkaCluster) else None
        self.replication = 3 if self.cluster is not None else 1

    def settings(self, **more: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, **self.extra, **more}

    def kafka_table(self) -> dict[str, Any]:
        """The [kafka] table of a Baton config for this broker (the embedded one's: its
        daemons' profile, as the demo's)."""
        daemons = EMBEDDED_KAFKA_SETTINGS if self.embedded is not None else {}
        return {"bootstrap_servers": self.bootstrap, **self.extra, **daemons}

    def catch_up_table(self) -> dict[str, Any]:
        """The [catch_up] settings this broker needs (the embedded one's quirks)."""
        return dict(EMBEDDED_CATCH_UP_SETTINGS) if self.embedded is not None else {}

    def processor_table(self) -> dict[str, Any]:
        """The [processor] settings this broker needs (the embedded one's idle back-off)."""
        return dict(EMBEDDED_PROCESSOR_SETTINGS) if self.embedded is not None else {}

    def create_topic(self, name: str, partitions: int) -> str:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        spec = NewTopic(name, partitions, self.replication)
        for future in admin.create_topics([spec]).values():
            future.result(30)
        # Apache Kafka's brokers learn a new topic from the metadata log a moment after
        # CreateTopics answers: wait until every partition has a leader
        wait_for(lambda: _has_leaders(admin, name, partitions), 30, f"leaders of {name}")
        return name

    def producer(self, **more: Any) -> Producer:
        return Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, **more})

    def read_all(self, topic: str, timeout: float = 60.0,
                 committed_only: bool = True) -> list[Any]:
        """Every message of `topic` up to its current end, in partition-offset order."""
        consumer = Consumer(self.settings(**{
            "group.id": f"reader-{uuid.uuid4()}", "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed_only else "read_uncommitted",
            "auto.offset.reset": "earliest"}))
        try:
            return _drain(consumer, topic, timeout)
        finally:
            consumer.close()


def _has_leaders(admin: AdminClient, topic: str, partitions: int) -> bool:
    meta = admin.list_topics(topic, timeout=10).topics.get(topic)
    return (meta is not None and meta.error is None and len(meta.partitions) == partitions
            and all(p.leader >= 0 for p in meta.partitions.values()))


def _drain(consumer: Consumer, topic: str, timeout: float) -> list[Any]:
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    ends = {}
    for p in meta.partitions:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        ends[p] = high
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    out: list[Any] = []
    done = {p for p, high in ends.items() if high == 0}
    deadline = time.monotonic() + timeout
    positions: dict[int, int] = {}
    while len(done) < len(ends):
        if time.monotonic() > deadline:
            # a read_committed reader stops at the first open transaction; a partial
            # read would look like lost records to the oracle, so say so instead
            behind = {p: f"{positions.get(p)} of {ends[p]}" for p in ends if p not in done}
            raise AssertionError(f"{topic} not read to its end within {timeout:.0f} s "
                                 f"(partition: position of end {behind}); "
                                 "an open transaction holds its last stable offset")
        for msg in consumer.consume(10000, 0.5):
            if msg.error():
                continue
            out.append(msg)
        for p, high in ends.items():
            pos = consumer.position([TopicPartition(topic, p)])[0].offset
            positions[p] = pos
            if pos >= high:
                done.add(p)
    out.sort(key=lambda m: (m.partition(), m.offset()))
    return out


def broker_kind() -> str:
    """The local broker kind BATON_TEST_BROKER picks (kafka unless told)."""
    kind = os.environ.get("BATON_TEST_BROKER", "kafka") or "kafka"
    if kind not in _BROKER_KINDS:
        raise pytest.UsageError(f"BATON_TEST_BROKER={kind!r}: expected one of "
                                f"{', '.join(_BROKER_KINDS)}")
    return kind



@contextmanager
def local_broker(directory: Path) -> Iterator[Broker]:
    """A started broker of the selected kind in `directory`, stopped on exit."""
    if broker_kind() == "embedded":
        embedded = EmbeddedBroker(directory)
        embedded.start()
        try:
            yield Broker(embedded.bootstrap, dict(EMBEDDED_CLIENT_SETTINGS), embedded)
        finally:
            embedded.close()
        return
    with _in_memory("baton-test-kafka-") as logs:
        kafka: KafkaBroker | KafkaCluster = (
            KafkaCluster(directory, logs=logs, nice=BROKER_NICE, jvm_options=BROKER_JVM)
            if broker_kind() == "kafka3"
            else KafkaBroker(directory, logs=logs, nice=BROKER_NICE, jvm_options=BROKER_JVM))
        kafka.start()
        try:
            _load_coordinators(kafka.bootstrap)
            yield Broker(kafka.bootstrap, {}, kafka)
        finally:
            kafka.close()


# The test broker's priority where the tests run as root: every test of a session
# waits on it, and on a 2-core host running the sessions side by side (load 30 and up)
# it was starved long enough for a coordinator's stream write to outlast its lease.
BROKER_NICE = -5 if os.geteuid() == 0 else 0
# The test brokers' JIT: C1 only. The brokers are the suite's largest CPU cost on a
# machine its lanes keep busy, and much of it is the C2 compiler's, which a broker
# serving a test's short bursts never earns back (docs/performance.md, "Measurements
# behind the code"). Benchmarks keep Kafka's own JIT. BATON_TEST_BROKER_JVM overrides.
BROKER_JVM = tuple(os.environ.get("BATON_TEST_BROKER_JVM", "-XX:TieredStopAtLevel=1").split())


@contextmanager
def _in_memory(prefix: str) -> Iterator[Path | None]:
    """A directory on the host's tmpfs (/dev/shm), removed on exit; None without one.

    A test broker keeps its partitions' and metadata log there: KRaft syncs every
    metadata-log write to disk, and on a 2-core host running the suite's sessions side
    by side one such write took 22 s ("Exceptionally slow controller event"); the
    broker then rolled back the tests' 10 s transactions. Its own log stays in
    `directory` with the test's other files."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield None
        return
    made = Path(tempfile.mkdtemp(prefix=prefix, dir=shm))
    try:
        yield made / "log"
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _load_coordinators(bootstrap: str) -> None:
    """Make a fresh Apache Kafka broker create and load its offsets and transaction-state
    topics: it does so at their first use, and answers "coordinator load in progress"
    or "not coordinator" meanwhile, which a test's first lookup of committed offsets
    then met instead of its own subject (a Spark warmup that found no backlog)."""
    name = f"load-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": name})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": name})
    try:
        producer.init_transactions(60)
        # the group coordinator answers "not coordinator" until its partition has loaded
        wait_for(lambda: _committed_answers(consumer, name), 60,
                 "the fresh broker's group coordinator")
    finally:
        consumer.close()


def _committed_answers(consumer: Consumer, topic: str) -> bool:
    try:
        consumer.committed([TopicPartition(topic, 0)], timeout=10)
    except KafkaException:
        return False
    return True
