"""Split children on the parent's side: consume them embedded, release them, prune them.

Until a split child first activates, the owner of its parent consumes the child's
partitions inside the parent task (the coordinator's reply lists it in `embedded`).
When the child's handoff reaches the release, the child leaves `embedded`: the parent
commits, stops consuming the child's partitions and reports the child `released` with
their final T1. When the child is live (it leaves `pending`), the parent drops the
child's keys from its store, a slice per loop turn, where it can tell them apart
(state keyed by record key; see orchestrator/wire/partitioners.py). A key named
`<record key>/<more>` (a prefix scan's entry, docs/jobs.md) may be the parent's own
although the whole name hashes to the child: a key is dropped only when each of its
names up to a "/" and the whole key hash to the child (`child_key`), so the parent never
loses an entry of its own keys; an entry of the child's it cannot tell stays, unread.
The timers of the child's keys went to the child's partitions at the barrier marker
(processor/timers.py): those partitions' clocks and timers are dropped whole.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from typing import Any

from orchestrator.wire.partitioners import home_partition, state_key_bytes
from orchestrator.wire.partitions import split_partition
from processor.active import ActiveTask
from processor.sources import consumed_partitions, topic_counts
from processor.timers import child_timer_key

__all__ = ["SplitChildren", "child_key"]

log = logging.getLogger("baton.processor.runtime")

# keys of a live split child dropped from its parent's store per loop turn: small enough
# that the parent's own records do not wait long behind it
_PRUNE_SLICE = 5000

Release = Callable[[str, str], None]


def child_key(raw: bytes, partitioner: str, homes: Sequence[tuple[str, int]],
              counts: Mapping[str, int]) -> bool:
    """Whether the state key `raw` is the split child's, whose partitions are `homes`
    ((topic, number), `counts` the topics' partition counts): the whole key and each of
    its names up to a "/" (the record key of an entry named `<record key>/<more>`) are
    homed on the child's partitions. A key one of whose names is homed elsewhere may
    be another task's, and is kept."""
    names = [raw[:i] for i in range(1, len(raw)) if raw[i:i + 1] == b"/"]
    return all(any(home_partition(partitioner, name, counts[t]) == n for t, n in homes)
               for name in [*names, raw])


class SplitChildren:
    """The split children this processor's parents consume, or have just released."""

    def __init__(self, partitioner: str) -> None:
        self.partitioner = partitioner
        self.embedded: dict[str, str] = {}        # child -> the parent consuming it
        self.pending: dict[str, str] = {}         # child not live yet -> its parent
        self._left: dict[str, str] = {}           # released child -> the parent it left
        self._pruning: dict[str, tuple[str, Iterator[list[Any]]]] = {}

    def consumed(self, task: str, model: Mapping[str, list[str]]) -> list[str]:
        """`task`'s partitions plus those of the children embedded in it."""
        return consumed_partitions(task, model, self.embedded)

    def update(self, embedded: Mapping[str, str], pending: Mapping[str, str],
               active: Mapping[str, ActiveTask], model: Mapping[str, list[str]],
               release: Release, released: Container[str]) -> None:
        """Take the reply's maps: release the pending children that are no longer
        embedded (level-triggered: also one whose leaving this processor never saw,
        having been frozen or busy meanwhile), prune those gone live."""
        live = [c for c in self.pending if c not in pending]
        self.embedded, self.pending = dict(embedded), dict(pending)
        for child, parent in self.pending.items():
            if child in self.embedded or child in released:
                continue
            release(child, parent)
            if parent in active:
                self._left[child] = parent
        for child in live:
            parent = self._left.pop(child, "")
            if parent in active:
                self._pruning[child] = (parent, self._slices(active[parent], child, model))

    def _slices(self, parent: ActiveTask, child: str,
                model: Mapping[str, list[str]]) -> Iterator[list[Any]]:
        counts = topic_counts(model)
        homes = [split_partition(p) for p in model.get(child, ())]
        partitioner = self.partitioner

        partitions = model.get(child, ())

        def belongs(key: Any) -> bool:
            raw = state_key_bytes(key)
            if raw is None:
                return False
            timers = child_timer_key(raw, partitions)     # the child's clocks and timers
            return timers if timers is not None else child_key(raw, partitioner, homes,
                                                                  counts)

        batch: list[Any] = []
        for key in list(parent.store.state):
            if belongs(key):
                batch.append(key)
            if len(batch) >= _PRUNE_SLICE:
                yield batch
                batch = []
        yield batch

    def prune(self, active: Mapping[str, ActiveTask]) -> None:
        """Drop one slice of each live child's keys from its parent's open transaction
        (written to RocksDB with the parent's next commit)."""
        for child, (parent, slices) in list(self._pruning.items()):
            task = active.get(parent)
            batch = next(slices, None) if task is not None else None
            if task is None or batch is None:
                del self._pruning[child]
                if task is not None:
                    log.info("task %r: keys of split child %r dropped", parent, child)
                continue
            for key in batch:
                task.store.state.pop(key, None)
