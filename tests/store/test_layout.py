"""The state layout with the processor id: one live execution per id and state dir,
old-layout stores adopted."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import TaskStore, task_store_path
from store.layout import ProcessorDirLocked, ProcessorStateDir


def test_processors_with_different_ids_never_share_a_store(tmp_path: Path) -> None:
    one = task_store_path(tmp_path, "job", "Partition 0", "p1")
    two = task_store_path(tmp_path, "job", "Partition 0", "p2")
    assert one != two and one.parent.name == "p1" and two.parent.name == "p2"


def test_a_second_execution_of_one_id_is_refused_naming_the_first(tmp_path: Path) -> None:
    with ProcessorStateDir(tmp_path, "job", "p1", "exec-A"):
        with pytest.raises(ProcessorDirLocked) as refused:
            ProcessorStateDir(tmp_path, "job", "p1", "exec-B").acquire()
        message = str(refused.value)
        assert "exec-A" in message and str(tmp_path / "job" / "p1") in message
        with ProcessorStateDir(tmp_path, "job", "p2", "exec-C"):
            pass                                      # another id: no conflict
    with ProcessorStateDir(tmp_path, "job", "p1", "exec-B"):
        pass                                          # released with its holder


def test_old_layout_stores_move_under_the_first_processor(tmp_path: Path) -> None:
    old = task_store_path(tmp_path, "job", "Partition 0")
    with TaskStore(old) as store:
        store.begin_record()
        store.state["k"] = 41
        store.commit({"events:0": 7})
    assert (old / "CURRENT").exists()
    with ProcessorStateDir(tmp_path, "job", "p1", "exec-A"):
        moved = task_store_path(tmp_path, "job", "Partition 0", "p1")
        assert not old.exists() and (moved / "CURRENT").exists()
        with TaskStore(moved) as store:
            assert store.state["k"] == 41 and store.applied_offsets() == {"events:0": 7}
    with ProcessorStateDir(tmp_path, "job", "p2", "exec-B"):
        assert not task_store_path(tmp_path, "job", "Partition 0", "p2").exists()
