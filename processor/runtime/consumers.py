"""The task runtime's consumers: who reads which partition, from where, and when.

All are `assign()`-based (the coordinator owns assignment, not Kafka's group
protocol) and `read_committed`: one for active tasks (processor/runtime/
active_consumer.py), one for replays (warmups, standbys) and one for activations (a
handoff's silent replay: it must not queue behind a warmup's backlog; processor/
runtime/replay_consumers.py), and one that reads nothing and only looks offsets up
(processor/runtime/lookups.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, Message

from orchestrator.kafka.logs import client_logging
from orchestrator.wire.clock import Clock
from orchestrator.wire.config import Config
from processor.runtime.active_consumer import ActiveConsumer
from processor.runtime.lookups import Lookups
from processor.runtime.replay_consumers import ReplayConsumers

__all__ = ["FETCH_BOUNDS", "FETCH_PACE", "Consumers", "log_error"]

log = logging.getLogger("baton.processor.runtime")

# A partition assigned while a fetch is parked at the broker waits for that fetch to
# return; librdkafka's default (500 ms) would then sit inside every handoff pause.
_FETCH_WAIT_MS = 20
# A partition whose fetched records fill librdkafka's queue is fetched again only after
# this long (default 1 s): a replay drains its queue in a few ms and would sit idle.
_FETCH_QUEUE_BACKOFF_MS = 5
# What a consumer fetches ahead of its polls, bounded (librdkafka's defaults: up to
# 50 MiB a fetch, 1 MiB a partition, and a queue refilled below 100,000 records a
# partition, up to 64 MiB): a replay of a backlog (a warmup, a store rebuilt from its
# changelog) would fill that queue, and the processor's memory with it, in bursts glibc
# does not all give back; the bounds keep the replay's rate (docs/performance.md,
# "Measurements behind the code"). Defaults only: [kafka] sets any of them.
FETCH_BOUNDS = {"fetch.max.bytes": 4 << 20, "max.partition.fetch.bytes": 256 << 10,
                "queued.max.messages.kbytes": 4 << 10, "queued.min.messages": 5_000}
# how every consumer of a processor fetches, whatever [kafka] says
FETCH_PACE = {"fetch.wait.max.ms": _FETCH_WAIT_MS,
              "fetch.queue.backoff.ms": _FETCH_QUEUE_BACKOFF_MS}


class Consumers:
    """The consumers of one processor (active, replay, activation, lookup), owned by the
    runtime's loop.

    Args:
        config: the job's configuration (Kafka settings).
        group: the job's consumer group (`baton.<job>`), for offsets and fencing.
        clock: paces the refresh of the replicas' caps and the idle back-off.
    """

    def __init__(self, config: Config, group: str, clock: Clock) -> None:
        settings = {**FETCH_BOUNDS, **config.kafka_settings(**{
            "group.id": group, "enable.auto.commit": False,
            "isolation.level": "read_committed", "auto.offset.reset": "earliest",
            "enable.partition.eof": False, **FETCH_PACE})}
        # an idle back-off needs to know when a fetch has read a partition to its end
        idle_backoff_s = config.processor.idle_fetch_backoff_ms / 1000
        active = {**settings, **client_logging("processor.active"),
                  "enable.partition.eof": idle_backoff_s > 0}
        # a replay never jumps over records the broker no longer holds: a fetch below
        # the first retained offset is an error (processor/retention.py)
        replays = {**settings, "auto.offset.reset": "error"}
        def replay_consumer(name: str) -> Consumer:       # "replay" or "activation"
            return Consumer({**replays, **client_logging(f"processor.{name}")})
        lookup = {**settings, **client_logging("processor.lookup")}
        self.lookups = Lookups(Consumer(lookup), lambda: Consumer(
            {**lookup, "isolation.level": "read_uncommitted"}))
        self.active = ActiveConsumer(Consumer(active), self.lookups, idle_backoff_s, clock,
                                     remake=lambda: Consumer(active))
        # the stall watch's lookups of the ends, on a thread of their own
        self.make_end_lookup: Callable[[], Consumer] = lambda: Consumer(
            {**lookup, **client_logging("processor.ends")})
        self.replays = ReplayConsumers(replay_consumer("replay"),
                                       replay_consumer("activation"), clock, self.lookups,
                                       remake=replay_consumer)

    def on_replaced(self, count: Callable[[], None]) -> None:
        """Call `count` whenever a consumer cut off from the brokers is replaced."""
        self.active.on_replaced = count
        self.replays.on_replaced = count

    def close(self) -> None:
        self.active.consumer.close()
        self.replays.replay.close()
        self.replays.activation.close()
        self.lookups.close()


def log_error(msg: Message) -> None:
    """A consumer error that reached a batch (an end of partition is no error)."""
    err = msg.error()
    if err.code() != KafkaError._PARTITION_EOF:  # noqa: SLF001
        log.warning("consumer error on %s:%s: %s", msg.topic(), msg.partition(), err)
