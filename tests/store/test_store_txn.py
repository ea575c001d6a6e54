"""The transaction: commit with offsets in one batch, abort, per-record undo."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from store import StoreError, TaskStore

StoreFactory = Callable[..., TaskStore]


def test_applied_offsets_survive_reopen_and_merge(store_factory: StoreFactory) -> None:
    store = store_factory()
    assert store.applied_offsets() == {}
    store.state["a"] = 1
    store.commit({"t:0": 10, "t:1": 20})
    store.commit({"t:1": 25, "u:0": 1})  # t:0 not mentioned: keeps 10
    store.close()
    reopened = store_factory()
    assert reopened.applied_offsets() == {"t:0": 10, "t:1": 25, "u:0": 1}
    assert reopened.state["a"] == 1


def test_offsets_are_invisible_to_the_mapping(store: TaskStore) -> None:
    store.commit({"t:0": 1})
    assert list(store.state) == [] and "t:0" not in store.state and b"offset:t:0" not in store.state


def test_commit_with_bad_offsets_writes_nothing_and_keeps_the_overlay(
        store: TaskStore) -> None:
    store.state["a"] = 1
    with pytest.raises(ValueError, match="t:0"):
        store.commit({"t:0": -1})
    assert store.applied_offsets() == {}
    assert store.state["a"] == 1
    store.abort()
    assert "a" not in store.state
    store.state["a"] = 2
    store.commit({"t:0": 1})
    assert store.state["a"] == 2 and store.applied_offsets() == {"t:0": 1}


def test_abort_drops_writes_and_deletes(store: TaskStore) -> None:
    store.state["keep"] = 1
    store.commit({"t:0": 1})
    store.state["keep"] = 2
    store.state["new"] = 3
    del store.state["keep"]
    store.abort()
    assert dict(store.state.items()) == {"keep": 1}
    store.commit({"t:0": 2})
    assert dict(store.state.items()) == {"keep": 1}
    assert store.applied_offsets() == {"t:0": 2}


def test_commit_of_nothing_is_fine(store: TaskStore) -> None:
    store.commit({})
    assert store.applied_offsets() == {}


def test_aborted_transaction_never_reaches_disk(store_factory: StoreFactory) -> None:
    store = store_factory()
    store.state["a"] = 1
    store.commit({"t:0": 1})
    store.state["a"] = 2
    store.state["b"] = 2
    store.close()  # closing drops the open transaction
    reopened = store_factory()
    assert dict(reopened.state.items()) == {"a": 1}
    assert reopened.applied_offsets() == {"t:0": 1}


def test_rollback_record_undoes_only_the_failed_record(store: TaskStore) -> None:
    store.state["x"] = 0
    store.state["gone"] = 0
    store.commit({"t:0": 1})
    store.begin_record()
    store.state["x"] = 1
    store.state["y"] = 1
    store.begin_record()  # record 2 fails after several writes
    store.state["x"] = 2
    store.state["x"] = 3
    store.state["y"] = 2
    store.state["z"] = 2
    del store.state["gone"]
    store.rollback_record()
    assert dict(store.state.items()) == {"x": 1, "y": 1, "gone": 0}
    store.commit({"t:0": 3})
    assert dict(store.state.items()) == {"x": 1, "y": 1, "gone": 0}


def test_rollback_restores_container_values(store: TaskStore) -> None:
    store.begin_record()
    store.state["l"] = [1]
    store.begin_record()
    store.state["l"] = store.state["l"] + [2]
    store.rollback_record()
    assert store.state["l"] == [1]


def test_rollback_after_commit_touches_nothing(store: TaskStore) -> None:
    store.begin_record()
    store.state["a"] = 1
    store.commit({"t:0": 1})
    store.rollback_record()
    assert store.state["a"] == 1


def test_rollback_without_begin_record_is_an_error(store: TaskStore) -> None:
    store.state["a"] = 1
    with pytest.raises(StoreError, match="begin_record"):
        store.rollback_record()
    assert store.state["a"] == 1
