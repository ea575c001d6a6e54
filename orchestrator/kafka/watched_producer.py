"""A transactional producer that remembers losing its brokers.

A broker that restarts between a transaction's first write and its commit may come
back without that transaction: Kafka keeps transaction state in a replicated log and
resumes it, but a broker that forgets it aborts the records already written and then
acknowledges the rest of the transaction as if nothing happened. The writers that
must not lose a transaction (a task's output, the coordinator stream) therefore
compare `losses()` before and after each transaction and redo or verify it when the answer
is yes; on a broker that keeps its transactions, that costs one redo or one lookup
per broker outage and nothing otherwise.

librdkafka reports the loss as error events (all brokers down, transport failures),
delivered by `poll()`: `losses()` polls, then returns the count.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, Producer

__all__ = ["WatchedProducer"]

_LOSS_CODES = frozenset({KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT})


class _LossCounter:
    """The producer's error callback: it holds no reference to the producer, which
    would otherwise hold itself through its own bound method (a cycle only the garbage
    collector's full pass frees, keeping the client's threads and sockets until then)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, err: KafkaError) -> None:
        if err.code() in _LOSS_CODES:
            self.count += 1


class WatchedProducer(Producer):  # type: ignore[misc]
    """A Producer whose `broker_losses` counts the broker connections it lost."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self._lost = _LossCounter()
        super().__init__({**settings, "error_cb": self._lost})

    @property
    def broker_losses(self) -> int:
        return self._lost.count

    def losses(self) -> int:
        """Serve pending error events, then return the loss count (compare two calls)."""
        self.poll(0)
        return self.broker_losses
