"""The fence: a new owner's producer takes the task's transactional id
(`init_transactions`), which fences the previous owner's producer, then reads T1.

Both are broker round trips, and `init_transactions` can sit on a librdkafka retry
timer, so they run on worker threads and the loop only checks whether they are done:
other tasks must not wait for them. A future owner's producer is connected ahead of
time (`prepare`), so that wait for the transaction coordinator's connection is not part
of the handoff pause either.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from orchestrator.kafka.logs import client_logging
from orchestrator.kafka.retry import kafka_error
from orchestrator.kafka.settings import producer_settings
from orchestrator.kafka.watched_producer import WatchedProducer
from orchestrator.wire.clock import Clock, Deadline
from orchestrator.wire.config import Config
from processor.runtime.lookups import Lookups
from processor.runtime.preflight import DEFAULT_TRANSACTION_TIMEOUT_MS
from processor.runtime.producer_close import close_producer

__all__ = ["Fenced", "Fencer", "STABLE_T1_WAIT_S", "close_when_done"]

_INIT_TXN_TIMEOUT_S = 30.0
# init_transactions answers that ask for the same call again a little later
_FENCE_AGAIN = {KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.CONCURRENT_TRANSACTIONS,
                KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE}
# how long a stable T1 lookup may wait after the fence before the task takes its pending
# offset commit for one the brokers ended without markers (activation.py, void commits)
STABLE_T1_WAIT_S = 10.0
# A new owner's init_transactions often meets the old owner's just-finished transaction
# (CONCURRENT_TRANSACTIONS) and retries; librdkafka's default back-off (100 ms, doubling)
# would put most of a retry's wait inside the pause, where the markers take a few ms. A
# transaction left open by an owner that died holds back, on Apache Kafka, its
# partitions' last stable offset (read_committed readers of the output and changelog)
# and the group's offsets (an OffsetFetch answers UNSTABLE_OFFSET_COMMIT, so a warmup or
# the coordinator asking for T1 waits) until the broker aborts it after
# `transaction.timeout.ms`: librdkafka's 60 s would stall such a warmup for a minute;
# 10 s is Kafka Streams' exactly-once default (transactions here commit every
# `commit_interval_ms`). librdkafka's re-bootstrap can strand a pending TxnOffsetCommit,
# and send_offsets_to_transaction then blocks past its own timeout (librdkafka issue
# 5511, across a broker restart): a task's producer never re-bootstraps. One that lost
# every broker fails its next commit and the task restarts with a new producer. Any
# [kafka] setting overrides these.
_PRODUCER_DEFAULTS: dict[str, Any] = {"retry.backoff.ms": 10, "retry.backoff.max.ms": 100,
                                      "queue.buffering.max.messages": 500_000,
                                      "linger.ms": 5,
                                      "transaction.timeout.ms": DEFAULT_TRANSACTION_TIMEOUT_MS,
                                      "metadata.recovery.strategy": "none"}


@dataclass(frozen=True)
class Fenced:
    """What the fence's thread found: when init_transactions returned, and T1 read right
    after it (stable: nobody else can commit the task's offsets now), or the error of
    that lookup (a timeout: the activation takes the void-commit path)."""

    at: float
    committed: dict[str, int] | None
    error: KafkaException | None
    t1_at: float
    others: dict[str, int] = field(default_factory=dict)   # T1 of the replay's other sources


class Fencer:
    """The producers of the tasks on their way here, and their fences.

    Args:
        config: the job's configuration (the producers' settings).
        group: the job's consumer group; a task's transactional id is `<group>.<task>`.
        lookups: the committed offsets (T1).
        clock: the fence's retry deadline.
    """

    def __init__(self, config: Config, group: str, lookups: Lookups, clock: Clock) -> None:
        self._group = group
        self._lookups = lookups
        self._clock = clock
        self._producer_settings = {k: v for k, v in producer_settings(config.kafka_settings())
                                   .items() if not k.startswith("receive.message")}
        # connected, not yet fencing: each with its connection attempt on the pool
        self._prepared: dict[str, tuple[WatchedProducer, Future[Any]]] = {}
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="baton-fence")

    def start(self, task: str, partitions: Sequence[str], others: Sequence[str]
              ) -> tuple[WatchedProducer, Future[Fenced]]:
        """Fence the previous owner of `task` with its prepared producer (or a new one),
        then read T1 of `partitions` and of `others`, beside the loop."""
        prepared = self._prepared.pop(task, None)
        producer = prepared[0] if prepared else self._producer(task)
        return producer, self._pool.submit(self._fence, producer, list(partitions),
                                           list(others))

    def _fence(self, producer: WatchedProducer, partitions: list[str],
               others: list[str]) -> Fenced:
        """Fence and read T1 (`_fence_and_read_t1`), then T1 of the `others` the replay
        reads, retried as any lookup is (another owner's: no void commit of this task's
        can hold them, but an open transaction of theirs can, until it ends)."""
        fenced = self._fence_and_read_t1(producer, partitions)
        if not others or fenced.committed is None:
            return fenced
        return replace(fenced, others=self._lookups.committed(others))

    def _fence_and_read_t1(self, producer: WatchedProducer, partitions: list[str]) -> Fenced:
        """init_transactions, again while the brokers answer that they cannot yet (a
        transaction coordinator loading its log after a restart, or still completing
        the previous owner's transaction), within `_INIT_TXN_TIMEOUT_S` in all; then one
        stable lookup of T1."""
        deadline = Deadline.after(self._clock, _INIT_TXN_TIMEOUT_S)
        while True:
            try:
                producer.init_transactions(max(1.0, deadline.remaining()))
                at = self._clock.monotonic()
                try:
                    committed = self._t1_after_fence(partitions)
                except KafkaException as exc:
                    return Fenced(at, None, exc, self._clock.monotonic())
                return Fenced(at, committed, None, self._clock.monotonic())
            except KafkaException as exc:
                err = kafka_error(exc)
                if err is None or err.code() not in _FENCE_AGAIN or deadline.expired():
                    raise
            self._clock.sleep(0.1)

    def _t1_after_fence(self, partitions: list[str]) -> dict[str, int]:
        """One stable lookup of T1; after any failure but its timeout (the group's
        coordinator moving: a broker killed or restarting), the lookup retried as any
        lookup is, here on the fence's thread: on the loop it would hold every other
        task and the heartbeats' replies for as long (up to a minute and a half)."""
        lookups = self._lookups
        try:
            return lookups.committed_once(partitions, STABLE_T1_WAIT_S)
        except KafkaException as exc:
            err = kafka_error(exc)
            if err is not None and err.code() == KafkaError._TIMED_OUT:
                raise           # pending past the wait: a void commit
        return lookups.committed(partitions)

    def _producer(self, task: str) -> WatchedProducer:
        return WatchedProducer({**_PRODUCER_DEFAULTS, **self._producer_settings,
                                **client_logging("processor.producer"),
                                "transactional.id": f"{self._group}.{task}"})

    def prepare(self, task: str) -> None:
        """Connect a future owner's producer ahead of time (without fencing anyone):
        init_transactions on a cold producer can wait on librdkafka's 500 ms PID timer
        for the coordinator connection, and that wait would sit inside the pause."""
        if task not in self._prepared:
            producer = self._producer(task)
            self._prepared[task] = (
                producer, self._pool.submit(producer.list_topics, None, 10))

    def forget(self, task: str) -> None:
        """The task will not come here after all: close its prepared producer."""
        prepared = self._prepared.pop(task, None)
        if prepared is not None:
            close_when_done(*prepared)

    def close(self) -> None:
        """Close the prepared producers, stop fencing."""
        for prepared in self._prepared.values():
            close_when_done(*prepared)
        self._prepared.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)


def close_when_done(producer: WatchedProducer, call: Future[Any]) -> None:
    """Close `producer` once `call`, a call on it on the fencer, has returned (or at
    once if it never started): closing a client while a call runs on it is not safe."""
    call.add_done_callback(lambda _: close_producer(producer))
