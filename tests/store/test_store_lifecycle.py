"""Opening, errors an operator can act on, close, destroy, size, checkpoints."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from store import StoreCorruptError, StoreError, StoreLockedError, TaskStore

StoreFactory = Callable[..., TaskStore]
ChildFactory = Callable[..., "subprocess.Popen[str]"]


def _committed(path: Path) -> None:
    with TaskStore(path) as store:
        store.state["k"] = "v"
        store.commit({"t:0": 1})


def _data_files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in path.iterdir() if not p.name.startswith("LOG")}


def test_store_held_by_another_process_is_locked_naming_path(
        child: ChildFactory, tmp_path: Path) -> None:
    path = tmp_path / "held"
    proc = child("hold", str(path))
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    with pytest.raises(StoreLockedError) as info:
        TaskStore(path)
    message = str(info.value)
    assert str(path) in message and "lock" in message and "stop it" in message
    assert info.value.path == path
    proc.communicate(input="", timeout=30)  # release it; now it opens
    with TaskStore(path) as store:
        assert len(store.state) == 0


def test_second_open_in_the_same_process_is_locked(store_factory: StoreFactory) -> None:
    first = store_factory("db")
    with pytest.raises(StoreLockedError, match=str(first.path)):
        TaskStore(first.path)


def test_garbage_current_is_corrupt_naming_path_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "db"
    _committed(path)
    (path / "CURRENT").write_bytes(b"garbage")
    before = _data_files(path)
    with pytest.raises(StoreCorruptError) as info:
        TaskStore(path)
    assert str(path) in str(info.value) and "corrupt" in str(info.value)
    assert _data_files(path) == before  # RocksDB may rotate its info LOG, nothing else


def test_garbage_manifest_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "db"
    _committed(path)
    manifest = (path / "CURRENT").read_text().strip()
    (path / manifest).write_bytes(b"\x00garbage" * 100)
    with pytest.raises(StoreCorruptError, match=str(path)):
        TaskStore(path)


def test_missing_current_with_data_is_corrupt_not_recreated(tmp_path: Path) -> None:
    path = tmp_path / "db"
    _committed(path)
    (path / "CURRENT").unlink()
    with pytest.raises(StoreCorruptError, match="no CURRENT"):
        TaskStore(path)
    assert not (path / "CURRENT").exists()


def test_path_that_is_a_file_names_it(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(StoreError, match=f"{path} is a file"):
        TaskStore(path)
    with pytest.raises(StoreError, match="cannot create") as info:
        TaskStore(path / "under")
    assert str(path / "under") in str(info.value)


def _unwritable_dir(tmp_path: Path) -> Path:
    """A directory this process cannot create entries in (root ignores modes: /sys)."""
    if os.geteuid() == 0:
        return Path("/sys/kernel")
    path = tmp_path / "ro"
    path.mkdir(mode=0o500)
    return path


def test_unwritable_directory_names_it(tmp_path: Path) -> None:
    target = _unwritable_dir(tmp_path) / "baton-store-test"
    try:
        with pytest.raises(StoreError) as info:
            TaskStore(target)
        assert str(target) in str(info.value) and "permissions" in str(info.value)
    finally:
        if (tmp_path / "ro").exists():
            (tmp_path / "ro").chmod(0o700)


def test_closed_store_raises_store_error(store: TaskStore) -> None:
    store.state["a"] = 1
    store.commit({})
    store.close()
    store.close()  # idempotent
    for action in (lambda: store.state["a"], lambda: store.state.get("a"),
                   lambda: list(store.state),
                   lambda: store.state.__setitem__("a", 2), lambda: store.commit({}),
                   lambda: store.applied_offsets(), lambda: store.state.delete("a")):
        with pytest.raises(StoreError, match="closed"):
            action()


def test_destroy_removes_the_directory(store_factory: StoreFactory) -> None:
    store = store_factory()
    store.state["a"] = 1
    store.commit({"t:0": 1})
    store.destroy()
    assert not store.path.exists() and store.approximate_bytes() == 0
    store.destroy()  # idempotent
    assert len(store_factory().state) == 0


def test_approximate_bytes_grows_with_data(store: TaskStore) -> None:
    empty = store.approximate_bytes()
    assert empty > 0
    for i in range(5000):
        store.state[f"key-{i}"] = "x" * 100
    store.commit({"t:0": 5000})
    assert store.approximate_bytes() > empty + 5000 * 100


def test_checkpoint_is_a_consistent_copy(store: TaskStore, tmp_path: Path) -> None:
    store.state["a"] = 1
    store.commit({"t:0": 1})
    store.state["b"] = 2  # uncommitted: not in the checkpoint
    store.db.checkpoint(tmp_path / "cp")
    with TaskStore(tmp_path / "cp") as copy:
        assert dict(copy.state.items()) == {"a": 1} and copy.applied_offsets() == {"t:0": 1}


def test_sync_commits(store_factory: StoreFactory) -> None:
    store = store_factory(sync=True)
    store.state["a"] = 1
    store.commit({"t:0": 1})
    assert store.state["a"] == 1


def test_repr_names_the_path(store: TaskStore) -> None:
    assert str(store.path) in repr(store)


def test_a_full_disk_at_open_is_no_corruption(tmp_path: Path) -> None:
    from store.errors import open_error

    cause = Exception("IO error: No space left on device: While appending to file: "
                      f"{tmp_path}/MANIFEST-000012: No space left on device")
    error = open_error(tmp_path, cause)
    assert type(error) is StoreError and "its disk is full" in str(error)
