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


class WatchedProducer(Producer):  # type: ignore[misc]
    """A Producer whose `broker_losses` counts the broker connections it lost."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.broker_losses = 0
        super().__init__({**settings, "error_cb": self._on_error})

    def _on_error(self, err: KafkaError) -> None:
        if err.code() in _LOSS_CODES:
            self.broker_losses += 1

    def losses(self) -> int:
        """Serve pending error events, then return the loss count (compare two calls)."""
        self.poll(0)
        return self.broker_losses
