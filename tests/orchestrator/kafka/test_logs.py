"""librdkafka's log lines go through Python logging, rate-limited per logger."""

from __future__ import annotations

import logging
import time
import uuid

import pytest
from confluent_kafka import Consumer

from orchestrator.kafka.logs import RepeatFilter, client_logger, client_logging


def _record(message: str, *args: object, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("baton.kafka.t", level, __file__, 1, message, args, None)


def test_a_client_logs_its_broker_failures_through_python_logging(
        caplog: pytest.LogCaptureFixture) -> None:
    name = f"test-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": name,
                         **client_logging(name)})
    try:
        with caplog.at_level(logging.DEBUG, logger=f"baton.kafka.{name}"):
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and not any(
                    r.name == f"baton.kafka.{name}" for r in caplog.records):
                consumer.poll(0.2)
    finally:
        consumer.close()
    lines = [r for r in caplog.records if r.name == f"baton.kafka.{name}"]
    assert lines, "no librdkafka line reached the Python logger"
    assert any(r.levelno >= logging.WARNING and "127.0.0.1:1" in r.getMessage()
               for r in lines), [r.getMessage() for r in lines]
    assert any("FAIL" in r.getMessage() for r in lines), [r.getMessage() for r in lines]


def test_repeats_pass_once_per_interval_with_a_count() -> None:
    now = [100.0]
    keep = RepeatFilter(30.0, clock=lambda: now[0])
    line = "%s [%s] %s"

    def down(client: str, ms: int) -> logging.LogRecord:
        return _record(line, "FAIL", client,
                       f"127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: "
                       f"Connection refused (after {ms}ms in state CONNECT)")

    assert keep.filter(down("rdkafka#consumer-1", 0))
    # the same line again (another instance, another duration): held back
    assert not keep.filter(down("rdkafka#consumer-2", 3))
    assert not keep.filter(down("rdkafka#consumer-1", 12))
    # a different line passes
    assert keep.filter(_record(line, "FAIL", "rdkafka#consumer-1", "other.host:9092: refused"))
    now[0] += 31
    again = down("rdkafka#consumer-1", 1)
    assert keep.filter(again)
    assert "(2 identical lines suppressed in the last 31s)" in again.getMessage()
    assert keep.suppressed == 2
    # right after: held back again, and the next one after the interval has no count
    assert not keep.filter(down("rdkafka#consumer-1", 2))
    now[0] += 31
    quiet = down("rdkafka#consumer-1", 1)
    assert keep.filter(quiet) and "1 identical lines" in quiet.getMessage()


def test_a_level_change_is_not_a_repeat() -> None:
    keep = RepeatFilter(30.0, clock=lambda: 0.0)
    assert keep.filter(_record("x", level=logging.WARNING))
    assert keep.filter(_record("x", level=logging.ERROR))
    assert not keep.filter(_record("x", level=logging.ERROR))


def test_the_client_logger_has_one_filter() -> None:
    name = f"test-{uuid.uuid4().hex[:6]}"
    first = client_logger(name)
    assert client_logging(name)["logger"] is first
    assert first.name == f"baton.kafka.{name}"
    assert sum(isinstance(f, RepeatFilter) for f in first.filters) == 1


def test_the_filter_applies_to_lines_from_the_client() -> None:
    # the filter sits on the client's logger: librdkafka's repeats never reach a handler
    name = f"test-{uuid.uuid4().hex[:6]}"
    logger = client_logger(name)
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Keep()
    logger.addHandler(handler)
    try:
        for _ in range(5):
            logger.error("%s [%s] %s", "FAIL", "rdkafka#producer-3", "broker down")
    finally:
        logger.removeHandler(handler)
    assert seen == ["FAIL [rdkafka#producer-3] broker down"]
