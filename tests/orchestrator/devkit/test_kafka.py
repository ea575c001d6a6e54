"""The Apache Kafka broker of the tests: starts on free loopback ports, keeps its log
across a SIGKILL and a clean stop, and says where the jars are missing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from orchestrator.devkit.kafka import KafkaBroker, KafkaBrokerError

pytestmark = pytest.mark.integration


def _committed_values(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "devkit-reader",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        high = _high_watermark(consumer, topic)
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while consumer.position([TopicPartition(topic, 0)])[0].offset < high:
            assert time.monotonic() < deadline, f"read {values} of {topic} up to {high}"
            values += [m.value() for m in consumer.consume(100, 0.5) if not m.error()]
        return values
    finally:
        consumer.close()


_LEADERLESS = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)


def _high_watermark(consumer: Consumer, topic: str) -> int:
    """Partition 0's high watermark, once it has a leader: a broker answers metadata as
    soon as it is up, but leads its partitions again only once the controller has
    unfenced it, a few seconds later on a loaded host (NOT_LEADER_FOR_PARTITION until
    then)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1])
        except KafkaException as exc:
            if exc.args[0].code() not in _LEADERLESS or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_a_killed_broker_restarts_with_its_log(tmp_path: Path) -> None:
    # a killed broker's restart waits out its old session: Kafka's default keeps it short
    broker = KafkaBroker(tmp_path / "kafka", settings={"broker.session.timeout.ms": "9000"})
    broker.start()
    try:
        assert broker.bootstrap.startswith("127.0.0.1:")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("kept", 1, 1)])["kept"].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "t"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("kept", b"committed")
        producer.commit_transaction(30)
        producer.begin_transaction()
        producer.produce("kept", b"open")      # never committed: invisible after the crash
        assert producer.flush(30) == 0
        pid = broker.pid
        broker.kill()                          # SIGKILL: the log is recovered on start
        broker.start()
        assert broker.pid != pid
        assert _committed_values(broker.bootstrap, "kept") == [b"committed"]
        broker.restart()                       # clean stop, same ports and log
        assert _committed_values(broker.bootstrap, "kept") == [b"committed"]
    finally:
        broker.close()
    assert broker.pid is None


def test_missing_jars_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATON_KAFKA_LIBS", str(tmp_path / "nowhere"))
    with pytest.raises(KafkaBrokerError, match="nowhere.*./run test"):
        KafkaBroker(tmp_path / "kafka").start()


def test_cluster_ids_never_look_like_an_option() -> None:
    from orchestrator.devkit.kafka import new_cluster_id

    ids = [new_cluster_id() for _ in range(2000)]       # ~1 in 64 would start with "-"
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
