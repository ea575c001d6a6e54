"""The autoscaling recommendation on plain samples and a clock that moves by the test:
a job whose processors each serve 1,000 records/s at full busy."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.core.autoscale import AutoscalePolicy, Load, Recommender, Sample

CAPACITY = 1000.0       # records/s one processor serves at full busy


@dataclass
class Job:
    """A simulated job: input at `rate`, `processors` of CAPACITY each, the lag that
    piles up when they cannot keep up; one sample a second into the recommender."""

    recommender: Recommender
    processors: int = 2
    tasks: int = 8
    rate: float = 1000.0
    warmup_s: float = 0.0
    now: float = 0.0
    end: float = 0.0
    lag: float = 0.0
    seen: list[int] = field(default_factory=list)

    def run(self, seconds: int) -> None:
        for _ in range(seconds):
            self.now += 1.0
            self.end += self.rate
            served = min(self.rate + self.lag, CAPACITY * self.processors)
            self.lag = max(0.0, self.lag + self.rate - served)
            each = served / self.processors
            loads = {f"p{i}": Load(each, each / CAPACITY) for i in range(self.processors)}
            self.recommender.observe(Sample(self.now, loads, int(self.end), int(self.lag),
                                            self.tasks, self.warmup_s))
            found = self.recommender.recommend()
            assert found is not None
            self.seen.append(found.processors)

    @property
    def recommended(self) -> int:
        return self.seen[-1]


def job(**policy: object) -> Job:
    return Job(Recommender(AutoscalePolicy(**policy)))  # type: ignore[arg-type]


def test_nothing_before_the_first_sample() -> None:
    assert Recommender(AutoscalePolicy()).recommend() is None


def test_a_steady_job_at_its_target_holds() -> None:
    j = job()
    j.run(400)
    assert set(j.seen) == {2}
    found = j.recommender.recommend()
    assert found is not None and found.direction == "hold"
    assert found.capacity_per_processor == pytest.approx(CAPACITY)   # 500/s at 0.5 busy


def test_a_step_up_is_recommended_within_half_a_minute_and_burns_the_lag() -> None:
    j = job()
    j.run(60)
    j.rate = 4000.0
    j.run(30)
    first_up = next(i for i, n in enumerate(j.seen[60:]) if n > 2)
    assert first_up <= 25
    found = j.recommender.recommend()
    assert found is not None and found.direction == "up"
    assert found.capacity_per_processor == pytest.approx(CAPACITY)
    assert found.input_rate == pytest.approx(4000.0)
    # 4,000/s at 70 % of 1,000 needs 6; the lag piled up meanwhile needs more
    assert found.processors >= 6 and found.demand is not None and found.demand > 4000
    assert "every estimate of the last 15 s needs more" in found.reason


@pytest.mark.parametrize("step", [2.0, 3.0, 4.0])
def test_a_step_up_is_met_by_one_scale_out(step: float) -> None:
    """The count acted on (10 s after it is recommended: the new processors' start and
    warmups) serves the step: no second scale-out follows the first."""
    j = job()
    j.run(60)
    j.rate = 1000.0 * step
    changes, due = [], None
    for second in range(240):
        j.run(1)
        if due is None and j.recommended > j.processors:
            due = (second + 10, j.recommended)
        if due is not None and second == due[0]:
            j.processors, due = due[1], None
            changes.append(j.processors)
    assert len(changes) == 1, changes
    assert j.lag == 0 and j.processors >= 1000.0 * step / CAPACITY


@pytest.mark.parametrize("window_s", [12, 60, 300])
def test_a_step_down_is_met_by_one_scale_in(window_s: int) -> None:
    j = job(down_window_s=float(window_s))
    j.processors, j.rate = 6, 4000.0
    j.run(400)
    j.rate = 1000.0
    changes = []
    for _ in range(window_s + 60):
        j.run(1)
        if j.recommended != j.processors:
            j.processors = j.recommended
            changes.append(j.processors)
    assert changes == [2]


def test_a_spike_shorter_than_the_up_window_does_not_scale() -> None:
    j = job()
    j.run(60)
    j.rate = 4000.0
    j.run(5)
    j.rate = 1000.0
    j.run(120)
    assert set(j.seen) == {2}


def test_a_step_down_waits_out_its_window_and_keeps_the_peak() -> None:
    j = job()
    j.processors, j.rate = 6, 4000.0
    j.run(400)
    assert j.recommended == 6
    j.rate = 1000.0
    j.run(290)
    assert j.recommended == 6                        # the down window is 300 s
    j.run(20)
    assert j.recommended == 2
    found = j.recommender.recommend()
    assert found is not None and "needs fewer (the window's peak kept)" in found.reason


def test_no_scale_down_that_the_next_sample_would_undo() -> None:
    """A load that sits at 60-90 % of two processors never recommends one."""
    j = job()
    for rate in (1200.0, 1800.0) * 20:
        j.rate = rate
        j.run(20)
    assert min(j.seen) == 2


def test_the_warmups_time_is_demand_too() -> None:
    quick, slow = job(), job()
    slow.warmup_s = 120.0
    for j in (quick, slow):
        j.run(60)
        j.rate = 2500.0
        j.run(40)
    assert slow.recommended > quick.recommended


def test_the_count_stays_within_min_max_and_the_tasks() -> None:
    j = job(min_processors=3)
    j.run(30)
    assert j.recommended == 3
    j = job(max_processors=4)
    j.run(30)
    j.rate = 9000.0
    j.run(40)
    assert j.recommended == 4


@pytest.mark.parametrize("allowed", [False, True])
def test_past_the_task_count_it_says_expand_when_allowed(allowed: bool) -> None:
    j = job(allow_expand=allowed)
    j.tasks = 4
    j.run(30)
    j.rate = 9000.0
    j.run(40)
    found = j.recommender.recommend()
    assert found is not None and found.processors == 4
    assert found.expand is allowed
    assert ("expand the inputs and split the tasks" if allowed
            else "expanding is not allowed ([autoscale] allow_expand)") in found.reason


def test_past_the_task_count_it_says_why_tasks_that_cannot_split_are_not_expanded() -> None:
    j = job(allow_expand=True, cannot_split="a split needs catch_up.source = \"input\"")
    j.tasks = 4
    j.run(30)
    j.rate = 9000.0
    j.run(40)
    found = j.recommender.recommend()
    assert found is not None and found.processors == 4 and found.expand is False
    assert "expanding is not possible: a split needs catch_up.source" in found.reason


def test_decisions_per_hour_are_bounded() -> None:
    """Load that swings every two minutes: three decisions, then it holds for the hour."""
    j = job(max_decisions_per_hour=3, down_window_s=20)
    decided = []
    for _ in range(10):
        for rate in (4000.0, 300.0):
            j.rate = rate
            before = j.processors
            j.run(60)
            j.processors = j.recommended         # an autoscaler acts on each
            if j.processors != before:
                decided.append(j.now)
    assert len(decided) == 3, decided
    found = j.recommender.recommend()
    assert found is not None and found.direction == "hold"
    assert "held: 3 decisions in the last hour" in found.reason


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(
    st.dictionaries(st.sampled_from(["p1", "p2", "p3", "p4"]),
                    st.tuples(st.floats(0, 1e6), st.floats(0, 1)), max_size=4),
    st.integers(0, 10**6), st.integers(0, 10**7), st.integers(1, 64),
    st.floats(0, 3600)), min_size=1, max_size=40))
def test_any_samples_give_a_count_within_bounds(samples: list[tuple[
        dict[str, tuple[float, float]], int, int, int, float]]) -> None:
    """Whatever the processors report (idle, busy with no active records, a count that
    went down), the recommendation is a count within its bounds, never an error."""
    recommender = Recommender(AutoscalePolicy(min_processors=1, max_processors=6))
    end = 0
    for at, (loads, grew, lag, tasks, warmup_s) in enumerate(samples):
        end += grew
        recommender.observe(Sample(float(at), {p: Load(r, b) for p, (r, b) in loads.items()},
                                   end, lag, tasks, warmup_s))
        found = recommender.recommend()
        assert found is not None
        assert 1 <= found.processors <= max(1, min(6, tasks))
