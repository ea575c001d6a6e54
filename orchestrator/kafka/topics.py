"""Kafka admin I/O for the coordinator: topics, partition counts, offsets.

This is the I/O edge the pure core never sees. Every call that crosses the network
retries only the errors Kafka itself calls transient (a leader moving, a broker
restarting, a request timing out), under a named policy, and re-raises the last
error when the policy gives up; anything else (a missing topic, an authorization
failure, a refused partition increase) surfaces at once as a `TopicsError` whose
message names the topic and the next action.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from orchestrator.kafka.logs import client_logging
from orchestrator.kafka.retry import is_transient
from orchestrator.kafka.settings import producer_settings
from orchestrator.wire.clock import Clock, Deadline, SystemClock
from orchestrator.wire.partitions import format_partition, parse_partition

__all__ = [
    "ADMIN_RETRY",
    "TopicShape",
    "replication_for",
    "Watermarks",
    "TopicAdmin",
    "TopicsError",
]

log = logging.getLogger(__name__)

# One admin request's own timeout: long enough for a broker under load, short enough
# that a tick loop blocked on it still notices SIGTERM within a few seconds.
_REQUEST_TIMEOUT_S = 10.0
# how often a new topic's or partition's metadata is asked for until it has a leader
_LEADER_POLL_S = 0.05

# Retry policy of every admin call: up to 5 attempts within 30 s, backing off from
# 0.2 s to 5 s. A leader election or a broker restart takes seconds, not minutes; past
# that the operator should see the error instead of a silent hang.
ADMIN_RETRY: dict[str, Any] = {
    "stop": stop_after_attempt(5) | stop_after_delay(30),
    "wait": wait_exponential(multiplier=0.2, max=5),
    "reraise": True,
}

class TopicsError(RuntimeError):
    """An admin operation that failed for good; the message says what to do."""


@dataclass(frozen=True)
class Watermarks:
    """Low and high watermarks of one partition."""

    low: int
    high: int


@dataclass(frozen=True)
class TopicShape:
    """What a topic is: its partition count and the topic configs asked for."""

    partitions: int
    config: dict[str, str]


def _retrying() -> Retrying:
    return Retrying(retry=retry_if_exception(is_transient), **ADMIN_RETRY)


class TopicAdmin:
    """The coordinator's admin client plus one consumer for offsets (never subscribed).

    Args:
        settings: librdkafka settings (`Config.kafka_settings()`).
        group: the job's consumer group (`baton.<job>`), read by `committed()`.
        client: who owns it, naming its loggers `baton.kafka.<client>.admin` and
            `baton.kafka.<client>.offsets` (librdkafka's own log lines).
        clock: bounds the wait for a new topic's leaders (the system clock by default).
    """

    def __init__(self, settings: Mapping[str, Any], group: str,
                 client: str = "coordinator", clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self._settings = dict(settings)
        self._group = group
        self._client = client
        self._admin = AdminClient({**producer_settings(self._settings),
                                  **client_logging(f"{client}.admin")})
        self._consumer: Consumer | None = None
        self._unstable: Consumer | None = None

    def _offsets_consumer(self) -> Consumer:
        """A consumer in the job's group that never subscribes (so never joins it)."""
        if self._consumer is None:
            self._consumer = Consumer({
                **self._settings, **client_logging(f"{self._client}.offsets"),
                "group.id": self._group, "enable.auto.commit": False,
                "client.id": f"baton-{self._client}-{uuid.uuid4().hex[:8]}"})
        return self._consumer

    def _committed_consumer(self) -> Consumer:
        """Like the offsets consumer, read_uncommitted (see `committed`)."""
        if self._unstable is None:
            self._unstable = Consumer({
                **self._settings, **client_logging(f"{self._client}.offsets"),
                "group.id": self._group, "enable.auto.commit": False,
                "isolation.level": "read_uncommitted",
                "client.id": f"baton-{self._client}-{uuid.uuid4().hex[:8]}"})
        return self._unstable

    def close(self) -> None:
        for consumer in (self._consumer, self._unstable):
            if consumer is not None:
                consumer.close()
        self._consumer = self._unstable = None

    def partition_counts(self, topics: Sequence[str]) -> dict[str, int]:
        """The partition count of each topic.

        Raises:
            TopicsError: a topic does not exist.
        """
        self._serve_logs()
        for attempt in _retrying():
            with attempt:
                meta = self._admin.list_topics(timeout=_REQUEST_TIMEOUT_S)
        counts: dict[str, int] = {}
        for topic in topics:
            found = meta.topics.get(topic)
            if found is None or found.error is not None or not found.partitions:
                reason = found.error if found is not None and found.error else "does not exist"
                raise TopicsError(f"input topic {topic!r}: {reason}; create it (or fix "
                                  f"job.inputs) and start again")
            counts[topic] = len(found.partitions)
        return counts

    def ensure_compacted(self, topic: str) -> bool:
        """Create `topic` with 1 partition and cleanup.policy=compact unless it exists.

        Returns:
            True when it was created now.

        Raises:
            TopicsError: the broker refused to create it.
        """
        return self.ensure_topic(topic, 1, {"cleanup.policy": "compact"},
                                 what="the coordinator stream")

    def ensure_topic(self, topic: str, partitions: int,
                     config: Mapping[str, str] | None = None, what: str = "topic") -> bool:
        """Create `topic` (`partitions`, topic `config`) unless it exists.

        Args:
            what: how the error message and the log line name the topic.

        Returns:
            True when it was created now.

        Raises:
            TopicsError: the broker refused (no permission, a policy, ...); the message
                names the topic and the broker's reason.
        """
        self._serve_logs()
        for attempt in _retrying():
            with attempt:
                meta = self._admin.list_topics(timeout=_REQUEST_TIMEOUT_S)
        if topic in meta.topics and meta.topics[topic].error is None:
            return False
        spec = NewTopic(topic, partitions, replication_for(len(meta.brokers)),
                        config=dict(config or {}))
        try:
            for attempt in _retrying():
                with attempt:
                    self._admin.create_topics([spec])[topic].result(_REQUEST_TIMEOUT_S)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return False
            raise TopicsError(f"cannot create {what} {topic!r}: {exc.args[0].str()}; "
                              f"create it (or grant this client CreateTopics on it) and "
                              f"start again") from exc
        finally:
            self._serve_logs()
        self._await_leaders(topic, partitions)
        settings = ", ".join(f"{k}={v}" for k, v in (config or {}).items())
        log.info("created %s %s (%d partition%s%s)", what, topic, partitions,
                 "" if partitions == 1 else "s", f", {settings}" if settings else "")
        return True

    def describe(self, topic: str, keys: Sequence[str]) -> TopicShape | None:
        """`topic`'s partition count and the values of its configs `keys`; None when
        the topic does not exist.

        Raises:
            TopicsError: the broker refused to describe it (an authorization failure).
        """
        self._serve_logs()
        for attempt in _retrying():
            with attempt:
                meta = self._admin.list_topics(timeout=_REQUEST_TIMEOUT_S)
        found = meta.topics.get(topic)
        if found is None or found.error is not None:
            return None
        resource = ConfigResource(ResourceType.TOPIC, topic)
        try:
            for attempt in _retrying():
                with attempt:
                    configs = self._admin.describe_configs([resource])[resource].result(
                        _REQUEST_TIMEOUT_S)
        except KafkaException as exc:
            raise TopicsError(f"cannot read the configuration of topic {topic!r}: "
                              f"{exc.args[0].str()}; grant this client DescribeConfigs on "
                              f"it and start again") from exc
        finally:
            self._serve_logs()
        return TopicShape(len(found.partitions),
                          {k: str(configs[k].value) for k in keys if k in configs})

    def _serve_logs(self) -> None:
        """Hand the admin client's queued librdkafka log lines to Python logging (they
        wait on its queue until it is polled)."""
        self._admin.poll(0)

    def watermarks(self, partitions: Iterable[str]) -> dict[str, Watermarks]:
        """Low and high watermark of each "topic:N": two batched ListOffsets requests
        (one per broker each), not a round trip per partition; a partition the batch
        could not answer is asked on its own."""
        wanted = list(partitions)
        if not wanted:
            return {}
        try:
            ends = [self._list_offsets(wanted, spec)
                    for spec in (OffsetSpec.earliest(), OffsetSpec.latest())]
        except KafkaException:
            ends = [{}, {}]
        result = {p: Watermarks(ends[0][p], ends[1][p]) for p in wanted
                  if p in ends[0] and p in ends[1]}
        missing = [p for p in wanted if p not in result]
        return {**result, **self._watermarks_one_by_one(missing)} if missing else result

    def _list_offsets(self, partitions: list[str], spec: OffsetSpec) -> dict[str, int]:
        futures = self._admin.list_offsets(
            {TopicPartition(*parse_partition(p)): spec for p in partitions},
            request_timeout=_REQUEST_TIMEOUT_S)
        out: dict[str, int] = {}
        for tp, future in futures.items():
            try:
                out[format_partition(tp.topic, tp.partition)] = int(future.result().offset)
            except KafkaException:
                continue
        return out

    def _watermarks_one_by_one(self, partitions: Iterable[str]) -> dict[str, Watermarks]:
        consumer = self._offsets_consumer()
        result: dict[str, Watermarks] = {}
        for partition in partitions:
            topic, number = parse_partition(partition)
            for attempt in _retrying():
                with attempt:
                    low, high = self._watermark(consumer, topic, number)
            result[partition] = Watermarks(int(low), int(high))
        return result

    def _watermark(self, consumer: Consumer, topic: str, number: int) -> tuple[int, int]:
        """One partition's watermarks; a partition added since the client's last metadata
        refresh (an expansion) is unknown to it until it asks for the topic again."""
        tp = TopicPartition(topic, number)
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=_REQUEST_TIMEOUT_S,
                                                       cached=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._UNKNOWN_PARTITION:
                raise
            consumer.list_topics(topic, timeout=_REQUEST_TIMEOUT_S)
            low, high = consumer.get_watermark_offsets(tp, timeout=_REQUEST_TIMEOUT_S,
                                                       cached=False)
        return int(low), int(high)

    def committed(self, partitions: Iterable[str]) -> dict[str, int]:
        """The job group's committed offsets; partitions without one are left out.

        Read by a read_uncommitted consumer: librdkafka asks a read_committed one's
        OffsetFetch for stable offsets, and Apache Kafka holds that answer while a
        task's transaction has offsets pending, which under traffic is most of the
        time: the leader's loop stalled for the whole request timeout. The last
        committed offsets are what lags are computed from.
        """
        wanted = [TopicPartition(*parse_partition(p)) for p in partitions]
        if not wanted:
            return {}
        consumer = self._committed_consumer()
        for attempt in _retrying():
            with attempt:
                found = consumer.committed(wanted, timeout=_REQUEST_TIMEOUT_S)
        return {format_partition(tp.topic, tp.partition): int(tp.offset)
                for tp in found if tp.error is None and tp.offset >= 0}

    def create_partitions(self, topic: str, count: int) -> None:
        """Grow `topic` to `count` partitions (no-op when it already has that many).

        Raises:
            TopicsError: the broker refused (for example a shrink).
        """
        current = self.partition_counts([topic])[topic]
        if current == count:
            return
        if count < current:
            raise TopicsError(f"topic {topic!r} has {current} partitions; Kafka cannot "
                              f"shrink it to {count}")
        try:
            for attempt in _retrying():
                with attempt:
                    futures = self._admin.create_partitions([NewPartitions(topic, count)])
                    futures[topic].result(_REQUEST_TIMEOUT_S)
        except KafkaException as exc:
            raise TopicsError(f"cannot grow {topic!r} from {current} to {count} partitions: "
                              f"{exc.args[0].str()}") from exc
        self._await_leaders(topic, count)
        log.info("grew %s from %d to %d partitions", topic, current, count)

    def _await_leaders(self, topic: str, partitions: int) -> None:
        """Wait until the broker's metadata shows `partitions` partitions of `topic`, each
        with a leader. Apache Kafka answers CreateTopics and CreatePartitions once its
        controller has recorded them; the brokers learn them from the metadata log a
        moment later, and until then a read of the new partition fails with "Unknown
        partition" (a coordinator reading its just-created stream did).

        Raises:
            TopicsError: still not there after the request timeout.
        """
        deadline = Deadline.after(self._clock, _REQUEST_TIMEOUT_S)
        while True:
            try:
                found = self._admin.list_topics(topic, timeout=_REQUEST_TIMEOUT_S).topics
                meta = found.get(topic)
                if (meta is not None and meta.error is None
                        and len(meta.partitions) >= partitions
                        and all(p.leader >= 0 for p in meta.partitions.values())):
                    return
            except KafkaException as exc:
                if not is_transient(exc):
                    raise TopicsError(f"cannot describe {topic!r}: {exc.args[0].str()}"
                                      ) from exc
            if deadline.expired():
                raise TopicsError(f"{topic!r} has no leader for all of its {partitions} "
                                  f"partitions {_REQUEST_TIMEOUT_S:.0f} s after it was "
                                  f"created or grown; is the broker healthy?")
            self._clock.sleep(_LEADER_POLL_S)


def replication_for(brokers: int) -> int:
    """The replication factor of a topic Baton creates on a cluster of `brokers` live
    brokers: 3 where there are 3 or more (with the usual min.insync.replicas 2, a write
    then survives the loss of any one broker), else what the cluster can hold."""
    return max(1, min(3, brokers))
