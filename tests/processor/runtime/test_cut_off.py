"""When the active consumer is probed and replaced (processor/runtime/cut_off.py): the
decisions alone."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from processor.runtime.cut_off import FetchWatch, after_poll, after_probe

EVERY, CUT_OFF = 10.0, 30.0


def test_records_or_no_partitions_end_the_spell() -> None:
    quiet = FetchWatch(quiet_since=0.0, probed_at=10.0, cut_off_since=10.0)
    assert after_poll(quiet, 15.0, found=True, assigned=True) == (FetchWatch(), False)
    assert after_poll(quiet, 15.0, found=False, assigned=False) == (FetchWatch(), False)


def test_a_quiet_consumer_is_probed_every_period() -> None:
    watch, probe = after_poll(FetchWatch(), 1.0, found=False, assigned=True)
    assert (watch, probe) == (FetchWatch(quiet_since=1.0), False)
    watch, probe = after_poll(watch, 10.9, found=False, assigned=True)
    assert not probe
    watch, probe = after_poll(watch, 11.0, found=False, assigned=True)
    assert probe and watch == FetchWatch(quiet_since=1.0, probed_at=11.0)
    watch, probe = after_poll(watch, 20.9, found=False, assigned=True)
    assert not probe
    assert after_poll(watch, 21.0, found=False, assigned=True)[1]


def test_replaced_only_when_cut_off_while_others_answer_for_the_whole_bound() -> None:
    watch = FetchWatch(quiet_since=0.0, probed_at=10.0)
    watch, replace = after_probe(watch, 10.0, answered=False, others_answered=True)
    assert not replace and watch.cut_off_since == 10.0
    watch, replace = after_probe(watch, 39.9, answered=False, others_answered=True)
    assert not replace
    assert after_probe(watch, 40.0, answered=False, others_answered=True) == (
        FetchWatch(), True)


def test_an_answer_or_brokers_away_end_the_count() -> None:
    cut = FetchWatch(quiet_since=0.0, probed_at=30.0, cut_off_since=10.0)
    for answered, others in ((True, True), (False, False)):
        watch, replace = after_probe(cut, 45.0, answered=answered, others_answered=others)
        assert not replace and watch.cut_off_since is None and watch.quiet_since == 0.0


@given(st.lists(st.tuples(st.floats(0.0, 8.0), st.booleans(), st.booleans(),
                          st.booleans()), max_size=80))
def test_a_run_of_polls_and_probes(steps: list[tuple[float, bool, bool, bool]]) -> None:
    """Whatever the polls and probes: a probe comes only after `EVERY` of quiet, and a
    replacement only after probes that found the consumer alone cut off for `CUT_OFF`,
    with no poll that found records (or lacked partitions) in between."""
    watch, now = FetchWatch(), 0.0
    quiet_since: float | None = None
    alone_since: float | None = None
    last_probe: float | None = None
    for step, found, answered, others in steps:
        now += step
        watch, probe = after_poll(watch, now, found, assigned=True, probe_every_s=EVERY)
        if found:
            quiet_since = alone_since = last_probe = None
            assert not probe
            continue
        quiet_since = now if quiet_since is None else quiet_since
        if not probe:
            continue
        assert now - (last_probe if last_probe is not None else quiet_since) >= EVERY
        last_probe = now
        watch, replace = after_probe(watch, now, answered, others, CUT_OFF)
        if answered or not others:
            alone_since = None
            assert not replace
            continue
        alone_since = now if alone_since is None else alone_since
        assert replace == (now - alone_since >= CUT_OFF)
        if replace:
            quiet_since = alone_since = last_probe = None
