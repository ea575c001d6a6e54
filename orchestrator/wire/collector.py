"""When the daemons let Python's cyclic garbage collector stop the world.

A large job's coordinator holds many container objects, and every heartbeat replaces
a processor's reports, so young objects reach the oldest generation quickly and
CPython's full collections come often and stop every thread: the event loop answers no
heartbeat meanwhile, and those pauses alone would set the heartbeats' p99.

A processor's batches (records, their keys and outputs) churn the same way: each full
collection walks every object of its imports, and a handoff whose release or
activation meets one pauses that long. (The figures: docs/performance.md, "Measurements
behind the code".)

`Collector` keeps the collections small: it freezes what has lived a while
(`gc.freeze()` moves every tracked object to the permanent generation in O(1), so the
automatic collections only walk what came since) and unfreezes and collects everything
rarely, which frees the few reference cycles that were frozen meanwhile. Objects that
die by reference count are freed at once, frozen or not; only garbage *cycles* wait
for the rare full collection.

A cycle can hold more than memory: a Kafka client that could not be closed goes with
the last reference to it, and the error that stopped its task may hold it in a cycle
(processor/runtime/producer_close.py). Its threads and sockets should not wait ten
minutes: `want_full_collection()` asks for a full collection at the next turn, at most
one every `WANTED_GAP_S`.

Every `TRIM_S`, and after each full collection, the C heap gives its free pages back
to the system (orchestrator/wire/c_heap.py). glibc keeps what its threads' arenas
freed: a processor's librdkafka and RocksDB threads allocate and free in bursts (a
handoff's replay, a broker restart's new clients), and without the trim its RSS kept
each burst's peak (a processor an hour into a soak went from 161.5 to 122.9 MB at one
trim; with a trim only every full collection, a broker restart's burst stayed up to ten
minutes).
"""

from __future__ import annotations

import gc
import logging
import threading

from orchestrator.wire import c_heap
from orchestrator.wire.clock import Clock, SystemClock

__all__ = ["TRIM_S", "WANTED_GAP_S", "Collector", "want_full_collection"]

log = logging.getLogger("baton.gc")

# freeze the survivors this often: the automatic collections see a second of objects
FREEZE_S = 1.0
# a full collection (cycles frozen meanwhile are freed) this often: one pause of the
# kind above every ten minutes instead of one every few seconds
FULL_S = 600.0
# a full collection asked for comes no sooner than this after the previous one
WANTED_GAP_S = 30.0
# the C heap's free pages go back to the system this often, full collection or not:
# a burst's peak is kept a minute at most
TRIM_S = 60.0

# set by any thread; the daemon's collector answers it at its next turn
_wanted = threading.Event()


def want_full_collection() -> None:
    """Ask the daemon's collector for a full collection soon (module doc): something
    that holds threads or sockets waits in a cycle for it."""
    _wanted.set()


class Collector:
    """Call `turn()` from the daemon's loop; a monotonic `now` may be given for tests.

    Args:
        freeze_s: how often the survivors are frozen.
        full_s: how often everything is collected.
        clock: the daemon's clock (the system clock by default).
    """

    def __init__(self, freeze_s: float = FREEZE_S, full_s: float = FULL_S,
                 clock: Clock | None = None) -> None:
        self.freeze_s, self.full_s = freeze_s, full_s
        self._clock = clock or SystemClock()
        now = self._clock.monotonic()
        self._frozen_at, self._full_at, self._trimmed_at = now, now, now
        self.full_collections = 0
        gc.freeze()

    @property
    def full_at(self) -> float:
        """When the last full collection ran (the clock's monotonic reading): a full
        collection is due `full_s` after it, or `WANTED_GAP_S` after it once wanted."""
        return self._full_at

    def turn(self, now: float | None = None) -> None:
        now = self._clock.monotonic() if now is None else now
        since = now - self._full_at
        if since >= self.full_s or (since >= WANTED_GAP_S and _wanted.is_set()):
            _wanted.clear()
            self._full_at = self._frozen_at = now
            gc.unfreeze()
            started = self._clock.monotonic()
            freed = gc.collect()
            gc.freeze()
            collected = self._clock.monotonic()
            self._trim(now)
            self.full_collections += 1
            log.debug("full collection: %d object(s) freed in %.0f ms, heap trimmed in %.0f ms",
                      freed, 1000 * (collected - started),
                      1000 * (self._clock.monotonic() - collected))
            return
        if now - self._frozen_at >= self.freeze_s:
            self._frozen_at = now
            gc.freeze()
        if now - self._trimmed_at >= TRIM_S:
            self._trim(now)

    def _trim(self, now: float) -> None:
        self._trimmed_at = now
        c_heap.trim()

    def close(self) -> None:
        """Back to CPython's own collection (tests run daemons in-process)."""
        gc.unfreeze()
