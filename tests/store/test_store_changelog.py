"""The changelog side of the store: a transaction's writes as changelog records (one
per key, the last value, deletes as tombstones), and applying such records with a
position in one WriteBatch, on real rocksdict."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from store import (
    StoreError,
    TaskStore,
    changelog_offset,
    changelog_offset_record,
    check_changelog_key,
    decode_changelog,
    decode_key,
    decode_value,
    encode_changelog,
    encode_key,
    encode_value,
)
from store.codec import rare_keys
from store.options import MEMTABLE_BLOOM_RATIO
from tests.rocksdb_options import memtable_bloom_ratio

StoreFactory = Callable[..., TaskStore]


def test_changes_hold_the_last_value_of_each_key_written(store: TaskStore) -> None:
    store.state["a"] = 1
    store.state["a"] = 2
    store.state[b"b"] = {"n": [1, 2]}
    store.state["c"] = "x"
    del store.state["c"]
    store.state.delete("never-there")
    changes = dict(store.changes())
    assert changes == {b"\x02a": b"2", b"\x01b": b'{"n":[1,2]}', b"\x02c": None,
                       b"\x02never-there": None}
    assert dict(store.changes()) == changes           # reading them changes nothing
    for raw_key, raw in changes.items():
        key, value = decode_changelog(raw_key, raw)
        assert value is None or decode_value(value) == {"a": 2, b"b": {"n": [1, 2]}}[key]


def test_changes_match_encode_changelog(store: TaskStore) -> None:
    store.state["k"] = {"x": 1}
    store.state[b"z"] = None
    assert sorted(store.changes()) == sorted([encode_changelog("k", {"x": 1}),
                                              (b"\x01z", b"null")])


def test_changes_come_in_key_order(store: TaskStore) -> None:
    """In key order (RocksDB inserts them cheaper so, here and in every replica)."""
    for key in ["m", b"b", "a", "z", b"a"]:
        store.state[key] = 1
    del store.state["m"]
    keys = [raw_key for raw_key, _ in store.changes()]
    assert keys == sorted(keys) and len(keys) == 5


_SCALARS = st.one_of(st.integers(), st.booleans(), st.none(), st.text(max_size=5),
                    st.floats(allow_nan=False))
_VALUES = st.one_of(_SCALARS, st.lists(st.integers(), max_size=3))


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.dictionaries(st.text(max_size=6), st.integers(min_value=-2**63, max_value=2**64 - 1)),
    st.dictionaries(st.binary(max_size=6), st.binary(max_size=6).map(list)),
    st.dictionaries(st.text(max_size=6), st.integers()),
    st.dictionaries(st.one_of(st.text(max_size=6), st.binary(max_size=6)),
                    st.one_of(_VALUES, st.just(None)))),
    st.sets(st.integers(min_value=0, max_value=20)))
@example({"big": 2**64, "small": 1}, set())
@example({"least": -2**63 - 1, "most": 2**64 - 1}, set())
@example({"t": True, "f": 0, "n": None}, {2})
def test_changes_are_the_plain_encoding_of_every_write_in_key_order(
        tmp_path_factory: pytest.TempPathFactory, writes: dict[object, object],
        deleted: set[int]) -> None:
    """However the keys and values are shaped (the common shapes take a path without a
    Python step per key), the changes are each key's encoding with its value's, sorted."""
    with TaskStore(tmp_path_factory.mktemp("s") / "s", reads=False) as store:
        expected = {}
        for n, (key, value) in enumerate(writes.items()):
            if n in deleted:
                store.state.delete(key)
                expected[encode_key(key)] = None
            else:
                store.state[key] = value
                expected[encode_key(key)] = encode_value(value)
        changes = store.changes()
        assert list(changes) == sorted(expected.items())
        for raw_key, raw in changes:
            assert raw is None or decode_value(raw) == store.state[decode_key(raw_key)]


def test_a_rolled_back_record_leaves_no_change(store: TaskStore) -> None:
    store.state["kept"] = 1
    store.begin_record()
    store.state["kept"] = 99
    store.state["gone"] = 1
    store.rollback_record()
    assert dict(store.changes()) == {b"\x02kept": b"1"}


def test_commit_and_abort_empty_the_changes(store: TaskStore) -> None:
    store.state["a"] = 1
    store.commit({"t:0": 1})
    assert list(store.changes()) == []
    store.state["a"] = 2
    store.abort()
    assert list(store.changes()) == []


def test_apply_changes_rebuilds_another_store(store_factory: StoreFactory) -> None:
    owner, replica = store_factory("owner"), store_factory("replica")
    owner.state["a"] = 1
    owner.state[b"b"] = [1, 2]
    owner.state["gone"] = True
    first = [*owner.changes(), changelog_offset_record("in:0", 3)]
    owner.commit({"in:0": 3})
    del owner.state["gone"]
    owner.state["a"] = 5
    second = [*owner.changes(), changelog_offset_record("in:0", 7)]
    owner.commit({"in:0": 7})
    replica.apply_changes(first, {"baton.j.changelog:0": 4})
    replica.apply_changes(second, {"baton.j.changelog:0": 9})
    assert dict(replica.state.items()) == dict(owner.state.items()) == {"a": 5, b"b": [1, 2]}
    assert replica.applied_offsets() == {"in:0": 7, "baton.j.changelog:0": 9}


def test_apply_changes_later_record_of_a_key_wins(store: TaskStore) -> None:
    store.apply_changes([(b"\x02k", b"1"), (b"\x02k", None), (b"\x02k", b"3")], {})
    assert store.state["k"] == 3


def test_apply_changes_refuses_foreign_keys_and_writes_nothing(store: TaskStore) -> None:
    with pytest.raises(ValueError, match="not a changelog key"):
        store.apply_changes([(b"\x02ok", b"1"), (b"\x07what", b"1")], {"cl:0": 2})
    with pytest.raises(ValueError, match="no valid offset"):
        store.apply_changes([(changelog_offset_record("in:0", 1)[0], b"x")], {})
    with pytest.raises(ValueError, match="no key"):
        check_changelog_key(None)
    assert "ok" not in store.state and store.applied_offsets() == {}


def test_apply_changes_refuses_an_open_transaction(store: TaskStore) -> None:
    store.state["pending"] = 1
    with pytest.raises(StoreError, match="uncommitted"):
        store.apply_changes([(b"\x02k", b"1")], {})


def test_offset_records_round_trip() -> None:
    key, value = changelog_offset_record("in:12", 345)
    assert changelog_offset(key, value) == ("in:12", 345)
    assert changelog_offset(b"\x02in:12", b"345") is None
    with pytest.raises(ValueError, match="topic:N"):
        changelog_offset_record("no-partition", 1)


_KEYS = st.one_of(st.text(max_size=3), st.binary(max_size=3))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_KEYS, st.integers()), st.dictionaries(_KEYS, st.integers()),
       st.sets(_KEYS))
def test_snapshot_is_the_stored_state_under_the_open_transaction(
        tmp_path_factory: pytest.TempPathFactory, committed: dict[object, int],
        written: dict[object, int], deleted: set[object]) -> None:
    """Committed keys, then writes and deletes left open, read back as one state in key
    order, whichever side of the stored keys the open ones fall."""
    with TaskStore(tmp_path_factory.mktemp("s") / "s") as store:
        for key, value in committed.items():
            store.state[key] = value
        store.commit({})
        model = dict(committed)
        for key, value in written.items():
            store.state[key] = value
            model[key] = value
        for key in deleted:
            store.state.delete(key)
            model.pop(key, None)
        expected = sorted((encode_key(k), encode_value(v)) for k, v in model.items())
        assert list(store.snapshot()) == expected
        assert dict(store.state.items()) == model


def test_snapshot_is_the_whole_state_as_changelog_records(store_factory: StoreFactory) -> None:
    owner, replica = store_factory("owner"), store_factory("replica")
    owner.state["a"] = 1
    owner.state[b"b"] = {"x": [1]}
    owner.state["c"] = 3
    owner.commit({"in:0": 5})
    del owner.state["c"]
    owner.state["d"] = "open"          # the open transaction counts
    replica.apply_changes(owner.snapshot(), {"cl:0": 1})
    assert dict(replica.state.items()) == {"a": 1, b"b": {"x": [1]}, "d": "open"}
    assert replica.applied_offsets() == {"cl:0": 1}      # offsets are not state


def test_clear_drops_state_and_offsets(store_factory: StoreFactory) -> None:
    store = store_factory()
    store.state["a"] = 1
    store.commit({"in:0": 3, "cl:0": 9})
    store.state["b"] = 2
    store.clear()
    assert dict(store.state.items()) == {} and store.applied_offsets() == {}
    store.close()
    reopened = store_factory()
    assert dict(reopened.state.items()) == {} and reopened.applied_offsets() == {}
    reopened.state["z"] = 1
    reopened.commit({"in:0": 1})
    assert reopened.state["z"] == 1


def test_rare_keys_are_found_among_state_keys() -> None:
    offset_key = changelog_offset_record("in:0", 1)[0]
    assert rare_keys([b"\x01a", b"\x02b"] * 3) == []
    assert rare_keys([b"\x01a", offset_key, b"\x02b", b"\x07x"]) == [1, 3]
    assert rare_keys([b"\x01a", None, b""]) == [1, 2]        # type: ignore[list-item]
    assert rare_keys([]) == []


def test_apply_records_takes_columns(store: TaskStore) -> None:
    offset_key, offset_value = changelog_offset_record("in:0", 4)
    store.apply_records([b"\x02a", b"\x02b", offset_key, b"\x02a"],
                        [b"1", b"2", offset_value, None], {"cl:0": 4})
    assert dict(store.state.items()) == {"b": 2}
    assert store.applied_offsets() == {"in:0": 4, "cl:0": 4}
    with pytest.raises(ValueError, match="2 keys but 1 values"):
        store.apply_records([b"\x02a", b"\x02b"], [b"1"], {})


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from([b"\x02a", b"\x02b", b"\x01c"]),
                          st.one_of(st.none(), st.sampled_from([b"1", b"2", b"3"]))),
                max_size=12))
def test_apply_records_ends_as_the_records_applied_one_by_one(
        store: TaskStore, records: list[tuple[bytes, bytes | None]]) -> None:
    """A key's last record in a batch wins, as if each record were written in turn."""
    store.clear()
    store.apply_records([b"\x02a"], [b"9"], {})
    expected: dict[bytes, bytes] = {b"\x02a": b"9"}
    for key, value in records:
        if value is None:
            expected.pop(key, None)
        else:
            expected[key] = value
    store.apply_records([k for k, _ in records], [v for _, v in records], {"cl:0": 1})
    assert dict(store.state.items()) == {decode_key(k): decode_value(v)
                                         for k, v in expected.items()}
    assert store.applied_offsets() == {"cl:0": 1}


