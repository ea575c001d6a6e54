"""SST bulk ingest: write_sst anywhere, ingest data and offsets in one step."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from store import StoreError, TaskStore, write_sst

StoreFactory = Callable[..., TaskStore]


def test_write_sst_sorts_dedups_and_ingests_with_offsets(
        store: TaskStore, tmp_path: Path) -> None:
    sst = tmp_path / "bulk.sst"
    items = [("b", 2), (b"z", [1]), ("a", 1), (b"a", None), ("b", 3)]  # unsorted, "b" twice
    assert write_sst(sst, items, {"t:0": 100, "t:1": 50}) == 4
    store.ingest([sst])
    assert list(store.state.items()) == [(b"a", None), (b"z", [1]), ("a", 1), ("b", 3)]
    assert store.applied_offsets() == {"t:0": 100, "t:1": 50}
    assert sst.exists()  # copied, not moved, by default


def test_ingest_overrides_older_values_and_later_commits_override_it(
        store_factory: StoreFactory, tmp_path: Path) -> None:
    store = store_factory()
    store.state["old"] = "committed"
    store.state["both"] = "committed"
    store.commit({"t:0": 10, "u:0": 3})
    # in the memtable and, after flush + reopen, in an SST: ingest must win in both
    write_sst(tmp_path / "1.sst", [("both", "ingested"), ("new", "ingested")], {"t:0": 20})
    store.ingest([tmp_path / "1.sst"])
    assert dict(store.state.items()) == {"old": "committed", "both": "ingested", "new": "ingested"}
    assert store.applied_offsets() == {"t:0": 20, "u:0": 3}
    store.state["new"] = "after"
    store.commit({"t:0": 21})
    assert store.state["new"] == "after"
    store.close()
    reopened = store_factory()
    assert dict(reopened.state.items()) == {"old": "committed", "both": "ingested", "new": "after"}
    assert reopened.applied_offsets() == {"t:0": 21, "u:0": 3}


def test_ingest_overrides_values_already_flushed_to_sst(
        store_factory: StoreFactory, tmp_path: Path) -> None:
    store = store_factory()
    store.state["k"] = "committed"
    store.commit({"t:0": 1})
    store.db.raw.flush()  # white box: the older value now lives in an SST of its own
    write_sst(tmp_path / "x.sst", [("k", "ingested")], {"t:0": 2})
    store.ingest([tmp_path / "x.sst"])
    assert store.state["k"] == "ingested" and store.applied_offsets() == {"t:0": 2}


def test_later_files_of_one_ingest_win(store: TaskStore, tmp_path: Path) -> None:
    write_sst(tmp_path / "a.sst", [("k", "a"), ("only-a", 1)], {"t:0": 5})
    write_sst(tmp_path / "b.sst", [("k", "b")], {"t:0": 9})
    store.ingest([tmp_path / "a.sst", tmp_path / "b.sst"])
    assert dict(store.state.items()) == {"k": "b", "only-a": 1}
    assert store.applied_offsets() == {"t:0": 9}


def test_ingest_move_takes_the_file(store: TaskStore, tmp_path: Path) -> None:
    sst = tmp_path / "m.sst"
    write_sst(sst, [("k", 1)], {})
    store.ingest([str(sst)], move=True)
    assert store.state["k"] == 1


def test_ingest_refuses_uncommitted_writes(store: TaskStore, tmp_path: Path) -> None:
    write_sst(tmp_path / "x.sst", [("k", 1)], {"t:0": 1})
    store.state["pending"] = 1
    with pytest.raises(StoreError, match="uncommitted"):
        store.ingest([tmp_path / "x.sst"])
    store.abort()
    store.ingest([tmp_path / "x.sst"])
    assert store.state["k"] == 1


def test_ingest_of_a_bad_file_names_it(store: TaskStore, tmp_path: Path) -> None:
    bad = tmp_path / "bad.sst"
    bad.write_bytes(b"not an sst")
    with pytest.raises(StoreError, match="bad.sst"):
        store.ingest([bad])
    with pytest.raises(StoreError, match="missing.sst"):
        store.ingest([tmp_path / "missing.sst"])


def test_write_sst_refuses_nothing_and_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nothing to write"):
        write_sst(tmp_path / "e.sst", [], {})
    with pytest.raises(TypeError):
        write_sst(tmp_path / "e.sst", [(1, 1)], {})  # type: ignore[list-item]
    assert not (tmp_path / "e.sst").exists()


def test_write_sst_of_offsets_only(store: TaskStore, tmp_path: Path) -> None:
    assert write_sst(tmp_path / "o.sst", [], {"t:3": 42}) == 0
    store.ingest([tmp_path / "o.sst"])
    assert store.applied_offsets() == {"t:3": 42} and len(store.state) == 0


def test_ingest_items(store: TaskStore) -> None:
    store.state["k"] = "old"
    store.commit({"t:0": 1})
    store.ingest_items(((f"k{i}", i) for i in range(1000)), {"t:0": 1000})
    store.ingest_items([], {})
    assert len(store.state) == 1001 and store.state["k999"] == 999 and store.state["k"] == "old"
    assert store.applied_offsets() == {"t:0": 1000}


def test_write_sst_in_another_process_then_ingest(
        child: Callable[..., object], store: TaskStore, tmp_path: Path) -> None:
    """Spark executors call write_sst with no store open, possibly on another host."""
    sst = tmp_path / "remote.sst"
    proc = child("write-sst", str(sst), "500")
    out, err = proc.communicate(timeout=60)  # type: ignore[attr-defined]
    assert proc.returncode == 0, err  # type: ignore[attr-defined]
    assert out.strip() == "500"
    store.state["s00000"] = "stale"
    store.commit({"t:0": 3})
    store.ingest([sst])
    assert len(store.state) == 500
    assert store.state["s00000"] == {"n": 0} and store.state["s00499"] == {"n": 499}
    assert store.applied_offsets() == {"t:0": 500}
