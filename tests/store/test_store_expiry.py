"""Entries that expire in stream time (store/expiry.py) on the task store, real RocksDB:
absent to records at or past their expiry on every read, deleted by the read that finds
them expired (a delete of the transaction: in its changelog records, undone with its
record), kept on disk with their expiry through commits, changelog applies and SSTs."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import TaskStore, write_encoded_sst
from store.expiry import expiry_of
from tests.store.conftest import StoreFactory


def _put_at(store: TaskStore, now: int, key: bytes | str, value: object, ttl_ms: int) -> None:
    store.state.now = now
    store.state.put(key, value, ttl_ms=ttl_ms)


def test_an_entry_reads_as_absent_at_its_expiry_on_every_read(store: TaskStore) -> None:
    _put_at(store, 1000, b"k", {"n": 1}, 500)
    store.commit({"t:0": 1})
    store.state.now = 1499                                # one ms before: there
    assert store.state[b"k"] == {"n": 1} and store.state.get(b"k") == {"n": 1}
    assert b"k" in store.state and list(store.state) == [b"k"] and len(store.state) == 1
    assert dict(store.state.items()) == {b"k": {"n": 1}}
    assert list(store.state.scan(b"")) == [(b"k", {"n": 1})]
    store.state.now = 1500                                # at its expiry: gone for each read
    # iteration skips it, deletes nothing
    assert list(store.state) == [] and len(store.state) == 0
    assert store.state.get(b"k", "none") == "none"
    with pytest.raises(KeyError):
        store.state[b"k"]
    assert b"k" not in store.state and store.state.get(b"k") is None
    assert dict(store.state.items()) == {} and list(store.state.scan(b"")) == []


def test_the_read_that_finds_it_expired_deletes_it_in_the_transaction(store: TaskStore
                                                                     ) -> None:
    _put_at(store, 10, "a", 1, 5)
    _put_at(store, 10, "b", 2, 50)
    store.commit({"t:0": 1})
    store.state.now = 20
    assert "a" not in store.state
    changes = store.changes()
    assert list(changes) == [(b"\x02a", None)]      # a delete: the changelog's tombstone
    store.commit({"t:0": 2}, changes)
    store.state.now = 0                                   # an older record, out of order
    assert "a" not in store.state and store.state["b"] == 2     # a stays gone, as on every path


def test_a_record_that_raised_takes_the_expiry_delete_back(store: TaskStore) -> None:
    _put_at(store, 10, "a", 1, 5)
    store.commit({"t:0": 1})
    store.begin_record()
    store.state.now = 20
    assert store.state.get("a") is None
    store.rollback_record()
    assert list(store.changes()) == []
    store.state.now = 12                                  # the next record is older: still there
    assert store.state["a"] == 1


def test_writing_again_sets_or_drops_the_expiry(store: TaskStore) -> None:
    _put_at(store, 100, "k", 1, 10)
    _put_at(store, 105, "k", 2, 10)                 # again: expires at 115
    store.state.now = 112
    assert store.state["k"] == 2
    store.state["k"] = 3                                  # a plain write: never expires
    store.commit({"t:0": 1})
    store.state.now = 10**12
    assert store.state["k"] == 3


def test_a_value_with_a_ttl_reads_back_as_a_copy(store: TaskStore) -> None:
    _put_at(store, 0, "l", [1], 100)
    store.state["l"].append(2)                            # not the state's own value
    assert store.state["l"] == [1]
    store.commit({"t:0": 1})
    assert store.state["l"] == [1]


def test_no_clock_no_ttl_and_nothing_expired(store: TaskStore) -> None:
    with pytest.raises(ValueError, match="record"):
        store.state.put("k", 1, ttl_ms=10)
    store.state.now = 0
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ValueError, match="ttl_ms"):
            store.state.put("k", 1, ttl_ms=bad)       # type: ignore[arg-type]
    store.state.put("k", 1, ttl_ms=10)
    store.state.now = None                                # before any record: nothing expired
    assert store.state["k"] == 1


def test_big_ints_and_floats_keep_their_encoding_behind_the_expiry(store: TaskStore) -> None:
    _put_at(store, 0, "big", 2**70, 10)
    _put_at(store, 0, "f", [1.5, None], 10)
    store.commit({"t:0": 1})
    store.state.now = 9
    assert store.state["big"] == 2**70 and store.state["f"] == [1.5, None]


def test_the_expiry_survives_reopening_a_changelog_apply_and_an_sst(
        store_factory: StoreFactory, tmp_path: Path) -> None:
    source = store_factory("source")
    _put_at(source, 1000, "k", "v", 100)
    records = list(source.changes())
    [(raw_key, raw)] = records
    assert raw is not None and expiry_of(raw) == 1100
    source.commit({"t:0": 1})
    source.close()
    reopened = store_factory("source")
    reopened.state.now = 1099
    assert reopened.state["k"] == "v"
    replica = store_factory("replica")              # the changelog's records, as they are
    replica.apply_changes(records, {"t:0": 1})
    replica.state.now = 1100
    assert "k" not in replica.state
    sst = tmp_path / "part.sst"                     # a Spark fold's result, as encoded
    assert write_encoded_sst(sst, {"k": raw, "plain": b"1"}, {"t:0": 1}) == 2
    bulk = store_factory("bulk")
    bulk.ingest([sst])
    bulk.state.now = 1099
    assert dict(bulk.state.items()) == {"k": "v", "plain": 1}
    bulk.state.now = 1100
    assert dict(bulk.state.items()) == {"plain": 1}


def test_the_sweep_deletes_what_expired_before_its_bound_a_slice_at_a_time(
        store: TaskStore) -> None:
    store.state.now = 0
    for i in range(6):
        store.state.put(f"old/{i}", i, ttl_ms=10)         # expire at 10
    store.state.put("late", 1, ttl_ms=100)                # expires at 100
    store.state["plain"] = 1
    store.commit({"t:0": 1})
    store.state["old/3"] = "rewritten"                    # the transaction's: left to it
    cursor = store.sweep_expired(50, b"", 4)        # late, old/0..old/2
    assert cursor == b"\x02old/3"
    assert store.sweep_expired(50, cursor, 4) is None
    changes = dict(store.changes())
    assert changes == {b"\x02old/%d" % i: None for i in (0, 1, 2, 4, 5)} | {
        b"\x02old/3": b'"rewritten"'}
    store.commit({"t:0": 2}, store.changes())
    store.state.now = 5                                   # a record from before: it cannot tell
    assert sorted(store.state) == ["late", "old/3", "plain"]
    assert store.sweep_expired(100, b"", 100) is None
    assert list(store.changes()) == [(b"\x02late", None)]


def test_the_clock_follows_a_batch_at_no_cost_per_record(store: TaskStore) -> None:
    class At:
        def __init__(self, timestamp: int) -> None:
            self.timestamp = timestamp

    store.state.now = 5
    batch = [At(10), At(30), At(20)]
    seen = []
    for record in store.state.following(iter(batch)):     # any iterable; a list is kept
        seen.append((record.timestamp, store.state.now))
        store.state.put(f"k{record.timestamp}", 1, ttl_ms=15)
    assert seen == [(10, 10), (30, 30), (20, 20)]
    assert store.state.now == 20                          # the last record's, until the next
    following = store.state.following([At(40)])
    assert store.state.now == 20                          # none taken yet: still the last one
    next(following)
    assert store.state.now == 40 and sorted(store.state) == ["k30"]     # k10, k20 expired by 40
    store.state.now = 7                                   # one record alone
    assert store.state.now == 7 and sorted(store.state) == ["k10", "k20", "k30"]
