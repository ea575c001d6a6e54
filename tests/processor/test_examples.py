"""The example jobs and their oracles: IdentifiedSum draws an id per key once, and its
oracle catches a key whose id changed, a lost or a duplicated output; every example
through processor.testing, on the task store's own semantics."""

from __future__ import annotations

import time

import pytest

from processor.examples import IdentifiedSum, KeyStats, ResettableSum, RunningSum, StampedSum
from processor.job import Record
from processor.oracle import check_identified_sums
from processor.testing import run_job


def _run(job: IdentifiedSum, state: dict[object, object], key: bytes, value: bytes
         ) -> tuple[bytes, bytes]:
    record = Record(key, value, "in", 0, 0, 0)
    [(out_key, out_value)] = list(job.process(record, state))
    assert isinstance(out_key, bytes) and isinstance(out_value, str)
    return out_key, out_value.encode()


def test_identified_sum_keeps_one_id_per_key() -> None:
    job, state = IdentifiedSum(), {}
    outputs = [_run(job, state, k, v) for k, v in
               [(b"a", b"1"), (b"b", b"5"), (b"a", b"2"), (b"a", b"3")]]
    ids = {k: {v.split(b":")[0] for kk, v in outputs if kk == k} for k in (b"a", b"b")}
    assert all(len(v) == 1 for v in ids.values()) and ids[b"a"] != ids[b"b"]
    assert [v.split(b":")[1] for k, v in outputs if k == b"a"] == [b"1", b"3", b"6"]
    assert state[b"a"][1] == 6


def test_the_oracle_accepts_a_faithful_run_and_catches_a_new_id() -> None:
    inputs = [(b"a", b"1"), (b"a", b"2"), (b"b", b"4")]
    good = [(b"a", b"x:1"), (b"a", b"x:3"), (b"b", b"y:4")]
    assert check_identified_sums(inputs, good).ok
    rebuilt = [(b"a", b"x:1"), (b"a", b"z:3"), (b"b", b"y:4")]     # replayed: a new id
    verdict = check_identified_sums(inputs, rebuilt)
    assert not verdict.ok and verdict.keys_with_several_ids == 1 and verdict.sums.ok
    lost = check_identified_sums(inputs, good[1:])
    assert not lost.ok and lost.sums.lost == 1
    doubled = check_identified_sums(inputs, [*good, (b"a", b"x:3")])
    assert not doubled.ok and doubled.sums.duplicated == 1


# ---- the example jobs through processor.testing (the task store's own semantics) ----

def test_running_sum_and_key_stats_through_the_harness() -> None:
    pairs = [("a", "1"), ("b", "5"), ("a", "2"), ("a", "3")]
    run = run_job(RunningSum, pairs)
    assert [(o.key, o.value) for o in run.outputs] == [
        (b"a", b"1"), (b"b", b"5"), (b"a", b"3"), (b"a", b"6")]
    assert all(o.topic == "output" for o in run.outputs)
    assert [o.timestamp for o in run.outputs] == [1, 2, 3, 4]      # the inputs'
    assert run.state == {b"a": 6, b"b": 5}
    before = time.time_ns() // 1_000_000
    stamped = run_job(StampedSum, pairs)
    after = time.time_ns() // 1_000_000
    assert [(o.key, o.value) for o in stamped.outputs] == [(o.key, o.value)
                                                           for o in run.outputs]
    assert all(before <= o.timestamp <= after for o in stamped.outputs)  # when computed
    stats = run_job(KeyStats, pairs, commit_every=3)
    assert stats.state == {b"a": {"n": 3, "sum": 6}, b"b": {"n": 1, "sum": 5}}


def test_identified_sum_through_the_harness_keeps_one_id_per_key() -> None:
    run = run_job(IdentifiedSum, [(b"a", b"1"), (b"a", b"2")])
    ident, total = run.state[b"a"]
    assert total == 3 and [o.value for o in run.outputs] == [
        f"{ident}:1".encode(), f"{ident}:3".encode()]


def test_resettable_sum_forgets_a_key_and_a_failed_record_changes_nothing() -> None:
    run = run_job(ResettableSum, [("a", "4"), ("a", "x"), ("a", "0"), ("b", "2")],
                  on_error="skip")
    assert run.state == {b"b": 2}
    assert [(r.offset, type(e)) for r, e in run.failed] == [(1, ValueError)]
    with pytest.raises(ValueError):
        run_job(ResettableSum, [("a", "x")])
