"""The Kafka retry policy stops on attempts and on time: a lookup that times out is
transient, and eight of its 10 s timeouts would hold a processor's loop past any
release timeout."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException
from tenacity import RetryCallState

from orchestrator.kafka.retry import KAFKA_RETRY, RETRY_FOR_S, is_transient


def _after(attempts: int, seconds: float) -> RetryCallState:
    state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
    state.attempt_number = attempts
    state.start_time = 100.0
    state.outcome_timestamp = 100.0 + seconds
    return state


def test_timed_out_lookups_are_retried_for_a_bounded_time() -> None:
    stop = KAFKA_RETRY["stop"]
    assert is_transient(KafkaException(KafkaError(KafkaError._TIMED_OUT)))
    # quick transient errors: up to eight attempts
    assert not stop(_after(7, 3.0))
    assert stop(_after(8, 3.0))
    # lookups waiting out their 10 s each: no new attempt once RETRY_FOR_S has passed
    assert not stop(_after(2, 10.0))
    assert stop(_after(2, RETRY_FOR_S))
    assert stop(_after(3, 30.0))
