"""Where a processor opens its task stores (processor/runtime/stores.py): the `[store]`
budget reaches RocksDB, and a store damaged on disk is found at its first open, moved
aside (kept) and replaced by an empty one, never served. Real RocksDB throughout."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.wire.config import Config, ConfigError, parse_config
from processor.runtime.stores import TaskStores
from store import Store, StoreCorruptError, TaskStore, encode_key, encode_value, task_store_path
from store.paths import move_aside
from tests.waiting import wait_for

TASK = "Partition 0"


def config(tmp_path: Path, **store: Any) -> Config:
    return parse_config({
        "job": {"name": "sums", "class": "processor.examples:RunningSum",
                "inputs": ["events"], "output": "out"},
        "kafka": {"bootstrap_servers": "127.0.0.1:9"},
        "processor": {"state_dir": str(tmp_path / "state")},
        "store": store})


def fill(store: TaskStore, keys: int) -> None:
    """`keys` keys committed through the store API, then flushed to table files."""
    for start in range(0, keys, 5000):
        numbers = range(start, min(start + 5000, keys))
        store.apply_records([encode_key(f"k{i:07d}") for i in numbers],
                            [encode_value({"sum": i * 7919 % 100_003}) for i in numbers],
                            {"events:0": numbers.stop})
    store.close()       # a close flushes the memtable into a table file


def damage(path: Path) -> Path:
    """64 bytes overwritten a quarter into the store's largest table file: among its
    data blocks, which come first (its filter and index blocks follow them)."""
    table = max(path.glob("*.sst"), key=lambda p: p.stat().st_size)
    with table.open("r+b") as f:
        f.seek(table.stat().st_size // 4)
        f.write(b"\xa5" * 64)
    return table


def rocksdb_options(path: Path) -> dict[str, str]:
    """The options RocksDB wrote to the store's newest OPTIONS file when it opened it."""
    newest = max(path.glob("OPTIONS-*"), key=lambda p: int(p.name.split("-")[1]))
    pairs = (line.strip().split("=", 1) for line in newest.read_text().splitlines())
    return {p[0]: p[1] for p in pairs if len(p) == 2}


def test_the_store_section_reaches_rocksdb(tmp_path: Path) -> None:
    stores = TaskStores(config(tmp_path, block_cache_mb=3, write_buffer_mb=5,
                               max_write_buffers=3, max_open_files=77), "p1")
    try:
        first, second = stores.open(TASK), stores.open("Partition 1")
        options = rocksdb_options(first.path)
        assert options["write_buffer_size"] == str(5 << 20)
        assert options["max_write_buffer_number"] == "3"
        assert options["max_open_files"] == "77"
        assert options["paranoid_checks"] == "true"
        # one cache for every store of the processor: its capacity is the whole budget
        for store in (first, second):
            assert store.db.raw.property_int_value("rocksdb.block-cache-capacity") == 3 << 20
        first.close()
        second.close()
    finally:
        stores.close()


def test_the_defaults_reach_rocksdb(tmp_path: Path) -> None:
    stores = TaskStores(config(tmp_path), "p1")
    try:
        store = stores.open(TASK)
        options = rocksdb_options(store.path)
        assert (options["write_buffer_size"], options["max_write_buffer_number"],
                options["max_open_files"]) == (str(16 << 20), "2", "64")
        store.close()
    finally:
        stores.close()


def write(store: Store, first: int, keys: int) -> None:
    """`keys` keys from `first` committed through the store API, 5,000 a commit."""
    for start in range(first, first + keys, 5000):
        numbers = range(start, min(start + 5000, first + keys))
        store.apply_records([encode_key(f"k{i:07d}") for i in numbers],
                            [encode_value({"sum": i}) for i in numbers],
                            {"events:0": numbers.stop})


def memtables(store: Store) -> int:
    return store.db.raw.property_int_value("rocksdb.cur-size-all-mem-tables")


