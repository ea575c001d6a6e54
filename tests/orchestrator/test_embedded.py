"""The broker fixture works: a produce/consume round trip, and a clean restart keeps data."""

from __future__ import annotations

import pytest

from orchestrator.embedded import EmbeddedBroker, EmbeddedBrokerError, free_port

pytestmark = pytest.mark.integration


def test_round_trip(broker, unique) -> None:
    topic = broker.create_topic(unique("rt"), 3)
    producer = broker.producer()
    sent = {(f"k{i}".encode(), str(i).encode()) for i in range(300)}
    for key, value in sent:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0
    got = broker.read_all(topic)
    assert {(m.key(), m.value()) for m in got} == sent
    assert len(got) == len(sent)


def test_clean_restart_keeps_data(tmp_path) -> None:
    port = free_port()
    first = EmbeddedBroker(tmp_path, port)
    first.start()
    try:
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": first.bootstrap})
        admin.create_topics([NewTopic("kept", 1, 1)])["kept"].result(30)
        from confluent_kafka import Producer
        producer = Producer({"bootstrap.servers": first.bootstrap})
        for i in range(10):
            producer.produce("kept", value=str(i).encode())
        assert producer.flush(30) == 0
    finally:
        first.stop()
    second = EmbeddedBroker(tmp_path, port)
    second.start()
    try:
        from tests.conftest import Broker
        values = [m.value() for m in Broker(second.bootstrap, second.client_settings(), None)
                  .read_all("kept")]
        assert values == [str(i).encode() for i in range(10)]
    finally:
        second.stop()


def test_unstartable_data_dir_is_named(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises((EmbeddedBrokerError, OSError), match=str(blocker)):
        EmbeddedBroker(blocker).start()
