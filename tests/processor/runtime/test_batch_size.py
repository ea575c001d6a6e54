"""The active batch's size from the job's cost a record: pure, every case."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from processor.runtime.batch_size import BatchSize


def test_a_full_batch_until_a_round_was_measured() -> None:
    size = BatchSize(5000)
    assert size.bite() == 5000
    size.observe(0, 3.0)                 # nothing read: nothing learnt
    assert size.bite() == 5000


def test_a_fast_job_keeps_full_batches() -> None:
    size = BatchSize(5000)
    for _ in range(10):
        size.observe(5000, 5000 * 10e-6)    # 10 us a record: 50 ms a full batch
    assert size.bite() == 5000


def test_a_slow_job_takes_a_tenth_of_a_second_of_records() -> None:
    size = BatchSize(5000)
    size.observe(5000, 5000 * 0.5e-3)       # 0.5 ms a record: 2.5 s a full batch
    assert size.bite() == 200
    for _ in range(20):
        size.observe(200, 200 * 20e-3)      # 20 ms a record: at least 50 records still
    assert size.bite() == 50


def test_one_slow_round_does_not_shrink_the_batches_for_long() -> None:
    size = BatchSize(5000)
    for _ in range(10):
        size.observe(5000, 5000 * 10e-6)
    size.observe(5000, 5.0)                 # a stall: 1 ms a record once
    assert size.bite() < 5000
    for _ in range(15):
        size.observe(size.bite(), size.bite() * 10e-6)
    assert size.bite() == 5000


def test_a_whole_bite_counts_as_a_full_batch() -> None:
    size = BatchSize(5000)
    assert size.share(200, 200) == 5000
    assert size.share(100, 200) == 2500
    assert size.share(0, 200) == 0
    assert size.share(5000, 5000) == 5000


@given(st.lists(st.tuples(st.integers(0, 5000), st.floats(0, 60)), max_size=30))
def test_a_bite_is_never_empty_nor_more_than_a_batch(rounds: list[tuple[int, float]]) -> None:
    size = BatchSize(5000)
    for records, seconds in rounds:
        size.observe(records, seconds)
        bite = size.bite()
        assert 50 <= bite <= 5000
        assert 0 <= size.share(min(records, bite), bite) <= 5000
