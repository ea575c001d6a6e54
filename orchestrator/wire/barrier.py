"""Expansion barriers, settled in-band: the marker record and the misrouting rule.

Rules and theory of operation
-----------------------------
When an input grows from n to k*n partitions, each new partition ``q`` (the *child*)
has a parent ``q mod n``. Producers learn the new count only when they refresh their
metadata, so for a while they keep writing the child's keys to the parent. The
coordinator therefore waits ``[job] expansion_grace_ms`` after it saw the expansion,
then *settles* the barrier: inside one transaction of the coordinator stream it writes
a **barrier marker** to the end of the parent partition and the job model that names
the marker's offset as the child's barrier. Both commit or neither does.

The marker is an ordinary record of the input topic (no key, a JSON value, the header
``baton.barrier``) so it is ordered with the records around it: every reader of the
parent (the active owner, a warmup, a standby, Spark, `baton audit`) meets it at the
same position, and an owner that reaches it before its heartbeat brought the new model
learns the barrier from the marker itself. No reader ever hands a marker to
``process()``.

With the barrier at offset ``b`` of parent ``p`` for child ``c``:

* records of ``p`` before ``b`` are the parent's; a split child's replay reads them
  through its key filter (its S2);
* a record of ``p`` after ``b`` whose key the producers' partitioner now sends to ``c``
  (or to a descendant of ``c``) came from a producer staler than the grace: it is
  **misrouted**. It is never applied to ``p``'s state: the active owner forwards it to
  ``c`` inside its transaction, and every replay of ``p`` skips it (its copy on ``c`` is
  what counts);
* ``c`` itself is consumed only once ``p`` has passed ``b`` (the owner holds it until
  then), so a key's records from producers at most ``expansion_grace_ms`` stale keep
  their order.

Until it is settled a child's barrier is its parent's end when the expansion was seen
(a *floor*: the settled barrier is never lower), so a replay may read the parent that
far but no further, and the child's lag is unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from orchestrator.wire.partitioners import partitioner
from orchestrator.wire.partitions import split_partition

__all__ = ["FORWARDED_HEADER", "MARKER_HEADER", "BarrierInfo", "Marker", "Reroute", "decode_marker",
           "encode_marker", "input_records", "reroutes", "skip_marker"]

# the header that marks a barrier record; its value is the job's name, so a job never
# takes another job's markers (two Baton jobs may read the same input topic)
MARKER_HEADER = "baton.barrier"
# the header a forwarded copy gains: where its original is ("topic:N@offset"), so a
# reader that recomputes the job from its input (an audit, a test's oracle) counts the
# record once, at the copy
FORWARDED_HEADER = "baton.forwarded"


@dataclass(frozen=True)
class BarrierInfo:
    """A child partition's barrier as processors hold it.

    Attributes:
        parent: the partition the child's keys lived on before the expansion.
        offset: the marker's offset once settled; before, the parent's end when the
            expansion was seen (a floor the settled barrier never falls below).
        settled: whether `offset` is the marker's.
    """

    parent: str
    offset: int
    settled: bool = True


@dataclass(frozen=True)
class Marker:
    """What a barrier marker says: the children it settles on its partition."""

    job: str
    parent: str
    children: tuple[str, ...]
    count: int          # the topic's partition count the barrier was settled under


def input_records(messages: Iterable[Any]) -> list[Any]:
    """The records a job's input holds for it, in the order given: no barrier marker
    (any job's), and no original of a forwarded copy (the copy stands for it)."""
    kept, forwarded = [], set()
    for msg in messages:
        headers = msg.headers() or ()
        names = {name: raw for name, raw in headers}
        if MARKER_HEADER in names:
            continue
        if FORWARDED_HEADER in names:
            forwarded.add(bytes(names[FORWARDED_HEADER] or b"").decode())
        kept.append(msg)
    return [m for m in kept
            if f"{m.topic()}:{m.partition()}@{m.offset()}" not in forwarded]


def skip_marker(job: str, msg: Any, partition: str,
                on_marker: Callable[[str, int, Marker], None]) -> bool:
    """Whether `msg`, a record without a key read from `partition`, is a barrier marker
    (any job's: never handed to process()). `job`'s own are passed to `on_marker`: one
    read before the model names it settles its barrier all the same, since it commits
    with the model."""
    marker = decode_marker(job, msg.headers(), msg.value())
    if isinstance(marker, Marker):
        on_marker(partition, msg.offset(), marker)
    return marker is not False


def encode_marker(job: str, parent: str, children: Sequence[str],
                  count: int) -> tuple[bytes, list[tuple[str, bytes]]]:
    """(value, headers) of the marker the coordinator writes to `parent`; `count` is the
    topic's partition count now (a reader whose model is older learns it here)."""
    value = orjson.dumps({"job": job, "parent": parent, "children": sorted(children),
                          "count": count})
    return value, [(MARKER_HEADER, job.encode())]


def decode_marker(job: str, headers: Sequence[tuple[str, bytes | None]] | None,
                  value: bytes | None) -> Marker | bool:
    """The marker a record without a key carries for `job`.

    Returns:
        the Marker; True for another job's marker (skip it as well: it is no input
        record); False for an ordinary record.
    """
    if not headers:
        return False
    mine = job.encode()
    for name, raw in headers:
        if name != MARKER_HEADER:
            continue
        if raw != mine:
            return True
        try:
            body = orjson.loads(value or b"{}")
            return Marker(job, str(body["parent"]), tuple(str(c) for c in body["children"]),
                          int(body["count"]))
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return True         # malformed: never an input record either
    return False


class Reroute:
    """Where the misrouted records of one partition go (see the module docstring).

    Args:
        partition: the parent partition ("topic:N").
        children: its children with a settled barrier: child -> barrier offset.
        parents: every child partition of the job -> its parent (settled or not).
        partitioner_name: the producers' partitioner name.
        count: the topic's partition count now.
    """

    def __init__(self, partition: str, children: Mapping[str, int],
                 parents: Mapping[str, str], partitioner_name: str, count: int) -> None:
        self.partition = partition
        self.topic, self.number = split_partition(partition)
        self.children = dict(children)
        self.first = min(self.children.values())     # no record before this is misrouted
        self._parents = dict(parents)
        self._hash = partitioner(partitioner_name)
        self._count = count
        self._empty_is_random = partitioner_name == "consistent_random"
        self._next: dict[int, str | None] = {}       # home partition -> child, memoised

    def target(self, key: bytes | None, offset: int) -> str | None:
        """The child partition a record at `offset` must be forwarded to, or None when
        it belongs to this partition (its barrier not passed, a key homed here or
        nowhere under this lineage, no key)."""
        if offset <= self.first or key is None or (not key and self._empty_is_random):
            return None
        home = self._hash(key, self._count)
        if home == self.number:
            return None
        try:
            child = self._next[home]
        except KeyError:
            child = self._next[home] = self._child_towards(home)
        if child is None or offset <= self.children[child]:
            return None
        return child

    def _child_towards(self, home: int) -> str | None:
        """The settled child of this partition on the way down to partition `home`."""
        current = f"{self.topic}:{home}"
        seen = {current}
        while current in self._parents:
            parent = self._parents[current]
            if parent == self.partition:
                return current if current in self.children else None
            if parent in seen:
                return None
            seen.add(parent)
            current = parent
        return None


def reroutes(partitions: Sequence[str], barriers: Mapping[str, BarrierInfo],
             partitioner_name: str, counts: Mapping[str, int]) -> dict[str, Reroute]:
    """The `Reroute` of each of `partitions` that is the parent of a settled barrier."""
    parents = {c: b.parent for c, b in barriers.items()}
    wanted = set(partitions)
    children: dict[str, dict[str, int]] = {}
    for child, info in barriers.items():
        if info.settled and info.parent in wanted:
            children.setdefault(info.parent, {})[child] = info.offset
    return {p: Reroute(p, kids, parents, partitioner_name, counts[split_partition(p)[0]])
            for p, kids in children.items()}
