"""The idle back-off's decisions: when an idle active consumer pauses and resumes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from processor.runtime.idle_fetch import IdleFetch, after_poll, before_poll

BACKOFF = 0.01


def test_records_end_the_idle_spell() -> None:
    state = IdleFetch(idle_since=0.0)
    assert after_poll(state, 5.0, found=1, at_end=True, backoff_s=BACKOFF) == (IdleFetch(), False)


def test_pauses_once_idle_as_long_as_the_backoff_and_read_to_the_end() -> None:
    state, pause = after_poll(IdleFetch(), 1.0, found=0, at_end=True, backoff_s=BACKOFF)
    assert (state, pause) == (IdleFetch(idle_since=1.0), False)
    state, pause = after_poll(state, 1.005, found=0, at_end=True, backoff_s=BACKOFF)
    assert not pause
    state, pause = after_poll(state, 1.01, found=0, at_end=True, backoff_s=BACKOFF)
    assert pause and state == IdleFetch(idle_since=1.0, paused_until=1.02)


def test_never_pauses_before_a_fetch_read_every_partition_to_its_end() -> None:
    state = IdleFetch(idle_since=0.0)
    assert after_poll(state, 9.0, found=0, at_end=False, backoff_s=BACKOFF) == (state, False)


def test_zero_backoff_never_pauses() -> None:
    state = IdleFetch(idle_since=0.0)
    assert after_poll(state, 9.0, found=0, at_end=True, backoff_s=0.0)[1] is False


def test_resumes_when_the_backoff_is_over_and_keeps_the_spell() -> None:
    paused = IdleFetch(idle_since=1.0, paused_until=1.02)
    assert before_poll(paused, 1.019) == (paused, False)
    assert before_poll(paused, 1.02) == (IdleFetch(idle_since=1.0), True)
    assert before_poll(IdleFetch(idle_since=1.0), 5.0) == (IdleFetch(idle_since=1.0), False)


@given(st.lists(st.tuples(st.floats(0.0, 0.05), st.integers(0, 3), st.booleans()),
                max_size=60),
       st.sampled_from([0.0, 0.005, 0.01, 0.1]))
def test_a_spell_of_polls(polls: list[tuple[float, int, bool]], backoff: float) -> None:
    """Whatever the polls: a pause lasts exactly the back-off, follows a poll that found
    nothing with every partition at its end, after at least the back-off of nothing; a
    poll that finds records is never followed by a pause."""
    state, now = IdleFetch(), 0.0
    last_found: float | None = None
    for step, found, at_end in polls:
        now += step
        state, resumed = before_poll(state, now)
        if resumed:
            assert not state.paused
        state, pause = after_poll(state, now, found, at_end, backoff)
        if found:
            last_found = now
            assert state == IdleFetch() and not pause
        if pause:
            assert backoff > 0 and at_end and not found
            assert state.paused_until == now + backoff
            assert state.idle_since is not None and now - state.idle_since >= backoff
            assert last_found is None or state.idle_since >= last_found
        if state.paused:
            assert state.paused_until is not None and state.paused_until <= now + backoff
