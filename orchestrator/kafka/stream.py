"""The coordinator stream: the coordinator's whole state as a compacted, keyed topic.

Topic `baton.<job>.coordinator`, one partition, `cleanup.policy=compact`. Keys name
one piece of state ("model", "processor/<id>", "assignment", "handoff/<task>",
"drain", ...), values are JSON; a tombstone (null value) deletes the key. Reading the
topic from the beginning and keeping the last value per key rebuilds the state:
compaction only saves space, correctness never depends on it (the embedded broker
does not compact at all).

Writes go through one transactional producer with transactional.id
`baton.<job>.coordinator`, one transaction per batch of changes, so a batch is
all-or-nothing for readers (read_committed). `open()` calls init_transactions
*before* reading: that aborts whatever a previous coordinator left open and fences
it, so from then on this instance is the only writer and the topic's end is stable.
A fenced instance learns it on its next write (`FencedError`) and must stop.

A batch during which the producer lost its brokers is written again: a broker that
restarted may have dropped part of it (orchestrator/kafka/watched_producer.py), and
writing the same values again changes nothing for a last-value-per-key reader.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from orchestrator.kafka.logs import client_logging
from orchestrator.kafka.markers import find_markers
from orchestrator.kafka.offsets import refresh_metadata
from orchestrator.kafka.settings import producer_settings
from orchestrator.kafka.watched_producer import WatchedProducer
from orchestrator.wire.barrier import encode_marker
from orchestrator.wire.clock import Clock, Deadline, SystemClock
from orchestrator.wire.partitions import split_partition

__all__ = ["CoordinatorStream", "FencedError", "StreamError", "StreamTail", "stream_topic"]

log = logging.getLogger(__name__)

# Bound on init_transactions and on each commit: a healthy broker answers in
# milliseconds; past this the coordinator cannot promise its state is durable.
_TXN_TIMEOUT_S = 30.0
# Reading the stream to its end on start: no progress for this long is an error.
_LOAD_STALL_S = 30.0
_POLL_S = 0.5
_BATCH = 10_000
# writes of one batch while the brokers keep going away; then it is a StreamError
_REWRITES = 5
# A write that follows the previous one closely meets its transaction still completing
# (CONCURRENT_TRANSACTIONS) and is retried; librdkafka's default back-off (100 ms,
# doubling to 1 s) then sits in every handoff step the coordinator writes, where the
# markers of a replicated cluster take tens of milliseconds. Any [kafka] setting
# overrides these.
_PRODUCER_DEFAULTS: dict[str, Any] = {"retry.backoff.ms": 10, "retry.backoff.max.ms": 100}
# what a broker of a cluster answers for a topic another broker created a moment ago
# what a lookup on a topic just created answers until its partition is known and led
_NOT_YET_KNOWN = frozenset({KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART,
                            KafkaError.NOT_LEADER_FOR_PARTITION,
                            KafkaError.LEADER_NOT_AVAILABLE})


class StreamError(RuntimeError):
    """The coordinator stream cannot be read or written."""


class FencedError(StreamError):
    """Another coordinator of the same job took over the stream; this one must exit."""


def stream_topic(job: str) -> str:
    """`baton.<job>.coordinator`, the topic and the transactional id."""
    return f"baton.{job}.coordinator"


class CoordinatorStream:
    """The only writer of a job's coordinator stream (after `open()`).

    Args:
        settings: librdkafka settings for the job's cluster.
        job: the job name (`job.name`).
        clock: bounds the wait for a stalled read (the system clock by default).
    """

    def __init__(self, settings: Mapping[str, Any], job: str,
                 clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self._settings = dict(settings)
        self.job = job
        self.topic = stream_topic(job)
        self._producer: WatchedProducer | None = None
        self._marker_doubt = False      # a marker transaction may have committed
        self._commit_unfinished = self._abort_unfinished = False
        self._in_transaction = False    # begun, neither committed nor aborted yet

    def open(self) -> dict[str, Any]:
        """Fence any previous writer, then read the stream to its end.

        Returns:
            The last value of every key that has not been deleted.

        Raises:
            StreamError: the broker did not answer in time.
        """
        self._producer = WatchedProducer({**_PRODUCER_DEFAULTS,
                                          **producer_settings(self._settings),
                                          **client_logging("coordinator.stream"),
                                          "transactional.id": self.topic,
                                          "enable.idempotence": True, "linger.ms": 0})
        try:
            self._producer.init_transactions(_TXN_TIMEOUT_S)
        except KafkaException as exc:
            raise StreamError(f"cannot take over the coordinator stream {self.topic}: "
                              f"{exc.args[0].str()}") from exc
        return self.load()

    def load(self) -> dict[str, Any]:
        """Read committed records from the beginning to the current end."""
        consumer = Consumer({**self._settings, **client_logging("coordinator.stream-reader"),
                             "group.id": f"{self.topic}.reader",
                             "client.id": f"baton-stream-{uuid.uuid4().hex[:8]}",
                             "enable.auto.commit": False, "isolation.level": "read_committed",
                             "enable.partition.eof": True, "auto.offset.reset": "earliest"})
        try:
            return _read_to_end(consumer, self.topic, self._clock)
        finally:
            consumer.close()

    def write(self, changes: Mapping[str, Any | None]) -> None:
        """Write a batch of changes in one transaction (None deletes the key).

        Raises:
            FencedError: another coordinator took over; stop now.
            StreamError: the transaction failed (it was aborted: nothing was written).
        """
        if not changes:
            return
        producer = self._require_open()
        for _ in range(_REWRITES):
            losses = producer.losses()
            self._write_once(producer, changes)
            if producer.losses() == losses:
                return
            log.warning("the brokers went away while %s was written; writing the batch "
                        "again", self.topic)
        raise StreamError(f"cannot write to {self.topic}: the brokers kept going away "
                          f"({_REWRITES} attempts)")

    def write_markers(self, due: Mapping[str, Sequence[str]], counts: Mapping[str, int],
                      changes_for: Callable[[Mapping[str, int]], Mapping[str, Any | None]],
                      floors: Mapping[str, int] | None = None) -> dict[str, int]:
        """Write a barrier marker to each parent partition of `due` (parent -> the
        children it settles; `counts`: topic -> partition count) and, in the same
        transaction, `changes_for(offsets)`.

        Unlike `write`, a transaction during which the brokers went away is aborted,
        not written again: a second marker would stand at another offset. After a
        failure whose outcome is unknown, the next call first looks for the markers
        that may have been committed (orchestrator/kafka/markers.py, from `floors`:
        parent -> its end at the expansion) and writes only the missing ones.

        Returns:
            parent partition -> its marker's offset.

        Raises:
            FencedError: another coordinator took over; stop now.
            StreamError: the transaction failed or was aborted: no marker is visible.
        """
        producer = self._require_open()
        offsets: dict[str, int] = {}
        failures: list[str] = []
        try:                            # first: the markers it holds become readable
            self._finish(producer)
        except KafkaException as exc:
            self._fail(producer, exc)
        if self._marker_doubt:
            offsets.update(find_markers(self._settings, self.job, due, floors or {}, self._clock))
            self._marker_doubt = False

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                failures.append(f"{msg.topic()}:{msg.partition()}: {err.str()}")
            else:
                offsets[f"{msg.topic()}:{msg.partition()}"] = msg.offset()

        losses = producer.losses()
        try:
            producer.begin_transaction()
            self._in_transaction = True
            for parent, children in due.items():
                if parent in offsets:
                    continue            # committed by the attempt whose outcome was unknown
                topic, number = split_partition(parent)
                value, headers = encode_marker(self.job, parent, children, counts[topic])
                producer.produce(topic, value=value, partition=number, headers=headers,
                                 on_delivery=delivered)
            producer.flush(_TXN_TIMEOUT_S)
            if failures or len(offsets) != len(due) or producer.losses() != losses:
                self._abort(producer)
                raise StreamError(f"cannot write the barrier markers of {', '.join(due)}: "
                                  f"{'; '.join(failures) or 'the brokers went away'}; "
                                  "retrying at the next turn (no marker is visible)")
            for key, change in changes_for(offsets).items():
                producer.produce(self.topic, key=key.encode(),
                                 value=None if change is None else orjson.dumps(change))
            self._commit(producer)
        except KafkaException as exc:
            self._marker_doubt = True
            if exc.args and isinstance(exc.args[0], KafkaError) and \
                    exc.args[0].code() == KafkaError._UNKNOWN_PARTITION:
                self._refresh(producer, due)
            self._fail(producer, exc)
        except Exception:
            self._marker_doubt = True
            self._abort_open(producer)
            raise
        return offsets

    @staticmethod
    def _refresh(producer: WatchedProducer, due: Mapping[str, Sequence[str]]) -> None:
        """Ask for the parents' topics again: a partition just added is unknown to the
        producer's metadata until its next refresh (minutes away), and produce() refuses
        it at once until then."""
        for topic in {split_partition(parent)[0] for parent in due}:
            try:
                producer.list_topics(topic, timeout=5)
            except KafkaException:
                pass            # the next attempt fails the same way and says why

    def _write_once(self, producer: WatchedProducer, changes: Mapping[str, Any | None]) -> None:
        try:
            self._finish(producer)
            producer.begin_transaction()
            self._in_transaction = True
            for key, value in changes.items():
                producer.produce(self.topic, key=key.encode(),
                                 value=None if value is None else orjson.dumps(value))
            self._commit(producer)
        except KafkaException as exc:
            self._fail(producer, exc)
        except Exception:
            self._abort_open(producer)
            raise

    def _abort_open(self, producer: WatchedProducer) -> None:
        """A transaction begun and then left by an error that is not Kafka's (a value
        that cannot be encoded, a caller's bug): abort it, or librdkafka refuses every
        later transaction of this producer ("Operation not valid in state
        InTransaction") and the coordinator could never write its stream again."""
        if not self._left_open():
            return
        try:
            self._abort(producer)
        except KafkaException as exc:
            log.warning("aborting the transaction an error left open on %s: %s",
                        self.topic, exc.args[0].str() if exc.args else exc)

    def _commit(self, producer: WatchedProducer) -> None:
        """Commit, or remember it unfinished: one that timed out (a broker restarting
        under it) goes on in librdkafka, which refuses other transactional calls until
        it is called again. The batch is reported failed and written again (same values)."""
        try:
            producer.commit_transaction(_TXN_TIMEOUT_S)
            self._commit_unfinished = self._in_transaction = False
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            self._commit_unfinished = (err.retriable() and not err.fatal()
                                       and not err.txn_requires_abort())
            raise

    def _abort(self, producer: WatchedProducer) -> None:
        """Abort, or remember it unfinished (as `_commit`; until then every call fails
        with "Conflicting abort_transaction API call is already in progress")."""
        try:
            producer.abort_transaction(_TXN_TIMEOUT_S)
            self._abort_unfinished = self._in_transaction = False
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            self._abort_unfinished = err.retriable() and not err.fatal()
            raise

    def _finish(self, producer: WatchedProducer) -> None:
        if self._abort_unfinished:      # a timed-out call left in librdkafka's hands
            self._abort(producer)
        if self._commit_unfinished:
            self._commit(producer)

    def _require_open(self) -> WatchedProducer:
        if self._producer is None:
            raise StreamError(f"{self.topic}: write before open()")
        return self._producer

    def _fail(self, producer: WatchedProducer, exc: KafkaException) -> None:
        err: KafkaError = exc.args[0]
        if err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                          KafkaError.INVALID_PRODUCER_EPOCH):
            raise FencedError(
                f"another coordinator took over {self.topic} (transactional id fenced: "
                f"{err.str()}); this one stops so that only one coordinator writes") from exc
        if err.fatal():
            # not fenced, but the producer is unusable (e.g. a restarted broker lost its
            # sequence state). Re-initialising here could fence a newer coordinator, so
            # stop the same way: a restarted coordinator re-reads the stream and resumes.
            raise FencedError(
                f"the coordinator stream's producer failed fatally ({err.str()}); this "
                f"coordinator stops; restart it (it rebuilds from {self.topic})") from exc
        if self._left_open():
            # whatever failed inside it (a produce() refused at once: "Unknown partition"
            # for a partition just added), an open transaction is aborted: left open,
            # librdkafka refuses every later one ("Operation not valid in state
            # InTransaction") and the coordinator could never write its stream again
            try:
                self._abort(producer)
            except KafkaException as abort_exc:
                raise StreamError(f"cannot abort a failed write to {self.topic}: "
                                  f"{abort_exc.args[0].str()}") from exc
        raise StreamError(f"cannot write to {self.topic}: {err.str()}") from exc

    def _left_open(self) -> bool:
        """A transaction is open and no commit or abort of it is still in librdkafka's
        hands (`_finish` ends those)."""
        return self._in_transaction and not (self._commit_unfinished
                                             or self._abort_unfinished)

    def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:
            producer.flush(5)
        except KafkaException as exc:
            # A fenced or fatally failed producer has nothing left to deliver: every
            # write it made is either committed or aborted by the broker. Closing must
            # not fail a coordinator that is already stopping because of it.
            log.info("closing %s: the producer had already failed (%s)", self.topic,
                     exc.args[0].str())


