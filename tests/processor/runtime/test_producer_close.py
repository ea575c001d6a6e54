"""Closing a stopped task's producer: its client goes at once while the brokers answer,
after a restart once they answer again, and a close never outlives its bound.

`Producer.close()` alone aborts and flushes without a time limit: with the broker away
it never returned, and each such close kept a client (4 threads, sockets) and a thread
for the life of the daemon."""

from __future__ import annotations

import logging
import threading
import time
import uuid
import weakref
from collections.abc import Callable

import pytest

from orchestrator.kafka.watched_producer import WatchedProducer
from orchestrator.wire.collector import WANTED_GAP_S, Collector
from processor.runtime.producer_close import close_producer
from tests.brokers import Broker
from tests.processor.runtime.runtime_support import producer_closed
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.kafka]


@pytest.fixture
def broker(restartable_broker: Broker) -> Broker:
    return restartable_broker


def _in_transaction(broker: Broker, topic: str) -> WatchedProducer:
    """A task's producer as a stopped task leaves it: a transaction open, with records
    delivered and more still queued."""
    producer = WatchedProducer(broker.settings(**{
        "transactional.id": f"task-{uuid.uuid4().hex[:8]}", "linger.ms": 5,
        "transaction.timeout.ms": 60_000, "metadata.recovery.strategy": "none"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(50):
        producer.produce(topic, key=f"k{i}".encode(), value=b"1")
    assert producer.flush(30) == 0
    for i in range(50):
        producer.produce(topic, key=f"k{i}".encode(), value=b"2")
    return producer


def test_the_client_goes_at_once_even_while_something_still_holds_it(
        broker: Broker, unique: Callable[[str], str]) -> None:
    topic = broker.create_topic(unique("out"), 2)
    producer = _in_transaction(broker, topic)
    close_producer(producer).join(30)
    assert producer_closed(producer), "the client is destroyed, not left to the last reference"
    assert broker.read_all(topic, timeout=10) == [], "the open transaction is aborted"


def test_a_close_waits_out_a_broker_restart(
        broker: Broker, unique: Callable[[str], str], caplog: pytest.LogCaptureFixture) -> None:
    """Once the broker is back the close ends: closed, or, when librdkafka stays stuck
    on the transaction after the restart (seen in about one run in five), given up at
    its bound and said so. Either way nothing of the transaction is ever read."""
    local = broker.local
    assert local is not None, "a broker of the module's own"
    topic = broker.create_topic(unique("out"), 2)
    producer = _in_transaction(broker, topic)
    local.stop()
    with caplog.at_level(logging.INFO, logger="processor.runtime.producer_close"):
        try:
            closing = close_producer(producer)
            time.sleep(4)
            assert closing.is_alive(), "with the broker away, the close waits for it"
        finally:
            local.start()
        closing.join(90)
    assert producer_closed(producer) or "could not end its transaction" in caplog.text
    # given up, the closing thread drops the producer once it holds the last reference:
    # this test's is the other one
    del producer
    closing.join(10)
    assert not closing.is_alive()
    assert broker.read_all(topic, timeout=10) == [], "the open transaction never commits"


class _Failure:
    """What holds a stopped task's producer after it: a cycle, as an error's traceback
    through the task that raised it makes one."""

    def __init__(self, producer: WatchedProducer) -> None:
        self.producer = producer
        self.me = self


def test_a_close_never_outlives_its_bound(
        broker: Broker, unique: Callable[[str], str], caplog: pytest.LogCaptureFixture) -> None:
    """A producer whose transaction cannot be ended is dropped at the bound, and its
    client is destroyed on the closing thread once the cycle that held it is collected:
    not on the daemon's loop, which runs the collection (a destroy that blocks there
    stopped a processor's loop for good)."""
    local = broker.local
    assert local is not None, "a broker of the module's own"
    topic = broker.create_topic(unique("out"), 2)
    producer = _in_transaction(broker, topic)
    destroyed_on: list[str] = []
    dropped = weakref.ref(producer,
                          lambda _: destroyed_on.append(threading.current_thread().name))
    _Failure(producer)
    collector = Collector(full_s=3600.0)
    local.stop()
    try:
        started = time.monotonic()
        with caplog.at_level(logging.INFO, logger="processor.runtime.producer_close"):
            closing = close_producer(producer, end_within_s=3)
            del producer
            wait_for(lambda: "could not end its transaction" in caplog.text, 30,
                     "the close gave up instead of waiting for good")
        took = time.monotonic() - started
        assert took < 10, f"the close took {took:.1f} s for a bound of 3 s"
        # not closed under a transaction it could not end: dropped, and the daemon's
        # collector frees the cycle that still holds it at its next turn
        # (destroying a client waits on no broker)
        assert dropped() is not None
        collector.turn(now=collector.full_at + WANTED_GAP_S)
        assert collector.full_collections == 1, "the close asked for a full collection"
        closing.join(10)
        assert not closing.is_alive(), "the closing thread ends once it holds the last reference"
        assert dropped() is None, "nothing but the cycle held the dropped producer"
        assert destroyed_on == ["baton-producer-close"], destroyed_on
    finally:
        collector.close()
        local.start()
