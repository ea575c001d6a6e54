"""Consumer-only [kafka] settings stay out of producers and admin clients (each would
log a CONFWARN line for them)."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import Producer

from orchestrator.devkit.embedded import EMBEDDED_KAFKA_SETTINGS
from orchestrator.kafka.logs import client_logging
from orchestrator.kafka.settings import producer_settings


def test_producers_get_the_settings_without_the_consumer_only_ones() -> None:
    given = {"bootstrap.servers": "h:1", "queued.min.messages": 1, "fetch.wait.max.ms": 20,
             "isolation.level": "read_committed", "group.id": "g", "linger.ms": 5,
             "receive.message.max.bytes": 10**9, "sasl.password": "x"}
    assert producer_settings(given) == {"bootstrap.servers": "h:1", "linger.ms": 5,
                                        "receive.message.max.bytes": 10**9,
                                        "sasl.password": "x"}


def test_the_embedded_daemon_profile_makes_no_producer_warn(
        caplog: pytest.LogCaptureFixture) -> None:
    """librdkafka checks a client's settings when it is created: no broker needed."""
    settings = {"bootstrap.servers": "127.0.0.1:1", **EMBEDDED_KAFKA_SETTINGS}
    assert "queued.min.messages" in settings
    with caplog.at_level(logging.DEBUG, logger="baton.kafka"):
        producer = Producer({**producer_settings(settings), **client_logging("test.settings")})
        producer.poll(0.2)
        noisy = Producer({**settings, **client_logging("test.settings-noisy")})
        noisy.poll(0.2)
    warned = {r.name for r in caplog.records if "consumer property" in r.getMessage()}
    assert warned == {"baton.kafka.test.settings-noisy"}    # the unfiltered one only