def test_the_memtables_of_all_stores_together_are_bounded(tmp_path: Path) -> None:
    # 200,000 keys take about 12 MiB of memtable: under one store's own bound (16 MiB),
    # so only the processor's bound over all its stores (1 MiB) makes them flush. The
    # bound triggers flushes, it does not cap: a memtable whose switch waits for the
    # previous one's flush goes on growing meanwhile (more so on a loaded machine), so
    # the sizes are read once the flushes are done.
    stores = TaskStores(config(tmp_path, memtables_mb=1), "p1")
    try:
        first, second = stores.open(TASK, reads=False), stores.open("Partition 1", reads=False)
        for start in range(0, 200_000, 50_000):
            write(first, start, 50_000)
            write(second, start, 50_000)
        wait_for(lambda: not any(s.db.raw.property_int_value("rocksdb.num-immutable-mem-table")
                                 for s in (first, second)), 30, "the flushes to finish")
        assert list(first.path.glob("*.sst")) and list(second.path.glob("*.sst"))
        assert memtables(first) + memtables(second) < 8 << 20
        assert len(first.state) == len(second.state) == 200_000
        first.close()
        second.close()
    finally:
        stores.close()

    unbounded = TaskStores(config(tmp_path / "u", memtables_mb=1024), "p1")
    try:
        store = unbounded.open(TASK, reads=False)
        write(store, 0, 200_000)
        assert memtables(store) > 8 << 20 and not list(store.path.glob("*.sst"))
        store.close()
    finally:
        unbounded.close()


@pytest.mark.parametrize(("section", "key", "value"), [
    ("store", "max_open_files", 3), ("store", "block_cache_mb", 0),
    ("store", "max_write_buffers", 1), ("store", "memtables_mb", 0),
    ("store", "cache_mb", 8)])
def test_a_bad_store_key_is_an_error_naming_it(tmp_path: Path, section: str, key: str,
                                                value: int) -> None:
    with pytest.raises(ConfigError, match=rf"{section}\.{key}"):
        config(tmp_path, **{key: value})


def test_verify_reads_every_key_and_names_the_damaged_file(tmp_path: Path) -> None:
    fill(TaskStore(tmp_path / "db"), 40_000)
    with TaskStore(tmp_path / "db") as store:
        assert store.db.verify() == 40_001            # the keys and the applied offset
    table = damage(tmp_path / "db")
    with TaskStore(tmp_path / "db") as store:  # RocksDB itself opens it without a word
        with pytest.raises(StoreCorruptError, match=table.name) as caught:
            store.db.verify()
    assert caught.value.path == tmp_path / "db"


@pytest.mark.parametrize("scan", [list, len, lambda s: dict(s.items())])
def test_a_scan_that_meets_a_damaged_block_raises_instead_of_ending_early(
        tmp_path: Path, scan: Any) -> None:
    fill(TaskStore(tmp_path / "db"), 40_000)
    table = damage(tmp_path / "db")
    with TaskStore(tmp_path / "db") as store, \
            pytest.raises(StoreCorruptError, match=table.name):
        scan(store.state)


