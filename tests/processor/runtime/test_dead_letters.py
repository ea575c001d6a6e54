"""The dead-letter topic: created at start when missing; a refusal stops the start
(exit 2) before anything is processed, naming the topic."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from orchestrator.kafka import topics
from orchestrator.kafka.topics import TopicAdmin, TopicsError
from orchestrator.wire.config import parse_config
from processor.daemon import run_processor
from processor.runtime import TaskRuntime
from processor.runtime.dead_letters import (
    DeadLetterTopicError,
    dlq_topic,
    ensure_dead_letter_topic,
)


class _Meta:
    def __init__(self) -> None:
        self.topics: dict[str, Any] = {}
        self.brokers = {1: object()}


class _Refused:
    def result(self, timeout: float) -> None:
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                        "Topic authorization failed"))


class _RefusingAdmin:
    """An AdminClient whose cluster has no topics and refuses to create any."""

    created: list[str] = []

    def __init__(self, settings: dict[str, Any]) -> None:
        pass

    def poll(self, timeout: float) -> int:
        return 0

    def list_topics(self, timeout: float) -> _Meta:
        return _Meta()

    def create_topics(self, specs: list[Any]) -> dict[str, _Refused]:
        _RefusingAdmin.created += [spec.topic for spec in specs]
        return {spec.topic: _Refused() for spec in specs}


def _raw(tmp_path: Path, on_error: str) -> dict[str, Any]:
    return {"job": {"name": "sums", "class": "processor.examples:RunningSum",
                    "inputs": ["events"], "output": "out"},
            "kafka": {"bootstrap_servers": "127.0.0.1:1"},
            "processor": {"state_dir": str(tmp_path / "state"), "on_error": on_error},
            "coordinator": {"token_file": str(tmp_path / "token"),
                            "url": "http://127.0.0.1:1"}}


def test_a_refused_topic_names_it_and_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topics, "AdminClient", _RefusingAdmin)
    admin = TopicAdmin({"bootstrap.servers": "127.0.0.1:1"}, "g", client="test")
    with pytest.raises(TopicsError) as raised:
        admin.ensure_topic("baton.sums.dlq", 1, what="the dead-letter topic")
    message = str(raised.value)
    assert "the dead-letter topic 'baton.sums.dlq'" in message
    assert "authorization" in message.lower()


def test_nothing_to_do_without_dlq(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(topics, "AdminClient", _RefusingAdmin)
    for on_error in ("fail", "skip"):
        assert ensure_dead_letter_topic(parse_config(_raw(tmp_path, on_error))) is False


def test_the_processor_exits_2_naming_the_topic_before_processing(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(topics, "AdminClient", _RefusingAdmin)
    _RefusingAdmin.created = []
    config = parse_config(_raw(tmp_path, "dlq"))
    with pytest.raises(DeadLetterTopicError) as raised:
        ensure_dead_letter_topic(config)
    assert raised.value.exit_code == 2
    assert "baton.sums.dlq" in str(raised.value) and 'on_error = "dlq"' in str(raised.value)
    with caplog.at_level(logging.ERROR, logger="baton.processor"):
        assert run_processor(config, "p1") == 2
    assert _RefusingAdmin.created == ["baton.sums.dlq", "baton.sums.dlq"]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("cannot start" in e and "'baton.sums.dlq'" in e for e in errors), errors
    # no task store was opened (only the processor's own, locked, state directory)
    processor_dir = tmp_path / "state" / "sums" / "p1"
    assert [p.name for p in processor_dir.iterdir()] == [".baton-processor.lock"]


@pytest.mark.integration
def test_a_runtime_with_dlq_creates_the_missing_topic(broker: Any, job_config: Any,
                                                      tmp_path: Path) -> None:
    config = parse_config(job_config(partitions=2, processor={"on_error": "dlq"}))
    topic = dlq_topic(config.job.name)
    admin = TopicAdmin(broker.settings(), "test")
    with pytest.raises(TopicsError):
        admin.partition_counts([topic])            # missing before the start
    runtime = TaskRuntime(config, "p1")
    try:
        assert admin.partition_counts([topic]) == {topic: 1}
    finally:
        runtime.close(commit=True)
        admin.close()
    # a second start finds it and leaves it alone
    assert ensure_dead_letter_topic(config) is False