def _end_offset(consumer: Consumer, topic: str, deadline: Deadline, clock: Clock) -> int:
    """The end offset of partition 0 of `topic`. A topic just created is known to the
    broker that created it, and to the other brokers of a cluster a moment later, and
    its partition has a leader a moment after that: until then a lookup answers
    UNKNOWN_PARTITION, or NOT_LEADER / LEADER_NOT_AVAILABLE (seen on a loaded single
    broker too), so it is asked again (metadata refreshed) until `deadline`.

    Raises:
        StreamError: the broker did not answer, or the topic is still unknown at `deadline`.
    """
    while True:
        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0),
                                                     timeout=_TXN_TIMEOUT_S, cached=False)
            return int(high)
        except KafkaException as exc:
            if exc.args[0].code() not in _NOT_YET_KNOWN or deadline.expired():
                raise StreamError(f"cannot read {topic}: {exc.args[0].str()}") from exc
        refresh_metadata(consumer, [f"{topic}:0"])
        clock.sleep(_POLL_S)


def _read_to_end(consumer: Consumer, topic: str, clock: Clock) -> dict[str, Any]:
    """Last value per key of partition 0, up to the high watermark seen at the start."""
    tp = TopicPartition(topic, 0)
    high = _end_offset(consumer, topic, Deadline.after(clock, _LOAD_STALL_S), clock)
    state: dict[str, Any] = {}
    if high <= 0:
        return state
    consumer.assign([TopicPartition(topic, 0, 0)])
    stalled = Deadline.after(clock, _LOAD_STALL_S)
    while True:
        progressed = False
        for msg in consumer.consume(_BATCH, _POLL_S):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return state
                raise StreamError(f"cannot read {topic}: {err.str()}")
            progressed = True
            key = (msg.key() or b"").decode()
            value = msg.value()
            if value is None:
                state.pop(key, None)
            else:
                state[key] = orjson.loads(value)
        position = consumer.position([tp])[0].offset
        if position >= high:
            return state
        if progressed:
            stalled.arm(_LOAD_STALL_S)
        elif stalled.expired():
            raise StreamError(f"reading {topic} stalled at offset {position} of {high}; "
                              f"is the broker healthy?")


