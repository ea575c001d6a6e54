"""Replica (catch_up.source = "input") on real RocksDB with messages made up: a consumer
error inside a partition's run (the runtime hands runs over whole) is skipped."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, Message

from processor.examples import RunningSum
from processor.replica import Replica


def test_a_consumer_error_in_a_run_is_logged_and_skipped(
        store: Any, caplog: pytest.LogCaptureFixture) -> None:
    replica = Replica("Partition 0", ["in:0"], RunningSum(), store, "warmup", {"in:0": 0},
                      {"in:0": 10})
    error = Message(topic="in", partition=0, error=KafkaError(KafkaError._TRANSPORT))  # noqa: SLF001
    batch = [Message(topic="in", partition=0, offset=0, key=b"k", value=b"2"), error,
             Message(topic="in", partition=0, offset=1, key=b"k", value=b"3")]
    replica.apply(batch)
    replica.commit()
    assert store[b"k"] == 5
    assert replica.positions == {"in:0": 2}
    assert replica.applied_total == 2
    assert "consumer error on in:0" in caplog.text
