"""Prefix scans on the task store, real RocksDB: what a prefix selects for str and bytes
keys, key order, the open transaction merged over what RocksDB holds (writes, deletes,
values changed in place), writes made while a scan runs, expired entries."""

from __future__ import annotations

import pytest

from store import TaskStore
from store.state import prefix_bounds


def test_a_prefix_selects_keys_of_its_own_type_in_key_order(store: TaskStore) -> None:
    for key in ["a/2", "a/10", "a/1", "a", "ab/1", "b/1", "é/1", "a/\U0001f600"]:
        store.state[key] = key
    for key in [b"a/1", b"a/\xff", b"a", b"a0"]:
        store.state[key] = 0
    store.commit({"t:0": 1})
    assert [k for k, _ in store.state.scan("a/")] == ["a/1", "a/10", "a/2", "a/\U0001f600"]
    assert [k for k, _ in store.state.scan("a")] == ["a", "a/1", "a/10", "a/2", "a/\U0001f600",
                                              "ab/1"]
    assert [k for k, _ in store.state.scan(b"a/")] == [b"a/1", b"a/\xff"]
    assert [k for k, _ in store.state.scan(b"a")] == [b"a", b"a/1", b"a/\xff", b"a0"]
    state = store.state
    assert [k for k, _ in state.scan("")] == sorted(k for k in state if isinstance(k, str))
    assert len(list(store.state.scan(b""))) == 4
    assert list(store.state.scan("é")) == [("é/1", "é/1")]
    assert list(store.state.scan("z")) == []


def test_bounds_of_a_prefix_ending_in_0xff() -> None:
    assert prefix_bounds(b"a\xff") == (b"\x01a\xff", b"\x01b")
    assert prefix_bounds(b"\xff\xff") == (b"\x01\xff\xff", b"\x02")
    assert prefix_bounds("") == (b"\x02", b"\x03")
    with pytest.raises(TypeError, match="prefix"):
        prefix_bounds(1)        # type: ignore[arg-type]


def test_the_open_transaction_is_merged_over_rocksdb(store: TaskStore) -> None:
    store.state.update({"s/1": 1, "s/2": 2, "s/3": 3, "t/1": 9})
    store.commit({"t:0": 1})
    store.state["s/0"] = 0                                # new, before every stored key
    del store.state["s/2"]                                # deleted, not yet committed
    store.state["s/3"] = 30                               # changed
    store.state["s/4"] = [4]                              # new, after every stored key
    assert list(store.state.scan("s/")) == [("s/0", 0), ("s/1", 1), ("s/3", 30), ("s/4", [4])]
    store.abort()
    assert list(store.state.scan("s/")) == [("s/1", 1), ("s/2", 2), ("s/3", 3)]


def test_a_list_a_scan_yields_is_the_states_own(store: TaskStore) -> None:
    store.state["s/a"] = [1]
    store.commit({"t:0": 1})
    for _, value in store.state.scan("s/"):
        value.append(2)
    store.commit({"t:0": 2})
    assert store.state["s/a"] == [1, 2]


def test_writes_while_scanning_keys_taken_at_the_start_values_when_reached(
        store: TaskStore) -> None:
    store.state.update({"s/1": 1, "s/2": 2, "s/3": 3})
    store.commit({"t:0": 1})
    store.state["s/4"] = 4                                # in the overlay when the scan begins
    seen = []
    for key, value in store.state.scan("s/"):
        seen.append((key, value))
        if key == "s/1":
            store.state["s/2"] = 20                       # reached later: the new value
            del store.state["s/3"]                        # reached later: skipped
            store.state["s/25"] = 25                      # added: not seen by this scan
            store.state["s/4"] = 40
    assert seen == [("s/1", 1), ("s/2", 20), ("s/4", 40)]
    assert [k for k, _ in store.state.scan("s/")] == ["s/1", "s/2", "s/25", "s/4"]


def test_a_scan_skips_and_deletes_expired_entries(store: TaskStore) -> None:
    store.state.now = 100
    store.state.put("s/old", 1, ttl_ms=10)
    store.state.put("s/new", 2, ttl_ms=1000)
    store.state["s/kept"] = 3
    store.commit({"t:0": 1})
    store.state.now = 110
    assert list(store.state.scan("s/")) == [("s/kept", 3), ("s/new", 2)]
    assert list(store.changes()) == [(b"\x02s/old", None)]


def test_a_scan_of_a_closed_store_fails(store: TaskStore) -> None:
    store.close()
    with pytest.raises(Exception, match="closed"):
        store.state.scan("a")
