"""The `Record`s of a poll batch, made a run of one partition at a time.

The consumer returns a batch in runs of one partition. Asking each message for its
key, value, offset, timestamp and headers one call at a time, in a Python loop, cost
about as much as the consume itself; here each field is gathered for a whole run by
`map` over the `Message` methods, in C, and the records are made from those lists. A
run that needs a closer look (an error message among it, two topics, a record without
a key, which may be a barrier marker) is left to the caller's per-record loop.
"""

from __future__ import annotations

import gc
import itertools
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from operator import itemgetter, methodcaller
from typing import Any

from confluent_kafka import Message

from processor.job import Headers, Record

__all__ = ["Run", "collector_paused", "new_record", "new_records", "offsets_of", "plain_runs",
           "run_records", "window"]

_RECORD_FIELDS = ("key", "value", "topic", "partition", "offset", "timestamp", "headers")
_METHODS = ("key", "value", "offset", "timestamp", "headers", "error", "topic", "partition")
# the Message methods, unbound (the fastest call there is from map), or for anything
# else that has them (a test's stand-in) a methodcaller of each
_ACCESSORS: dict[type, tuple[Callable[[Any], Any], ...]] = {
    Message: tuple(getattr(Message, m) for m in _METHODS)}
_ANY = tuple(methodcaller(m) for m in _METHODS)
_SECOND = itemgetter(1)

# a run of one partition's messages, and whether it is plain: one topic, no error message
Run = tuple[list[Message], bool]


Columns = tuple[Iterable[bytes | None], Iterable[bytes | None], Iterable[str], Iterable[int],
                Iterable[int], Iterable[int], Iterable[Headers]]


def _record_factories() -> tuple[
        Callable[[bytes | None, bytes | None, str, int, int, int, Headers], Record],
        Callable[[int, Columns], list[Record]]]:
    """Constructors of `Record` for the hot loops: one record, and many from columns.

    A frozen dataclass's __init__ fills each field through object.__setattr__, a call
    per field; these fill the slots through their descriptors instead and return the
    same objects (same type, equality, hash, repr, still frozen): one record at a time,
    or a batch's a field at a time (`map` over each slot's setter, no Python step per
    record), the cheapest (docs/performance.md, "Measurements behind the code"). Should
    Record ever gain a field, a __post_init__ or lose its slots, Record itself is used.
    """
    if (tuple(Record.__dataclass_fields__) != _RECORD_FIELDS
            or getattr(Record, "__slots__", None) != _RECORD_FIELDS
            or hasattr(Record, "__post_init__")):
        return Record, lambda n, columns: list(map(Record, *columns))
    setters = tuple(Record.__dict__[f].__set__ for f in _RECORD_FIELDS)
    set_key, set_value, set_topic, set_partition, set_offset, set_timestamp, set_headers = (
        setters)
    new = object.__new__
    drain: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend

    def make(key: bytes | None, value: bytes | None, topic: str, partition: int, offset: int,
             timestamp: int, headers: Headers) -> Record:
        record = new(Record)
        set_key(record, key)
        set_value(record, value)
        set_topic(record, topic)
        set_partition(record, partition)
        set_offset(record, offset)
        set_timestamp(record, timestamp)
        set_headers(record, headers)
        return record

    def make_many(n: int, columns: Columns) -> list[Record]:
        records: list[Record] = list(map(new, itertools.repeat(Record, n)))
        for setter, column in zip(setters, columns, strict=True):
            drain(map(setter, records, column))
        return records

    return make, make_many


new_record, new_records = _record_factories()


def plain_runs(messages: Sequence[Message], errors: bool = True) -> Iterator[Run]:
    """`messages` in runs of one partition number, each with whether it is plain (all
    of one topic, no error message: what `run_records` takes). `errors`: False when
    the caller's batch holds none (the runtime took them out), so none is looked for."""
    if not messages:
        return
    get = _ACCESSORS.get(messages[0].__class__, _ANY)
    error, topic = get[5], get[6]
    for _, group in itertools.groupby(messages, get[7]):
        run = list(group)
        yield run, not (errors and any(map(error, run))) and len(set(map(topic, run))) == 1


def window(offsets: Sequence[int], start: int, stop: int) -> tuple[int, int]:
    """The index range [lo, hi) of the ascending `offsets` that lie in [start, stop)."""
    lo = 0 if offsets[0] >= start else bisect_left(offsets, start)
    hi = len(offsets) if offsets[-1] < stop else bisect_left(offsets, stop)
    return lo, hi


def offsets_of(run: Sequence[Message]) -> list[int]:
    """The offsets of a run, ascending (a partition's records come in order)."""
    return list(map(_ACCESSORS.get(run[0].__class__, _ANY)[2], run))


def run_records(run: Sequence[Message], offsets: Sequence[int]) -> list[Record] | None:
    """The records of a plain run (`offsets`: its offsets), or None when one of them has
    no key: that one may be a barrier marker, which the per-record loop looks at."""
    first = run[0]
    key, value, _, timestamp, headers_of = _ACCESSORS.get(first.__class__, _ANY)[:5]
    keys = list(map(key, run))
    if None in keys:
        return None
    n = len(keys)
    headers = list(map(headers_of, run))
    return new_records(n, (keys, map(value, run), itertools.repeat(first.topic(), n),
                           itertools.repeat(first.partition(), n), offsets,
                           map(_SECOND, map(timestamp, run)),
                           itertools.repeat((), n) if headers.count(None) == n
                           else [h or () for h in headers]))


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while a batch is processed.

    A batch keeps thousands of container objects alive at once (its records, its
    outputs, the store's undo log): each collection the batch's allocations trigger
    finds them alive and promotes them, until a full collection walks the whole heap.
    They are freed by reference counting when the batch ends, so the collector runs
    after it instead, finding them gone (the first allocation after re-enabling it
    triggers the collection that was due).
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
