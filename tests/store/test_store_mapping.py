"""The store as the `state` mapping: CRUD, read-your-writes, ordered iteration."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

import pytest

from store import StoreError, TaskStore

StoreFactory = Callable[..., TaskStore]

VALUES: list[Any] = [0, 2**70, -3, 1.25, True, None, "s", [1, [2]], {"a": {"b": None}},
                     [2**70, {"big": -(2**80)}]]


def test_is_a_mutable_mapping(store: TaskStore) -> None:
    assert isinstance(store.state, MutableMapping)


def test_crud_before_and_after_commit(store_factory: StoreFactory) -> None:
    store = store_factory()
    store.state[b"a"] = 1
    store.state.put("b", 2)
    state = store.state
    assert state[b"a"] == 1 and state.get("b") == 2 and state.get("zz", "dflt") == "dflt"
    store.commit({"t:0": 1})
    assert store.state[b"a"] == 1 and "b" in store.state and store.state.contains("b")
    del store.state[b"a"]
    store.state.delete("b")
    store.state.delete("never-there")
    assert b"a" not in store.state and store.state.get("b") is None
    with pytest.raises(KeyError):
        store.state[b"a"]
    with pytest.raises(KeyError):
        del store.state["b"]
    store.commit({"t:0": 2})
    store.close()
    reopened = store_factory()
    assert dict(reopened.state.items()) == {}


@pytest.mark.parametrize("value", VALUES)
def test_json_values_in_overlay_and_after_commit(store: TaskStore, value: Any) -> None:
    store.state["k"] = value
    assert store.state["k"] == value and "k" in store.state
    store.commit({})
    assert store.state["k"] == value and "k" in store.state


def test_nan_reads_back_as_stored_null_even_before_commit(store: TaskStore) -> None:
    store.state["f"] = float("nan")
    assert store.state["f"] is None


def test_bytes_and_str_keys_are_separate(store: TaskStore) -> None:
    store.state[b"k"] = "from bytes"
    store.state["k"] = "from str"
    store.commit({})
    assert store.state[b"k"] == "from bytes" and store.state["k"] == "from str"
    assert [type(k) for k in store.state] == [bytes, str]


def test_key_subclasses_and_buffers_are_normalised(store: TaskStore) -> None:
    class Name(str):
        pass

    store.state[Name("n")] = 1
    store.state[bytearray(b"b")] = 2  # type: ignore[index]
    assert [(k, type(k)) for k in store.state] == [(b"b", bytes), ("n", str)]
    store.commit({})
    assert store.state["n"] == 1 and store.state[b"b"] == 2


@pytest.mark.parametrize("key", [None, 1, 2.5])
def test_bad_keys_raise_type_error(store: TaskStore, key: Any) -> None:
    with pytest.raises(TypeError, match="bytes or str"):
        store.state[key] = 1
    with pytest.raises(TypeError, match="bytes or str"):
        store.state.get(key)
    assert key not in store.state
    store.commit({})  # the failed write left nothing behind


def test_unencodable_value_raises_and_leaves_nothing(store: TaskStore) -> None:
    with pytest.raises(TypeError):
        store.state["k"] = {1: "int key"}
    with pytest.raises(TypeError):
        store.state["k"] = b"bytes"
    assert "k" not in store.state


def test_a_value_changed_in_place_is_written_back_at_commit(store: TaskStore) -> None:
    """A list or dict read from the state (or assigned to it) is the state's own value
    until the commit: changing it in place is a write, whether it came from the overlay
    or from RocksDB (store/_overlay.py, live entries)."""
    items = [1]
    store.state["list"] = items
    items.append(2)
    got = store.state["list"]
    got.append(3)
    assert store.state["list"] is got and got == [1, 2, 3]
    store.commit({})
    store.state["list"].append(4)
    store.state.setdefault("new", []).append("x")
    store.state.setdefault("counts", {})["n"] = 1
    store.commit({})
    assert dict(store.state.items()) == {"counts": {"n": 1}, "list": [1, 2, 3, 4], "new": ["x"]}


def test_a_value_only_read_is_not_written_again(store: TaskStore) -> None:
    store.state["d"] = {"n": 1}
    store.commit({})
    assert store.state["d"] == {"n": 1}
    assert len(store.changes()) == 0      # no changelog record, no write


def test_a_tuple_reads_back_as_a_list_before_and_after_the_commit(store: TaskStore) -> None:
    store.state["t"] = (1, 2)
    assert store.state["t"] == [1, 2]
    store.state["t"].append(3)
    store.commit({})
    assert store.state["t"] == [1, 2, 3]


def test_a_change_in_place_that_json_cannot_hold_fails_the_commit(store: TaskStore) -> None:
    store.state["d"] = {"n": 1}
    store.state["d"]["s"] = {1, 2}
    with pytest.raises(StoreError, match="'d'"):
        store.commit({})
    store.abort()
    assert "d" not in store.state


def test_a_rolled_back_record_undoes_its_changes_in_place(store: TaskStore) -> None:
    store.state["d"] = {"n": 1}
    store.commit({})
    store.begin_record()
    store.state["d"]["n"] += 1                  # record 1 succeeds
    store.begin_record()
    store.state["d"]["n"] += 10                 # record 2 fails
    store.state.setdefault("e", []).append(1)
    store.rollback_record()
    assert store.state["d"] == {"n": 2} and "e" not in store.state
    store.commit({})
    assert store.state["d"] == {"n": 2}


def test_overlay_reads_its_own_writes_and_deletes(store: TaskStore) -> None:
    store.state["a"] = 1
    store.state["b"] = 2
    store.commit({})
    store.state["a"] = 10
    del store.state["b"]
    store.state["c"] = 3
    assert store.state["a"] == 10 and "b" not in store.state and store.state["c"] == 3
    assert dict(store.state.items()) == {"a": 10, "c": 3}
    store.abort()
    assert dict(store.state.items()) == {"a": 1, "b": 2}


def test_iteration_is_ordered_by_encoded_key_merging_overlay(store: TaskStore) -> None:
    for key in ["d", b"b", "b", b"\x00", b"z"]:
        store.state[key] = 0
    store.commit({"t:0": 5})
    store.state["a"] = 1
    store.state["c"] = 1
    store.state[b"a"] = 1
    del store.state["d"]
    del store.state[b"z"]
    expected: list[bytes | str] = [b"\x00", b"a", b"b", "a", "b", "c"]
    assert list(store.state) == expected
    assert list(store.state.keys()) == expected
    assert [k for k, _ in store.state.items()] == expected
    assert list(store.state.values()) == [0, 1, 0, 1, 0, 1]
    assert len(store.state) == 6


def test_iteration_never_shows_metadata(store: TaskStore) -> None:
    store.commit({"t:0": 3, "u:1": 4})
    assert list(store.state) == [] and len(store.state) == 0
    store.state[""] = 1
    store.commit({"t:0": 4})
    assert list(store.state.items()) == [("", 1)]


def test_iteration_snapshots_the_overlay(store: TaskStore) -> None:
    store.state["a"] = 1
    store.state["b"] = 2
    seen = []
    for key in store.state:
        seen.append(key)
        store.state["z"] = 9  # no "dict changed size during iteration"
    assert seen == ["a", "b"]


def test_mixin_methods_work(store: TaskStore) -> None:
    store.state.update({"a": 1, "b": 2})
    assert store.state.setdefault("a", 5) == 1 and store.state.setdefault("c", 3) == 3
    assert store.state.pop("b") == 2 and store.state.pop("b", None) is None
    assert dict(store.state) == {"a": 1, "c": 3}
    assert store.state == {"a": 1, "c": 3}


def test_many_keys_round_trip_in_order(store_factory: StoreFactory) -> None:
    store = store_factory()
    for i in range(2000):
        store.state[b"%05d" % i] = i
    store.commit({"t:0": 2000})
    store.close()
    reopened = store_factory()
    assert list(reopened.state.items()) == [(b"%05d" % i, i) for i in range(2000)]


def test_the_changelog_carries_what_the_commit_writes(store: TaskStore) -> None:
    """changes() (the changelog's records) holds each changed-in-place value as the
    commit writes it, and nothing for a value only read."""
    store.state["read"] = {"n": 1}
    store.state["changed"] = [1]
    store.commit({})
    assert store.state["read"] == {"n": 1}
    store.state["changed"].append(2)
    store.state.setdefault("new", {})["k"] = "v"
    changes = store.changes()
    assert list(changes) == [(b"\x02changed", b"[1,2]"), (b"\x02new", b'{"k":"v"}')]
    store.commit({"t:0": 5}, changes)
    assert dict(store.state.items()) == {"changed": [1, 2], "new": {"k": "v"}, "read": {"n": 1}}
    assert store.applied_offsets() == {"t:0": 5}
