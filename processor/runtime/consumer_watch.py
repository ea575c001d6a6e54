"""A consumer watched for being cut off from the brokers: the probes around
processor/runtime/cut_off.py's decisions, and the close of a consumer replaced.

The active consumer and the replays' two consumers each keep one `ConsumerWatch`. A
cut-off consumer holds whatever reads on it: the active tasks, a warmup (a scale-out
that never completes), or an activation (a handoff paused until the coordinator's
activate timeout).
"""

from __future__ import annotations

import logging
import threading

from confluent_kafka import Consumer, KafkaException

from orchestrator.wire.clock import Clock
from processor.runtime import cut_off
from processor.runtime.lookups import Lookups

__all__ = ["ConsumerWatch", "close_in_background"]

log = logging.getLogger("baton.processor.runtime")


class ConsumerWatch:
    """The quiet spells of one consumer, told after each of its polls.

    Args:
        clock: times the spells.
        lookups: the processor's lookup consumer, asked the same when the watched one
            does not answer (both silent: the brokers are away, not this consumer).
    """

    def __init__(self, clock: Clock, lookups: Lookups) -> None:
        self._clock = clock
        self._lookups = lookups
        self._state = cut_off.FetchWatch()

    def cut_off(self, consumer: Consumer, found: bool, topic: str | None) -> bool:
        """After a poll of `consumer` that found records or not: whether it is cut off
        and must be replaced now. `topic` is one it fetches (None: it fetches nothing, so
        finding nothing says nothing)."""
        self._state, probe = cut_off.after_poll(self._state, self._clock.monotonic(),
                                                found, topic is not None,
                                                cut_off.PROBE_EVERY_S)
        if not probe or topic is None:
            return False
        answered = _answers(consumer, topic)
        others = answered or _answers(self._lookups.consumer, topic)
        self._state, replace = cut_off.after_probe(self._state, self._clock.monotonic(),
                                                   answered, others, cut_off.CUT_OFF_S)
        return replace


def close_in_background(consumer: Consumer, what: str) -> None:
    """Close a replaced consumer on a thread of its own: a client that lost its brokers
    may wait on them in its close, and nothing waits on this one any more."""
    threading.Thread(target=_close_quietly, args=(consumer, what), daemon=True,
                     name="baton-consumer-close").start()


def _answers(consumer: Consumer, topic: str) -> bool:
    """Whether `consumer` gets `topic`'s metadata from a broker within the probe's bound."""
    try:
        consumer.list_topics(topic, timeout=cut_off.PROBE_TIMEOUT_S)
    except KafkaException:
        return False
    return True


def _close_quietly(consumer: Consumer, what: str) -> None:
    try:
        consumer.close()
    except Exception as exc:  # noqa: BLE001 - replaced already; nothing waits on it
        log.debug("closing a replaced %s: %s", what, exc)
