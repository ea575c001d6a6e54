"""The store package's public surface, pinned: other packages import only these."""

from __future__ import annotations

from collections.abc import MutableMapping
from pathlib import Path

import store
from store import State, Store, TaskStore


def test_public_names_are_pinned() -> None:
    assert sorted(store.__all__) == sorted([
        "Change", "Changes", "Key", "Offsets", "State", "Store", "StoreCorruptError", "StoreError",
        "StoreLockedError", "TaskStore", "changelog_offset", "changelog_offset_record",
        "check_changelog_key", "decode_changelog", "decode_key", "decode_value", "encode_changelog",
        "encode_key", "encode_value",
        "task_store_path", "write_encoded_sst", "write_sst",
    ])
    for name in store.__all__:
        assert getattr(store, name) is not None


def test_error_hierarchy() -> None:
    assert issubclass(store.StoreLockedError, store.StoreError)
    assert issubclass(store.StoreCorruptError, store.StoreError)


def test_task_store_has_every_method_of_the_protocol(tmp_path: Path) -> None:
    wanted = {n for n in dir(Store) if not n.startswith("_")}
    with TaskStore(tmp_path / "s") as opened:
        assert wanted <= set(dir(opened))


def test_task_store_holds_one_state_mapping(tmp_path: Path) -> None:
    with TaskStore(tmp_path / "s") as opened:
        state = opened.state
        assert state is opened.state
        assert isinstance(state, MutableMapping) and isinstance(state, State)
