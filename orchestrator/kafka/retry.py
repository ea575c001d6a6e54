"""Which Kafka errors are worth another try, and the retry policies built on that.

One answer for every caller: a `KafkaException` whose error librdkafka flags
retriable, or whose code is a known transient one (a local transport error, a
coordinator moving, a leader election, metadata not yet current after a partition
was added). Anything else is re-raised at once.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException
from tenacity import retry_if_exception, stop_after_attempt, wait_exponential

__all__ = ["KAFKA_RETRY", "is_fatal", "is_transient", "kafka_error"]

# librdkafka error codes that mean "try again", whatever `retriable()` says (some local
# transport errors are not flagged retriable but are, for an idempotent request).
_TRANSIENT_CODES = frozenset({
    KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._WAIT_COORD,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.NETWORK_EXCEPTION,
    # a partition just added (expansion): metadata catches up within a refresh
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
})

# A broker that restarts or elects a coordinator answers with transient errors for a
# few seconds; beyond ~30 s something is really wrong and the caller must hear of it.
KAFKA_RETRY: dict[str, Any] = {
    "retry": retry_if_exception(lambda exc: is_transient(exc)),
    "stop": stop_after_attempt(8),
    "wait": wait_exponential(multiplier=0.2, max=5),
    "reraise": True,
}


def kafka_error(exc: BaseException) -> KafkaError | None:
    """The `KafkaError` inside a `KafkaException`, if there is one."""
    if not isinstance(exc, KafkaException) or not exc.args:
        return None
    err = exc.args[0]
    return err if isinstance(err, KafkaError) else None


def is_transient(exc: BaseException) -> bool:
    """True for Kafka errors worth retrying (see `_TRANSIENT_CODES`)."""
    err = kafka_error(exc)
    if err is None:
        return False
    return bool(err.retriable()) or err.code() in _TRANSIENT_CODES


def is_fatal(exc: BaseException) -> bool:
    """The client is unusable (librdkafka's fatal flag); a new one may carry on."""
    err = kafka_error(exc)
    return err is not None and bool(err.fatal())
