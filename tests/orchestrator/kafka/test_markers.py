"""Finding the barrier markers a settlement committed, on a real broker."""

from __future__ import annotations

import pytest

from orchestrator.kafka.markers import find_markers
from orchestrator.wire.barrier import encode_marker

pytestmark = pytest.mark.integration


def test_finds_the_jobs_own_marker_past_the_floor(broker, unique) -> None:
    topic = broker.create_topic(unique("events"), 2)
    producer = broker.producer()
    for i in range(5):
        producer.produce(topic, key=f"k{i}".encode(), value=b"1", partition=1)
    value, headers = encode_marker("other", f"{topic}:1", [f"{topic}:3"], 4)
    producer.produce(topic, value=value, headers=headers, partition=1)        # offset 5
    value, headers = encode_marker("sums", f"{topic}:1", [f"{topic}:3"], 4)
    producer.produce(topic, value=value, headers=headers, partition=1)        # offset 6
    producer.produce(topic, key=b"k9", value=b"1", partition=1)
    assert producer.flush(30) == 0
    due = {f"{topic}:1": [f"{topic}:3"], f"{topic}:0": [f"{topic}:2"]}
    floors = {f"{topic}:1": 2, f"{topic}:0": 0}
    assert find_markers(broker.settings(), "sums", due, floors) == {f"{topic}:1": 6}
    assert find_markers(broker.settings(), "sums", due, {f"{topic}:1": 7}) == {}
