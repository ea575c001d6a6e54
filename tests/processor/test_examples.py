"""The example jobs and their oracles (pure): IdentifiedSum draws an id per key once,
and its oracle catches a key whose id changed, a lost or a duplicated output."""

from __future__ import annotations

from processor.examples import IdentifiedSum
from processor.job import Record
from processor.oracle import check_identified_sums


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
