"""What an active task's Kafka transaction can end in, and how it is voided.

The exceptions an active task (processor/active.py) and its commit unit
(processor/task_transaction.py) raise, how a producer error is read (fenced,
retriable), `abort_everywhere`, the abort that names every partition again after the
brokers lost the transaction, and `resettle`, which closes what a transaction the
brokers ended without its markers left open.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from orchestrator.kafka.offsets import to_topic_partitions
from orchestrator.kafka.retry import is_fatal, kafka_error
from processor.changelog import ChangelogTarget

__all__ = ["FENCED_CODES", "TXN_TIMEOUT_S", "BrokerLost", "CommitHung", "CommitVoided",
           "ProducerFatal", "TaskFailed", "TaskFenced", "TransactionAborted",
           "abort_everywhere", "callback_error", "is_fenced", "resettle", "retriable_commit",
           "written_topics"]

# librdkafka retries inside each call up to this; a broker that does not finish a
# transaction within it is treated as having lost it (TaskTransaction._after_failed_commit)
TXN_TIMEOUT_S = 10.0
FENCED_CODES = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                 KafkaError.INVALID_PRODUCER_EPOCH,
                 KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}

# the record `_abort_everywhere` writes into a transaction it then aborts
_VOID = [("baton.void", b"1")]

class TaskFenced(Exception):
    """Another owner initialised this task's transactional id: stop at once, commit nothing."""


class ProducerFatal(Exception):
    """The producer failed fatally without being fenced: restart the task's activation."""


class CommitVoided(ProducerFatal):
    """The brokers do not hold the task's last commit, which its store applied.

    A broker's controlled shutdown can end a commit without writing its markers
    (`resettle`); the commit then stays open in each partition, and the markers of the
    next transaction that aborts take it back with that one: its outputs and its offset
    commit, while the store has applied it and the task would go on from past it, its
    outputs lost. So after an abort the task reads its last commit back, and where the
    brokers do not hold it the task's activation starts over: it settles the task's
    partitions (`resettle`) and rebuilds the store from the offsets the brokers hold.
    """


class TaskFailed(Exception):
    """process() raised under on_error = "fail": the task stops at its last committed offsets."""


class BrokerLost(Exception):
    """The producer lost its brokers inside the open transaction: redo it."""


class CommitHung(ProducerFatal):
    """The task's commit did not return within `processor.commit_timeout_ms`: it is given
    up (`TaskTransaction.abandon`), and the task starts again with a new producer, whose
    fence ends the stuck one's transaction."""


class TransactionAborted(Exception):
    """The open transaction was aborted; the caller rewinds the task to its committed offsets."""


def callback_error(exc: KafkaException | SystemError) -> KafkaException:
    """The Kafka error a producer call raised, itself or behind a SystemError.

    confluent-kafka runs pending callbacks (a delivery report, such as the changelog's,
    or a librdkafka log line handed to Python logging) while a fatal error (a fence) is
    already raised; the callback's return then surfaces as a SystemError ("returned a
    result with an exception set") whose cause is that error. Anything else is
    re-raised."""
    if isinstance(exc, KafkaException):
        return exc
    if isinstance(exc.__cause__, KafkaException):
        return exc.__cause__
    raise exc


def is_fenced(exc: KafkaException) -> bool:
    """A newer owner took the transactional id: this producer must never write again."""
    err = kafka_error(exc)
    return err is not None and err.code() in FENCED_CODES


def retriable_commit(exc: BaseException) -> bool:
    """A commit may be retried only on librdkafka's own retriable flag (its txn API says so)."""
    err = kafka_error(exc)
    if err is None or is_fenced(exc) or is_fatal(exc):
        return False
    return bool(err.retriable())


def abort_everywhere(producer: Producer, topics: Sequence[str],
                     changelog: ChangelogTarget | None) -> None:
    """Abort once more, with every partition of `topics` (and the task's `changelog`
    partition) in the transaction.

    A broker that came back without the transaction no longer knows which partitions
    it spanned, so its abort may miss records the producer delivered after the
    restart; those would stay open until this producer's next commit took them in.
    A void record per partition names them all again, and the abort closes them.
    """
    producer.begin_transaction()
    for topic in topics:
        meta = producer.list_topics(topic, TXN_TIMEOUT_S).topics[topic]
        for partition in meta.partitions:
            producer.produce(topic, b"", None, partition, headers=_VOID)
    if changelog is not None:           # its own partition: the others are not its
        producer.produce(changelog.topic, b"", None, changelog.number, headers=_VOID)
    producer.flush(TXN_TIMEOUT_S)
    producer.abort_transaction(TXN_TIMEOUT_S)


def written_topics(output: str, outputs: Iterable[str], dlq: str | None) -> list[str]:
    """Every topic a task's transactions may write: `output`, the job's other
    `outputs`, and the dead-letter topic `dlq` when on_error sends records there."""
    return [output, *sorted(set(outputs) - {output}), *([dlq] if dlq else [])]


def resettle(producer: Producer, topics: Sequence[str], changelog: ChangelogTarget | None,
             offsets: Mapping[str, int], group_metadata: Any) -> None:
    """Close what a transaction ended without its markers left open, with the task's
    freshly fenced `producer`.

    Apache Kafka can complete a transaction (its coordinator records the commit) while
    skipping its markers: it skips a partition whose leader it cannot find, as during a
    single broker's controlled shutdown. The transaction's records then stay open in
    each partition, holding back read_committed readers, and its offset commit stays
    pending, so a stable lookup of the group's offsets waits on it for good. Both fall
    to this producer's next markers: an abort over every partition the task writes
    (`abort_everywhere`) turns the open records aborted, and a commit of `offsets` (the
    settled ones, read past the pending commit) for every partition puts them in its
    place. The task then goes on from `offsets`; its store must not be ahead of them.
    """
    abort_everywhere(producer, topics, changelog)
    producer.begin_transaction()
    producer.send_offsets_to_transaction(to_topic_partitions(offsets), group_metadata,
                                         TXN_TIMEOUT_S)
    producer.commit_transaction(TXN_TIMEOUT_S)
