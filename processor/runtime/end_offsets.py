"""The committed ends of the partitions a processor's active tasks read, looked up
beside the loop.

The stall watch (processor/runtime/stall_watch.py) needs to know whether records came
to a partition its consumer no longer reads. A consumer's own cached watermarks say
nothing then (a stalled fetch brings no new ones), so the ends are asked of the brokers:
on a client of their own (a read_committed consumer that never reads: the answer is the
last stable offset), on a thread of their own, so a slow or absent broker never holds
the loop. The loop names the partitions it wants and takes the last answers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from confluent_kafka import Consumer, KafkaException

from orchestrator.kafka.offsets import end_offsets_once

__all__ = ["EndOffsets"]

log = logging.getLogger("baton.processor.runtime")

# one lookup's bound: a broker that does not answer within it is asked again next round
_LOOKUP_TIMEOUT_S = 5.0


class EndOffsets:
    """Partition -> committed end, refreshed every `every_s` on a daemon thread.

    Args:
        make: makes the consumer the lookups run on (made on the thread's first round).
        every_s: how often the wanted partitions' ends are looked up.
    """

    def __init__(self, make: Callable[[], Consumer], every_s: float) -> None:
        self._make = make
        self._every_s = every_s
        self._lock = threading.Lock()
        self._wanted: tuple[str, ...] = ()
        self._ends: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def want(self, partitions: Iterable[str]) -> None:
        """Look up these partitions from now on (the thread starts on the first call
        that names any)."""
        wanted = tuple(sorted(set(partitions)))
        with self._lock:
            self._wanted = wanted
            self._ends = {p: o for p, o in self._ends.items() if p in wanted}
        if wanted and self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name="baton-end-offsets")
            self._thread.start()

    def ends(self) -> dict[str, int]:
        """The last ends found, of the wanted partitions (one not looked up yet is
        missing)."""
        with self._lock:
            return dict(self._ends)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(_LOOKUP_TIMEOUT_S + 1.0)

    def _run(self) -> None:
        consumer = self._make()
        try:
            while not self._stop.is_set():
                with self._lock:
                    wanted = self._wanted
                found = self._look_up(consumer, wanted)
                with self._lock:
                    self._ends.update({p: o for p, o in found.items() if p in self._wanted})
                self._stop.wait(self._every_s)
        finally:
            consumer.close()

    def _look_up(self, consumer: Consumer, partitions: Iterable[str]) -> dict[str, int]:
        """Every partition's end in one request per broker; when that fails (a leader
        lost, a partition unknown), one by one, so the others are still answered."""
        wanted = list(partitions)
        try:
            return end_offsets_once(consumer, wanted, _LOOKUP_TIMEOUT_S)
        except KafkaException as exc:
            log.debug("ends of %d partitions not looked up at once: %s", len(wanted), exc)
        found: dict[str, int] = {}
        for partition in wanted:
            try:
                found.update(end_offsets_once(consumer, [partition], _LOOKUP_TIMEOUT_S))
            except KafkaException as exc:
                log.debug("end of %s not looked up: %s", partition, exc)
            if self._stop.is_set():
                break
        return found
