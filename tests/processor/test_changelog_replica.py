"""ChangelogReplica on real RocksDB with messages made up: what it applies, where T2
goes, what it reports, and when it clears a store that never followed its partition."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, Message

from processor.changelog_replica import ChangelogError, ChangelogReplica
from store import changelog_offset_record, encode_changelog

CL = "baton.j.changelog:0"


def Msg(offset: int, key: bytes | None, value: bytes | None) -> Message:  # noqa: N802
    return Message(topic="baton.j.changelog", partition=0, offset=offset, key=key, value=value)


def _records(start: int, *pairs: tuple[bytes, bytes | None]) -> list[Message]:
    return [Msg(start + i, k, v) for i, (k, v) in enumerate(pairs)]


def _replica(store: Any, position: int = 0, end: int = 100, fetch_from: int | None = None
             ) -> ChangelogReplica:
    return ChangelogReplica("Partition 0", CL, ["in:0"], store, "warmup", position, end,
                            position if fetch_from is None else fetch_from)


def test_applies_records_and_t2_in_one_write(store: Any) -> None:
    replica = _replica(store)
    batch = _records(0, encode_changelog("a", 1), encode_changelog(b"b", [1, 2]),
                     changelog_offset_record("in:0", 40), changelog_offset_record("in:9", 3),
                     encode_changelog("a", None))
    assert replica.apply(batch) == set()
    assert store.applied_offsets() == {}                # nothing written before commit
    replica.commit()
    assert dict(store.state.items()) == {b"b": [1, 2]}
    assert store.applied_offsets() == {"in:0": 40, "in:9": 3, CL: 5}
    assert replica.reported_positions() == {"in:0": 40}    # the task's partitions only
    assert replica.lag() == 95 and replica.applied_total == 5


def test_records_the_store_has_are_skipped(store: Any) -> None:
    store.apply_changes([encode_changelog("a", 5)], {CL: 3})
    replica = _replica(store, position=3, fetch_from=0)
    assert replica.start_offset(CL) == 0                 # read from the beginning
    replica.apply(_records(0, encode_changelog("a", 1), encode_changelog("a", 2),
                           encode_changelog("a", 3), encode_changelog("a", 9)))
    replica.commit()
    assert store.state["a"] == 9 and replica.applied_total == 1


def test_skipping_what_the_store_has_follows_offsets_with_gaps(store: Any) -> None:
    """Offsets skip the transaction markers: the records taken are those at or past the
    store's position, whichever batch they come in."""
    store.apply_changes([encode_changelog("a", 5)], {CL: 7})
    replica = _replica(store, position=7, fetch_from=0)
    values = iter(range(100))
    def batch(*offsets: int) -> list[Message]:
        return [Msg(o, *encode_changelog("a", next(values))) for o in offsets]
    replica.apply(batch(0, 1, 3, 4))                     # all below the position
    assert replica.applied_total == 0 and replica.positions == {CL: 7}
    replica.apply(batch(5, 6, 7, 9))                     # 7 and 9 are new
    replica.commit()
    assert replica.applied_total == 2 and store.state["a"] == 7 and replica.positions == {CL: 10}


def test_settle_moves_t2_past_markers_not_back(store: Any) -> None:
    replica = _replica(store, end=12)
    replica.apply(_records(0, *[encode_changelog("k", n) for n in range(10)]))
    assert replica.lag() == 2                            # a commit marker, then the end
    replica.settle(12)
    replica.settle(4)
    assert replica.caught_up()
    replica.commit()
    assert store.applied_offsets()[CL] == 12


def test_a_foreign_record_stops_the_replica(store: Any) -> None:
    replica = _replica(store)
    with pytest.raises(ChangelogError, match=f"{CL} offset 7"):
        replica.apply([Msg(7, b"\x09what", b"1")])
    with pytest.raises(ChangelogError, match="no key"):
        replica.apply([Msg(8, None, b"1")])


def test_a_store_that_never_followed_the_partition_is_cleared_first(store: Any) -> None:
    store.state["stale"] = 1                                   # built from the input, say
    store.commit({"in:0": 50})
    replica = _replica(store)
    assert replica.reported_positions() == {"in:0": 50}
    replica.apply(_records(0, encode_changelog("fresh", 2), changelog_offset_record("in:0", 60)))
    replica.commit()
    assert dict(store.state.items()) == {"fresh": 2}
    assert store.applied_offsets() == {"in:0": 60, CL: 2}
    replica.apply(_records(2, encode_changelog("more", 3)))
    replica.commit()                                     # cleared once, not again
    assert dict(store.state.items()) == {"fresh": 2, "more": 3}


def test_an_empty_partition_leaves_the_store_alone(store: Any) -> None:
    store.state["kept"] = 1
    store.commit({"in:0": 50})
    replica = _replica(store, end=0)
    replica.apply([])
    replica.commit()
    assert replica.caught_up() and store.state["kept"] == 1 and CL not in store.applied_offsets()


def test_a_consumer_error_in_a_run_is_logged_and_skipped(
        store: Any, caplog: pytest.LogCaptureFixture) -> None:
    replica = _replica(store)
    error = Message(topic="baton.j.changelog", partition=0,
                    error=KafkaError(KafkaError._TRANSPORT))             # noqa: SLF001
    batch = [Msg(0, *encode_changelog("a", 1)), error, Msg(1, *encode_changelog("b", 2))]
    assert replica.apply(batch) == set()
    replica.commit()
    assert dict(store.state.items()) == {"a": 1, "b": 2}
    assert replica.positions == {CL: 2}
    assert "consumer error on baton.j.changelog:0" in caplog.text
    assert replica.apply([error]) == set()                # an error alone applies nothing
    assert replica.positions == {CL: 2}
