"""The service's writes to the coordinator stream: one transaction at a time, and a
fencing remembered (a fenced producer never writes again).

The fencing is remembered by its message alone, and each later write raises a new
error: the first one's traceback holds the frames that wrote, and with them the
fenced producer, whose client (threads, sockets) would live as long as the leadership's
parts that still refer to this writer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from orchestrator.kafka.stream import FencedError
from orchestrator.wire.clock import Clock

__all__ = ["PersistRecords", "StreamWriter"]

PersistRecords = Callable[[Mapping[str, Any | None]], None]


class StreamWriter:
    """Serialises the coordinator stream's transactions and records a fencing.

    Args:
        persist: writes a batch of changes in one transaction (raises on failure).
        clock: stamps `last_write` (the leader's lease counts from it).
        wake: set when this coordinator is fenced, so the daemon's loop notices at once.
    """

    def __init__(self, persist: PersistRecords, clock: Clock, wake: threading.Event) -> None:
        self._persist = persist
        self._clock = clock
        self._wake = wake
        self.lock = threading.Lock()   # one stream transaction at a time
        self.fenced: FencedError | None = None
        self.last_write = clock.monotonic()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Holds the write lock around one transaction; a fencing is remembered and
        raised again by every later write."""
        try:
            with self.lock:
                if self.fenced is not None:     # the producer is dead: never write again
                    raise FencedError(*self.fenced.args)
                yield
        except FencedError as exc:
            if self.fenced is None:
                self.fenced = FencedError(*exc.args)    # no traceback: see the module doc
            self._wake.set()
            raise
        self.last_write = self._clock.monotonic()

    def write(self, changes: Mapping[str, Any | None]) -> None:
        """Write `changes` in one transaction.

        Raises:
            FencedError: another coordinator took over (also recorded in `fenced`).
            StreamError: the write failed.
        """
        with self.transaction():
            self._persist(changes)
