"""The split key filter picks the producers' partition: checked against librdkafka itself."""

from __future__ import annotations

import random
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from orchestrator.wire.partitioners import (
    PARTITIONERS,
    fnv1a,
    home_partition,
    murmur2,
    partitioner,
    state_key_bytes,
)


def _keys() -> list[bytes]:
    rng = random.Random(7)
    keys = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))) for _ in range(400)]
    return keys + [b"key-%d" % i for i in range(400)] + ["clé-ü".encode(), b"\x00", b"a" * 3]


def test_known_vectors() -> None:
    """Reference values of 32-bit FNV-1a."""
    assert fnv1a(b"") == 0x811C9DC5
    assert fnv1a(b"a") == 0xE40C292C
    assert fnv1a(b"foobar") == 0xBF9CF968


def test_java_murmur2_reference() -> None:
    """Values the Java client's `Utils.murmur2` gives (from Kafka's own unit test)."""
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
             b"abc": 479470107}
    for key, signed in cases.items():
        assert murmur2(key) == signed & 0xFFFFFFFF, key


def test_keyless_records_have_no_home() -> None:
    for name in PARTITIONERS:
        assert home_partition(name, None, 8) is None
    assert home_partition("consistent_random", b"", 8) is None
    assert home_partition("murmur2_random", b"", 8) is not None


def test_unknown_partitioner_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown partitioner 'crc'"):
        partitioner("crc")


def test_state_keys_map_back_to_record_keys() -> None:
    assert state_key_bytes("k1") == b"k1"
    assert state_key_bytes(b"k1") == b"k1"
    assert state_key_bytes(5) is None


@pytest.mark.integration
@pytest.mark.parametrize("name", PARTITIONERS)
@pytest.mark.parametrize("count", [8, 12])
def test_matches_librdkafka(broker: Any, name: str, count: int) -> None:
    """Produce with librdkafka's partitioner `name`; ours picks the same partition."""
    topic = f"partitioner-{name}-{count}".replace("_", "-")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, count, 1)])[topic].result(30)
    keys = _keys()
    placed: dict[int, int] = {}
    producer = Producer({"bootstrap.servers": broker.bootstrap, "partitioner": name})
    for i, key in enumerate(keys):
        producer.produce(topic, key=key, value=b"",
                         on_delivery=lambda err, msg, i=i: placed.__setitem__(i, msg.partition()))
    assert producer.flush(30) == 0
    assert len(placed) == len(keys)
    wrong = [keys[i] for i, key in enumerate(keys) if home_partition(name, key, count) != placed[i]]
    assert not wrong, f"{name}: {len(wrong)} keys placed elsewhere by librdkafka, e.g. {wrong[:3]}"
