"""Entries with a TTL and prefix scans read the same on the consumer path (the task
store, real RocksDB, committing as it goes) as in the Spark fold (FoldState) and in a
plain model of the rules (store/state.py), whatever the steps, the clock (out of order
too) and the records that fail: so a Spark bulk catch-up builds the state the owner
built."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, example, given, settings

from processor.spark import FoldState
from store import TaskStore

KEYS = st.sampled_from(["s/a", "s/b", "s", b"s/\xff"])
PREFIXES = st.sampled_from(["s/", "s", "", b"s/", b"", "t/", "u"])
VALUES = st.one_of(st.integers(-5, 5), st.lists(st.integers(0, 3), max_size=2))
STEPS = st.lists(st.one_of(
    st.tuples(st.just("clock"), st.integers(-1, 40)),         # a record at this time
    st.tuples(st.just("put"), KEYS, VALUES, st.one_of(st.none(), st.integers(1, 20))),
    st.tuples(st.just("put"), KEYS, VALUES, st.integers(1, 20)),
    st.tuples(st.just("get"), KEYS),
    st.tuples(st.just("in"), KEYS),
    st.tuples(st.just("del"), KEYS),
    st.tuples(st.just("append"), KEYS),                        # a read list changed in place
    st.tuples(st.just("scan"), PREFIXES),
    st.tuples(st.just("scan_write"), PREFIXES),                # writes as it scans
    st.tuples(st.just("len")),
    st.tuples(st.just("fail")),                                # the record raises
    st.tuples(st.just("commit")),
), max_size=40)


class Model:
    """The rules, plainly: key -> (value, expiry or None); a read at `now` that finds
    an entry expired deletes it; a record that fails is undone."""

    def __init__(self) -> None:
        self.entries: dict[Any, tuple[Any, int | None]] = {}
        self.saved: dict[Any, tuple[Any, int | None]] = {}
        self.now: int | None = None

    def begin(self, now: int | None) -> None:
        self.saved, self.now = dict(self.entries), now

    def rollback(self) -> None:
        self.entries = dict(self.saved)

    def live(self, key: Any) -> bool:
        if key not in self.entries:
            return False
        expiry = self.entries[key][1]
        if expiry is not None and self.now is not None and expiry <= self.now:
            del self.entries[key]
            return False
        return True

    def keys_under(self, prefix: Any) -> list[Any]:
        return sorted(k for k in self.entries if type(k) is type(prefix) and k.startswith(prefix))


def _step(state: Any, model: Model | None, step: tuple[Any, ...]) -> Any:
    """One step on a state (the store or the fold's), or on the model when `model`."""
    op, *args = step
    if op == "put":
        key, value, ttl = args
        if model is not None:
            model.entries[key] = (list(value) if isinstance(value, list) else value,
                                  None if ttl is None else model.now + ttl)
        else:
            state.put(key, list(value) if isinstance(value, list) else value, ttl_ms=ttl)
        return None
    if op == "get":
        if model is not None:
            return model.entries[args[0]][0] if model.live(args[0]) else "absent"
        return state.get(args[0], "absent")
    if op == "in":
        return model.live(args[0]) if model is not None else args[0] in state
    if op == "del":
        if model is not None:
            if model.live(args[0]):
                del model.entries[args[0]]
        else:
            state.pop(args[0], None)
        return None
    if op == "append":
        if model is not None:
            if model.live(args[0]):
                value, expiry = model.entries[args[0]]
                if isinstance(value, list) and expiry is None:   # a TTL'd value is a copy
                    model.entries[args[0]] = ([*value, 7], None)
        else:
            value = state.get(args[0])
            if isinstance(value, list):
                value.append(7)
        return None
    if op == "len":
        if model is not None:
            now = model.now
            return sum(1 for _, e in model.entries.values()
                       if e is None or now is None or e > now)
        return len(state)
    raise AssertionError(op)


def _scan(state: Any, model: Model | None, prefix: Any, write: bool,
          began: list[Any]) -> list[Any]:
    """A scan's pairs; `write`: each key met writes "w" to the next key the scan began
    with (seen changed when reached, unless deleted) and "new" to a key of its own
    (never seen by this scan). `began`: the keys under the prefix when it began."""
    seen: list[Any] = []
    pairs = ((k, model.entries[k][0]) for k in began if model.live(k)) \
        if model is not None else state.scan(prefix)
    for key, value in pairs:
        seen.append((key, value))
        if write:
            i = began.index(key)
            target = model.entries if model is not None else None
            for name, written in ([(began[i + 1], "w")] if i + 1 < len(began) else []) \
                    + [(key + key[:1], "new")]:
                if target is not None:
                    target[name] = (written, None)
                else:
                    state[name] = written
    return seen


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
# the read that finds an entry expired deletes it: an older record then misses it too
@example(steps=[("clock", 10), ("put", "s/a", 1, 5), ("clock", 20), ("get", "s/a"),
                ("clock", 12), ("get", "s/a")])
@example(steps=[("clock", 10), ("put", "s/a", [1], 5), ("put", "s/b", 2, None),
                ("clock", 20), ("scan", "s/"), ("clock", 12), ("in", "s/a"),
                ("scan_write", "s"), ("fail",), ("len",), ("scan", "")])
def test_the_store_the_fold_and_the_model_agree(tmp_path: Path, steps: list[Any]) -> None:
    path = tmp_path / f"db-{len(list(tmp_path.iterdir()))}"
    fold, model = FoldState(), Model()
    with TaskStore(path) as store:
        store.begin_record()
        fold.begin()
        for step in steps:
            if step[0] == "clock":
                store.begin_record()
                fold.begin()
                model.begin(step[1])
                store.state.now = fold.now = step[1]
                continue
            if step[0] == "fail":
                store.rollback_record()
                fold.rollback()
                model.rollback()
                continue
            if step[0] == "commit":                 # between records
                store.commit({"t:0": 1})
                store.begin_record()
                fold.begin()
                model.begin(model.now)
                continue
            if model.now is None and step[0] == "put" and step[3] is not None:
                continue                            # a TTL needs a record's time
            if step[0] in ("scan", "scan_write"):
                began = model.keys_under(step[1])
                write = step[0] == "scan_write"
                want = _scan(None, model, step[1], write, began)
                assert _scan(store.state, None, step[1], write, began) == want, step
                assert _scan(fold, None, step[1], write, list(began)) == want, step
                continue
            want = _step(None, model, step)
            assert _step(store.state, None, step) == want, step
            assert _step(fold, None, step) == want, step
        for prefix in ("", b""):
            want = [(k, model.entries[k][0]) for k in model.keys_under(prefix)
                    if model.live(k)]
            assert list(store.state.scan(prefix)) == want
            assert list(fold.scan(prefix)) == want
