"""Live traffic for the tests: a steady keyed producer on a thread of its own, plain or
transactional, that can pause (flushed) and resume."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from tests.brokers import Broker

__all__ = ["Feeder"]

# How often the feeder sends what is due: each tick's records go to the broker as one
# produce request, and a broker's cost is per request more than per record. At 50 ms,
# tests/orchestrator/test_e2e.py's broker used about a fifth less CPU than at 10 ms
# (docs/performance.md, "Measurements behind the code"); the rate is the same.
_TICK_S = 0.05


class Feeder:
    """A steady keyed producer on its own thread: value 1..9, keys k0..k<keys-1> in turn
    (or the given key list, which `use_keys` may change under way).

    With `transactional_id` it writes like an exactly-once job upstream: a transaction
    every `batch` records, so commit markers sit between the records.
    """

    def __init__(self, broker: Broker, topic: str, keys: int | Sequence[bytes] = 50,
                 rate: float = 2000.0, transactional_id: str | None = None, batch: int = 50,
                 pick: Callable[[int], tuple[bytes, int]] | None = None,
                 **settings: Any) -> None:
        self.broker, self.topic, self.rate = broker, topic, rate
        self.keys: list[bytes] = ([f"k{i}".encode() for i in range(keys)]
                                  if isinstance(keys, int) else list(keys))
        self.transactional_id, self.batch = transactional_id, batch
        # the key and timestamp (ms) of the i-th record, instead of the keys in turn at
        # the time of sending
        self.pick = pick
        self.settings = settings
        self.sent = 0
        self.started = 0.0              # time.monotonic() at start()
        self.failed = 0                 # deliveries the broker never acknowledged
        # where each acknowledged record landed: (partition, offset), so a count that
        # does not match the topic can name the record it misses
        self.delivered: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._paused = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._guarded, name="feeder", daemon=True)

    def start(self) -> Feeder:
        self.started = time.monotonic()
        self._thread.start()
        return self

    def use_keys(self, keys: Sequence[bytes]) -> None:
        self.keys = list(keys)

    def _producer(self) -> Any:
        # idempotent: a send retried across a broker restart is not written twice
        extra: dict[str, Any] = {"enable.idempotence": True, **self.settings}
        if self.transactional_id is not None:
            extra["transactional.id"] = self.transactional_id
        producer = self.broker.producer(**extra)
        if self.transactional_id is not None:
            producer.init_transactions(30)
            producer.begin_transaction()
        return producer

    def _flush(self, producer: Any) -> None:
        if self.transactional_id is None:
            assert producer.flush(30) == 0
            return
        producer.commit_transaction(30)
        producer.begin_transaction()

    def _guarded(self) -> None:
        try:
            self._run()
        except BaseException as exc:    # noqa: BLE001 - stop() raises it in the test
            self._error = exc

    def _run(self) -> None:
        producer = self._producer()
        started = time.monotonic()
        while not self._stop.is_set():
            if not self._running.is_set():
                self._flush(producer)
                self._paused.set()
                self._running.wait(0.1)
                started = time.monotonic() - self.sent / self.rate
                continue
            self._paused.clear()
            due = int((time.monotonic() - started) * self.rate)
            while self.sent < due:
                i = self.sent
                keys = self.keys
                key, stamp = (keys[i % len(keys)], 0) if self.pick is None else self.pick(i)
                try:
                    producer.produce(self.topic, key=key, value=str(i % 9 + 1).encode(),
                                     on_delivery=self._delivered, timestamp=stamp)
                except BufferError:     # the broker is away and the local queue full:
                    producer.poll(0.1)  # wait for it, as a real producer would
                    break
                self.sent += 1
                if self.transactional_id is not None and self.sent % self.batch == 0:
                    self._flush(producer)
            producer.poll(0)
            time.sleep(_TICK_S)
        self._flush(producer)
        if self.transactional_id is not None:
            producer.abort_transaction(30)  # the empty one _flush began

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed += 1
        else:
            self.delivered.append((msg.partition(), msg.offset()))

    def running(self) -> bool:
        """Its thread still produces (not stopped, not ended by an error)."""
        return self._thread.is_alive()

    def pause(self) -> None:
        """Stop producing; returns once everything sent so far is acknowledged."""
        self._paused.clear()
        self._running.clear()
        assert self._paused.wait(60), "the feeder did not pause"

    def resume(self) -> None:
        self._running.set()

    def stop(self) -> int:
        """Stop; returns how many records the broker acknowledged (a delivery that
        failed after its retries is not on the topic, so the oracle must not expect it)."""
        self._running.set()
        self._stop.set()
        self._thread.join(60)
        # a count from a producer that did not flush would promise records it never wrote
        assert not self._thread.is_alive(), "the feeder did not stop within 60 s"
        if self._error is not None:
            raise AssertionError(f"the feeder failed: {self._error!r}") from self._error
        return self.sent - self.failed
