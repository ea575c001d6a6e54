"""The sweep of expired state entries nothing reads any more, on an active task.

An entry with a TTL is deleted by the first read that finds it expired (store/expiry.py);
one that is never read again (a deduplication id that never recurs) would stay on disk
for good. So a commit of an active task, once every `INTERVAL_S`, looks at a slice of
its committed entries (`SLICE`, from where the last slice stopped, round and round) and
deletes, inside the transaction (its changelog carries the deletes), those that expired
`GRACE_MS` of stream time before the task's partitions' clocks.

Why that changes no read, on any path: a record's clock is its own timestamp, so a
deletion is invisible to every later record whose timestamp is at or past the entry's
expiry (it reads the entry as absent anyway). The bound is the least, over the task's
partitions, of the largest timestamp this task processed there (`watermark`), less
`GRACE_MS`: a later record at most `GRACE_MS` behind the largest earlier timestamp of
its own partition is at or past every expiry swept. Replicas, the activation's replay
and the Spark fold never sweep: their stores keep such entries, as invisible, until
they serve the task and sweep them in turn. A partition the task has not processed a
record of since it started here (an idle one, one just added) holds the sweep back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from store import Store

__all__ = ["GRACE_MS", "INTERVAL_S", "SLICE", "ExpirySweep"]

# how far behind its partition's largest timestamp a record may come and still read
# the state its owner read: an hour of stream time, as late as upstream retries run
GRACE_MS = 3_600_000
# committed entries looked at per sweep, and sweeps at most this often: about 1 ms of
# a task's loop a second (also for a job with no TTL, whose slices find nothing), and
# a store of a million keys swept round in about 8 minutes
SLICE = 2000
INTERVAL_S = 1.0


class ExpirySweep:
    """One active task's sweep: its partitions' clocks and where its next slice starts."""

    def __init__(self, grace_ms: int = GRACE_MS, slice_size: int = SLICE) -> None:
        self.clocks: dict[str, int] = {}        # partition -> largest timestamp processed
        self.grace_ms = grace_ms
        self.slice_size = slice_size
        self._cursor = b""
        self._last: float | None = None         # monotonic time of the last sweep

    def saw(self, partition: str, timestamps: Iterable[int]) -> None:
        """Records of `partition` with these timestamps were processed."""
        top = max(timestamps, default=None)
        if top is not None and top > self.clocks.get(partition, top - 1):
            self.clocks[partition] = top

    def watermark(self, partitions: Iterable[str]) -> int | None:
        """The least clock of `partitions`, None while one has none."""
        clocks = [self.clocks.get(p) for p in partitions]
        if not clocks or None in clocks:
            return None
        return min(c for c in clocks if c is not None)

    def run(self, store: Store, partitions: Sequence[str], now: float) -> None:
        """Sweep one slice into the open transaction of `store` (see the module), unless
        one ran less than `INTERVAL_S` before `now` (monotonic seconds)."""
        mark = self.watermark(partitions)
        if mark is None or (self._last is not None and now - self._last < INTERVAL_S):
            return
        self._last = now
        cursor = store.sweep_expired(mark - self.grace_ms, self._cursor, self.slice_size)
        self._cursor = b"" if cursor is None else cursor
