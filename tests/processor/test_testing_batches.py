"""processor.testing runs `process_batch` as the runtime does (runs of one partition's
records at once; undone and redone record by record when it raises or miscounts), and
entries with a TTL and prefix scans by the records' timestamps, inside a batch too."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pytest

from processor import Emitted, Job, Record, State
from processor.examples import RunningSum
from processor.testing import JobHarness, run_job
from tests.processor.state_jobs import RecentSum, expected_outputs


class Counted(RunningSum):
    """RunningSum that records the runs its `process_batch` was given."""

    runs: list[list[int]] = []

    def process_batch(self, records: Sequence[Record], state: State
                      ) -> list[tuple[Emitted]]:
        Counted.runs.append([r.offset for r in records])
        return super().process_batch(records, state)


class Unfaithful(RunningSum):
    """A batch path that forgets the state it read: each batch starts from 0."""

    def process_batch(self, records: Sequence[Record], state: State
                      ) -> list[list[Emitted]]:
        totals: dict[Any, int] = {}
        outputs: list[list[Emitted]] = []
        for record in records:
            assert record.key is not None and record.value is not None
            totals[record.key] = totals.get(record.key, 0) + int(record.value)
            outputs.append([(record.key, str(totals[record.key]))])
        state.update(totals)
        return outputs


class Miscounts(RunningSum):
    """A batch path that returns one result short: not trusted, redone by process()."""

    def process_batch(self, records: Sequence[Record], state: State
                      ) -> list[tuple[Emitted]]:
        state[b"batch-ran"] = 1
        return super().process_batch(records, state)[:-1]


_PAIRS = [("a", "1"), ("b", "2"), ("a", "3"), ("a", "4"), ("b", "5")]


def test_run_job_hands_a_transactions_records_to_process_batch() -> None:
    Counted.runs = []
    run = run_job(Counted, _PAIRS, commit_every=2)
    assert Counted.runs == [[0, 1], [2, 3], [4]]
    assert [o.value for o in run.outputs] == [b"1", b"2", b"4", b"8", b"7"]
    assert run.state == {b"a": 8, b"b": 7}


def test_send_batch_splits_runs_by_partition_and_leaves_keyless_records_alone() -> None:
    Counted.runs = []
    records = [Record(b"a", b"1", "in", 0, 0, 1), Record(b"a", b"1", "in", 0, 1, 2),
               Record(b"a", b"1", "in", 1, 0, 3), Record(None, b"1", "in", 1, 1, 4),
               Record(b"a", b"1", "in", 0, 2, 5)]
    with JobHarness(Counted, on_error="skip", commit_every=100) as harness:
        produced = harness.send_batch(records)
        assert Counted.runs == [[0, 1], [2]]          # the keyless run went one by one
        assert [[o.value for o in outs] for outs in produced] == [[b"1"], [b"2"], [b"3"],
                                                                  [], [b"4"]]
        assert [r.offset for r, _ in harness.run.failed] == [1]   # no key: it raised


def test_an_unfaithful_batch_path_shows_against_process_record_by_record() -> None:
    batched = run_job(Unfaithful, _PAIRS, commit_every=2)
    with JobHarness(Unfaithful, commit_every=2) as harness:
        for pair in _PAIRS:
            harness.send(pair)
        one_by_one = harness.close()
    assert one_by_one.state == {b"a": 8, b"b": 7}
    assert batched.state != one_by_one.state
    assert [o.value for o in batched.outputs] != [o.value for o in one_by_one.outputs]


def test_a_batch_that_miscounts_is_undone_and_redone_record_by_record() -> None:
    run = run_job(Miscounts, _PAIRS, commit_every=5)
    assert run.state == {b"a": 8, b"b": 7}                 # its write undone
    assert [o.value for o in run.outputs] == [b"1", b"2", b"4", b"8", b"7"]


def test_a_batch_that_raises_meets_on_error_one_record_at_a_time() -> None:
    pairs = [("a", "1"), ("a", "x"), ("a", "2")]
    run = run_job(RunningSum, pairs, commit_every=3, on_error="skip")
    assert [r.offset for r, _ in run.failed] == [1]
    assert run.state == {b"a": 3} and [o.value for o in run.outputs] == [b"1", b"3"]
    with pytest.raises(ValueError):
        run_job(RunningSum, pairs, commit_every=3)


class Dedup(Job):
    """Each key passes once per 10 ms of stream time."""

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        if record.key in state:
            return
        state.put(record.key, True, ttl_ms=10)
        yield record.key, record.value


class BatchedDedup(Dedup):
    """Dedup's batch path: one state read per record, the clock following the batch."""

    def process_batch(self, records: Sequence[Record], state: State
                      ) -> list[list[Emitted]]:
        outputs: list[list[Emitted]] = []
        for record in state.following(records):
            fresh = record.key not in state
            if fresh:
                state.put(record.key, True, ttl_ms=10)
            outputs.append([(record.key, record.value)] if fresh else [])
        return outputs


def _stamped(pairs: Iterable[tuple[bytes, int]]) -> list[Record]:
    return [Record(key, b"%d" % i, "input", 0, i, stamp)
            for i, (key, stamp) in enumerate(pairs)]


@pytest.mark.parametrize("commit_every", [1, 3, 100])
def test_the_clock_is_each_records_own_inside_a_batch(commit_every: int) -> None:
    records = _stamped([(b"a", 0), (b"a", 9), (b"a", 10), (b"b", 12), (b"a", 15),
                        (b"a", 5), (b"a", 21)])
    run = run_job(Dedup, records, commit_every=commit_every)
    assert run_job(BatchedDedup, records, commit_every=commit_every) == run
    # a passes at 0, again at 10 (the first expired), not at 15 (the second's window),
    # not at 5 (older, but the entry of 10 holds until 20), again at 21
    assert [(o.key, o.value) for o in run.outputs] == [
        (b"a", b"0"), (b"a", b"2"), (b"b", b"3"), (b"a", b"6")]
    assert run.state == {b"a": True, b"b": True}           # as read at the last record


def test_recent_sums_match_their_rules_whatever_the_batches() -> None:
    stamps = [0, 300, 600, 900, 1250, 1300, 2100, 2150, 1900, 2600, 4000, 4100]
    records = [Record(key, b"%d" % (i % 5 + 1), "input", 0, i, stamp)
               for i, (key, stamp) in enumerate(
                   (b"k1" if i % 3 else b"k10", s) for i, s in enumerate(stamps))]
    want = expected_outputs(describe_records(records))
    for commit_every in (1, 4, 12):
        run = run_job(RecentSum, records, commit_every=commit_every)
        got: dict[bytes, list[str]] = {}
        for out in run.outputs:
            assert out.key is not None and out.value is not None
            got.setdefault(bytes(out.key), []).append(bytes(out.value).decode())
        assert got == want
    assert len({int(outs.split(":")[0]) for outs in want[b"k1"]}) > 1


def describe_records(records: Sequence[Record]) -> list[tuple[bytes, bytes, int, int]]:
    """`describe` for Records rather than Kafka messages."""
    return [(r.key or b"", r.value or b"", r.offset, r.timestamp) for r in records]


def test_a_ttl_outside_process_needs_a_time() -> None:
    with JobHarness(Dedup) as harness:
        with pytest.raises(ValueError, match="record"):
            harness.store.state.put("k", 1, ttl_ms=5)
        harness.send(Record(b"a", b"1", "input", 0, 0, 100))
        assert harness.store.state.now == 100