class StreamTail:
    """A standby's view of the coordinator stream, kept current by polling, and the
    evidence that a leader is alive: committed records keep arriving.

    The leader writes its "leader" record at least every quarter of `takeover_s`. The
    tail counts silence only while it can reach the broker (a watermark query
    succeeds), so a broker outage does not make every standby take over at once.

    Args:
        settings: librdkafka settings for the job's cluster.
        job: the job name.
        clock: bounds `catch_up()` (the system clock by default).
    """

    def __init__(self, settings: Mapping[str, Any], job: str,
                 clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self.topic = stream_topic(job)
        self.state: dict[str, Any] = {}
        self._tp = TopicPartition(self.topic, 0)
        self._consumer = Consumer({**settings, **client_logging("coordinator.standby"),
                                   "group.id": f"{self.topic}.standby",
                                   "client.id": f"baton-standby-{uuid.uuid4().hex[:8]}",
                                   "enable.auto.commit": False,
                                   "isolation.level": "read_committed",
                                   "auto.offset.reset": "earliest"})
        self._consumer.assign([TopicPartition(self.topic, 0, 0)])
        self._high, self.records = -1, 0
        self.at_end = False     # all up to the end seen at the last poll was read: current

    def poll(self) -> bool | None:
        """Apply what arrived. True: the leader showed life (records, or the end of the
        stream moved); False: silence; None: the broker did not answer (no evidence)."""
        seen = 0
        try:
            msgs = self._consumer.consume(_BATCH, 0.05)
        except KafkaException:
            return None
        for msg in msgs:
            if msg.error() is not None:
                continue
            seen += 1
            key, value = (msg.key() or b"").decode(), msg.value()
            if value is None:
                self.state.pop(key, None)
            else:
                self.state[key] = orjson.loads(value)
        self.records += seen
        try:
            _, high = self._consumer.get_watermark_offsets(self._tp, timeout=2.0, cached=False)
        except KafkaException:      # a restarted broker's partition leader not known yet?
            refresh_metadata(self._consumer, [f"{self.topic}:0"])
            return None
        moved = high != self._high
        self._high = high
        self.at_end = self._consumer.position([self._tp])[0].offset >= high
        return seen > 0 or moved

    def catch_up(self, timeout_s: float) -> None:
        """Poll until the end of the stream seen now is read (or `timeout_s` passed).

        Raises:
            StreamError: the broker did not answer.
        """
        deadline = Deadline.after(self._clock, timeout_s)
        high = _end_offset(self._consumer, self.topic, deadline, self._clock)
        self.at_end = high <= 0
        while not self.at_end and not deadline.expired():
            self.poll()
            self.at_end = self._consumer.position([self._tp])[0].offset >= high

    def leader(self) -> dict[str, Any] | None:
        """The newest leader record (its URL), None after a clean resignation."""
        record = self.state.get("leader")
        return dict(record) if isinstance(record, dict) else None

    def close(self) -> None:
        self._consumer.close()
