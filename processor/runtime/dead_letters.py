"""The dead-letter topic of `processor.on_error = "dlq"`: `baton.<job>.dlq`.

A processor with that setting creates the topic at start when it is missing (one
partition: dead letters are rare, read by people, and their order across tasks does
not matter; a topic created beforehand with any partition count is used as is). When
the broker refuses (no CreateTopics permission, a topic policy) the processor stops
before processing anything: with nowhere to put a poison record, the first one would
stop its task anyway, much later and far from the cause.
"""

from __future__ import annotations

from confluent_kafka import KafkaException

from orchestrator.kafka.topics import TopicAdmin, TopicsError
from orchestrator.wire.config import Config

__all__ = ["DLQ_PARTITIONS", "DeadLetterTopicError", "dlq_topic", "ensure_dead_letter_topic"]

DLQ_PARTITIONS = 1


class DeadLetterTopicError(RuntimeError):
    """The dead-letter topic is missing and cannot be created.

    Attributes:
        exit_code: 2 when the broker refused (permission, policy: the operator must
            act), 1 when it did not answer in time (a restart may succeed).
    """

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def dlq_topic(job: str) -> str:
    """The dead-letter topic of job `job`."""
    return f"baton.{job}.dlq"


def ensure_dead_letter_topic(config: Config) -> bool:
    """Create `baton.<job>.dlq` when `processor.on_error` is "dlq" and it is missing.

    Returns:
        True when it was created now.

    Raises:
        DeadLetterTopicError: it is missing and cannot be created; the message names it.
    """
    if config.processor.on_error != "dlq":
        return False
    topic = dlq_topic(config.job.name)
    where = f'processor.on_error = "dlq" in {config.path}'
    admin = TopicAdmin(config.kafka_settings(), f"baton.{config.job.name}", client="processor")
    try:
        return admin.ensure_topic(topic, DLQ_PARTITIONS, what="the dead-letter topic")
    except TopicsError as exc:
        raise DeadLetterTopicError(f"{where}: {exc}", 2) from exc
    except KafkaException as exc:
        raise DeadLetterTopicError(
            f"{where}: cannot check or create the dead-letter topic {topic!r}: "
            f"{exc.args[0].str() if exc.args else exc}; is the broker reachable?", 1) from exc
    finally:
        admin.close()
