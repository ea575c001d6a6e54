"""How many records a round's replay may take: pure, every case."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from processor.runtime.replay_round import replay_bite


def test_alone_a_replay_takes_a_full_batch() -> None:
    assert replay_bite(None, activation_next=False, input_replays=True) == 5000
    assert replay_bite(None, activation_next=False, input_replays=False) == 5000


def test_beside_active_tasks_it_takes_what_they_left_and_at_least_a_small_bite() -> None:
    assert replay_bite(0, activation_next=False, input_replays=True) == 5000
    assert replay_bite(1500, activation_next=False, input_replays=True) == 3500
    assert replay_bite(4800, activation_next=False, input_replays=True) == 1000
    assert replay_bite(5000, activation_next=False, input_replays=False) == 1000


def test_before_an_activation_only_an_input_replay_takes_small_bites() -> None:
    """process() held the loop ~100 ms with a full bite; a changelog apply ~5 ms."""
    assert replay_bite(None, activation_next=True, input_replays=True) == 1000
    assert replay_bite(200, activation_next=True, input_replays=True) == 1000
    assert replay_bite(None, activation_next=True, input_replays=False) == 5000
    assert replay_bite(1500, activation_next=True, input_replays=False) == 3500


@given(st.one_of(st.none(), st.integers(0, 5000)), st.booleans(), st.booleans())
def test_a_bite_is_never_empty_nor_more_than_a_batch(took: int | None, next_: bool,
                                                    input_: bool) -> None:
    bite = replay_bite(took, next_, input_)
    assert 1000 <= bite <= 5000
    if next_ and input_:
        assert bite == 1000
