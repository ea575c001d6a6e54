"""The coordinator core behind one lock, its changes on the stream before any answer.

The HTTP handlers (uvicorn's threads), the tick loop and the partition monitor (the
daemon's main thread) all reach the core through this object. Each operation runs the
core under the lock, then writes the core's pending changes to the coordinator stream
(one transaction, orchestrator/daemon/stream_writer.py) before it answers, so an answer
never carries state that a restarted coordinator would not find.

It also keeps the replies in force (orchestrator/daemon/replies_in_force.py): a lock
holder that may change a decision publishes when it lets go, and a report answered from
a cached reply waits in the inbox for the next holder of the lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from orchestrator.core.coordinator import Coordinator
from orchestrator.daemon.replies_in_force import RepliesInForce
from orchestrator.daemon.stream_writer import PersistRecords, StreamWriter
from orchestrator.kafka.stream import FencedError

__all__ = ["GuardedCore"]


class GuardedCore:
    """Serialises access to the core and persists its changes before answers leave.

    Args:
        core: the coordinator core.
        persist: writes a batch of changes in one transaction (raises on failure).
    """

    def __init__(self, core: Coordinator, persist: PersistRecords) -> None:
        self.core = core
        self.lock = threading.RLock()
        self._decided = threading.Condition(self.lock)
        self._unpersisted = False
        self._decisions = 0                 # the loop's decisions: a registration waits for one
        self.wake = threading.Event()       # a decision is wanted (or this one is fenced)
        self.writer = StreamWriter(persist, core.picture.clock, self.wake)
        # published as a lock holder that may change a decision lets go
        self.replies = RepliesInForce()

    def commit(self) -> None:
        """Write the core's pending changes (caller holds the lock or is alone).

        Raises:
            FencedError: another coordinator took over (also recorded in `fenced`).
            StreamError: the write failed; the changes stay pending for the next try.
        """
        changes = self.core.picture.pending_changes()
        if changes:
            self._unpersisted = True
            self.writer.write(changes)
            self.core.picture.confirm(changes)
        self._unpersisted = False
        self.notify()                       # waiting heartbeats look at the new decision

    @property
    def unpersisted(self) -> bool:
        """A loop write failed: the next heartbeat persists before it answers."""
        return self._unpersisted

    @property
    def fenced(self) -> FencedError | None:
        """The fencing a write met (another coordinator took over), if any."""
        return self.writer.fenced

    @property
    def last_write(self) -> float:
        """When the stream was last written (the clock's monotonic reading)."""
        return self.writer.last_write

    def keepalive(self, record: Mapping[str, Any] | None) -> None:
        """Write the "leader" record (None: resign, a standby may lead at once).

        Why: standbys take the stream's silence for the leader's death, and a leader
        fenced by a newer one only learns it when it writes. Not under the core's
        lock: a busy core must not delay the record that keeps the lease.
        """
        self.writer.write({"leader": None if record is None else dict(record)})

    @contextmanager
    def deciding(self) -> Iterator[None]:
        """The lock, for an operation that may change what heartbeats are told."""
        with self.lock:
            try:
                yield
            finally:
                self.replies.publish()

    def take_inbox(self) -> None:
        """Caller holds the lock: the reports answered while it was busy, in order."""
        for request in self.replies.take():
            self.core.heartbeat(request, decide=False)
        self.want_turn()

    def want_turn(self) -> None:
        """Wake the daemon's loop if the reports taken in carry news a decision waits for."""
        if self.core.turn_wanted:
            self.wake.set()

    @property
    def decisions(self) -> int:
        """How many decisions the loop made (a registration waits for the next)."""
        return self._decisions

    def count_decision(self) -> None:
        """Caller holds the lock: the loop decided once more."""
        self._decisions += 1

    def notify(self) -> None:
        """A decision was made (or found nothing to change): rouse the waiting heartbeats."""
        with self.lock:
            self._decided.notify_all()

    def wait(self, seconds: float) -> None:
        """Caller holds the lock: release it until a decision, at most `seconds`."""
        self._decided.wait(seconds)