def test_commit_takes_the_changes_already_encoded(store_factory: StoreFactory) -> None:
    plain, given = store_factory("plain"), store_factory("given")
    for s in (plain, given):
        s.state["kept"] = 1
        s.commit({"in:0": 1})
        s.state["a"] = {"x": [1, 2]}
        s.state[b"b"] = 2
        del s.state["kept"]
    plain.commit({"in:0": 4})
    given.commit({"in:0": 4}, given.changes())
    assert dict(given.state.items()) == dict(plain.state.items()) == {"a": {"x": [1, 2]}, b"b": 2}
    assert given.applied_offsets() == plain.applied_offsets() == {"in:0": 4}
    for s in (plain, given):            # no delete among them: put without a loop
        s.state["a"] = 3
        s.state["c"] = 4
    plain.commit({"in:0": 6})
    given.commit({"in:0": 6}, given.changes())
    assert dict(given.state.items()) == dict(plain.state.items()) == {"a": 3, b"b": 2, "c": 4}


def test_changes_encode_every_kind_of_value_as_a_commit_does(
        store_factory: StoreFactory) -> None:
    values = {"int": 7, "big": 2**70, "neg": -(2**65), "bool": True, "none": None,
              "str": "s", "float": 1.5, "list": [1, {"a": 2**80}]}
    written, rebuilt = store_factory("written"), store_factory("rebuilt")
    for key, value in values.items():
        written.state[key] = value
    rebuilt.apply_changes(written.changes(), {"in:0": 1})
    written.commit({"in:0": 1})
    assert dict(rebuilt.state.items()) == dict(written.state.items()) == values


def test_a_store_opened_for_writes_only_turns_its_memtable_filter_on_for_reads(
        tmp_path: Path) -> None:
    store = TaskStore(tmp_path / "s", reads=False)
    store.apply_records([b"\x02a"], [b"1"], {"cl:0": 1})
    assert memtable_bloom_ratio(tmp_path / "s") == 0 and store.state["a"] == 1
    store.expect_reads()
    store.expect_reads()                        # once is enough
    assert memtable_bloom_ratio(tmp_path / "s") == MEMTABLE_BLOOM_RATIO
    store.state["b"] = 2
    store.commit({"in:0": 1})
    assert dict(store.state.items()) == {"a": 1, "b": 2}
    store.close()
    closed = TaskStore(tmp_path / "t", reads=False)
    closed.close()
    with pytest.raises(StoreError, match="closed"):
        closed.expect_reads()