def test_a_damaged_store_is_moved_aside_and_replaced_by_an_empty_one(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = config(tmp_path)
    path = task_store_path(cfg.state_dir, cfg.job.name, TASK, "p1")
    fill(TaskStore(path), 40_000)
    table = damage(path)
    damaged = table.read_bytes()
    stores = TaskStores(cfg, "p1")
    try:
        store = stores.open(TASK)
        assert store.applied_offsets() == {} and len(store.state) == 0   # rebuilt by catch-up
        aside = [p for p in path.parent.iterdir() if p.name != path.name]
        assert [p.name[:len(path.name) + 9] for p in aside] == [f"{path.name}+corrupt-"]
        assert (aside[0] / table.name).read_bytes() == damaged        # kept as it was
        assert f"damaged store moved to {aside[0]}, not served" in caplog.text
        assert table.name in caplog.text                # the file RocksDB found damaged
        store.close()
    finally:
        stores.close()


def test_without_verify_on_open_the_damage_is_found_only_when_read(tmp_path: Path) -> None:
    cfg = config(tmp_path, verify_on_open=False)
    path = task_store_path(cfg.state_dir, cfg.job.name, TASK, "p1")
    fill(TaskStore(path), 40_000)
    damage(path)
    stores = TaskStores(cfg, "p1")
    try:
        store = stores.open(TASK)
        assert store.applied_offsets() == {"events:0": 40_000}   # served as it is
        assert [p.name for p in path.parent.iterdir()] == [path.name]
        with pytest.raises(StoreCorruptError):
            store.db.verify()
        store.close()
    finally:
        stores.close()


def test_move_aside_never_overwrites_an_earlier_copy(tmp_path: Path) -> None:
    first, second = tmp_path / "t", tmp_path / "t"
    first.mkdir()
    (first / "a").write_text("1")
    one = move_aside(first, now=0.0)
    second.mkdir()
    (second / "a").write_text("2")
    two = move_aside(second, now=0.0)
    assert (one.name, two.name) == ("t+corrupt-19700101T000000Z",
                                    "t+corrupt-19700101T000000Z-2")
    assert ((one / "a").read_text(), (two / "a").read_text()) == ("1", "2")


def test_blocks_of_table_files_compaction_replaced_leave_the_block_cache(
        tmp_path: Path) -> None:
    # A small state updated and read over and over (a soak's traffic, any hot key set):
    # each round rewrites a quarter of 4,000 keys and reads them all, so reads reach
    # the table files; 1 MiB memtables flush every few rounds and compaction replaces
    # the files. A replaced file's cached blocks must go with it, or the cache (and
    # the processor's RSS) fills with dead blocks toward its capacity: 6 MiB here after
    # 400 rounds without RocksDB's `uncache_aggressiveness`, under 1 MiB with it.
    # Measured once a full compaction has replaced every file and the state has been
    # read once more: before it, the cache also holds the blocks of L0 files that are
    # still live, as many as compaction has fallen behind (2.7 MB on a loaded machine).
    stores = TaskStores(config(tmp_path, write_buffer_mb=1, memtables_mb=4), "p1")
    names = [f"k{i:04d}" for i in range(4000)]
    keys = [encode_key(name) for name in names]
    values: dict[str, str] = {}
    try:
        store = stores.open(TASK)
        assert rocksdb_options(store.path)["uncache_aggressiveness"] == "300"
        for round_ in range(1, 401):
            first = round_ % 4 * 1000
            fresh = [os.urandom(24).hex() for _ in range(1000)]
            store.apply_records(keys[first:first + 1000], [encode_value(v) for v in fresh],
                                {"events:0": round_})
            values.update(zip(names[first:first + 1000], fresh, strict=True))
            assert [store.state.get(name) for name in names] == [values.get(n) for n in names]
        store.db.raw.compact_range(None, None)
        assert [store.state.get(name) for name in names] == [values.get(n) for n in names]
        cached = store.db.raw.property_int_value("rocksdb.block-cache-usage")
        assert cached < 2.5 * (1 << 20), f"{cached} bytes cached"
        store.close()
    finally:
        stores.close()


def test_the_stores_memory_is_what_rocksdb_holds(tmp_path: Path) -> None:
    # what baton_store_block_cache_bytes and baton_store_memtable_bytes report
    stores = TaskStores(config(tmp_path), "p1")
    try:
        assert stores.memory_usage() == {"block_cache": 0, "memtables": 0}
        store = stores.open(TASK)
        write(store, 0, 20_000)
        memory = stores.memory_usage()
        assert memory["memtables"] == memtables(store) > 0
        store.db.raw.flush()
        assert all(store.state.get(f"k{i:07d}") == {"sum": i} for i in range(0, 20_000, 97))
        assert stores.memory_usage()["block_cache"] == store.db.raw.property_int_value(
            "rocksdb.block-cache-usage") > 0
        store.abort()
        store.close()
    finally:
        stores.close()
