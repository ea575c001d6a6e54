"""The soak's per-daemon figures (bench/soak_sampling.py): which samples they compare
(the same shape of the job, the same role, each settled: a standby that has just taken
over opens its leader's clients in its first seconds as the leader, which is start-up,
not growth), an RSS slope that is a rate after each daemon's own warm-up, not over
a fresh daemon's start-up, and when the end sample is taken."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from soak_sampling import Sample, Sampler, daemon_figures  # noqa: E402 - a bench module

WINDOW_S = 600.0


def _sample(t: float, role: str, fds: int) -> Sample:
    return Sample(t=t, daemon="c1", pid=1, age_s=t, rss_mb=60.0, fds=fds, threads=10,
                  kafka_clients=2, store_files=0, balanced=True, processors="p1+p2",
                  role=role)


def test_a_new_leader_is_compared_from_its_settled_samples_as_the_leader() -> None:
    samples = [_sample(t, "standby", 20) for t in (20.0, 30.0, 40.0)]
    samples += [_sample(50.0, "leader", 21),        # just took over: clients opening
                _sample(60.0, "leader", 36), _sample(70.0, "leader", 37)]
    [figures] = daemon_figures(samples, window_s=0.0)
    assert (figures["fds_start"], figures["fds_end"]) == (36, 37)


def test_a_daemon_that_kept_its_role_is_compared_from_its_first_settled_sample() -> None:
    samples = [_sample(t, "standby", 20 + int(t) // 10) for t in (5.0, 15.0, 25.0, 35.0)]
    [figures] = daemon_figures(samples, window_s=0.0)
    assert (figures["fds_start"], figures["fds_end"]) == (21, 23)


def _samples(daemon: str, started: float, until: float, rss_at: float, mb_per_hour: float,
             role: str = "active") -> list[Sample]:
    """A daemon sampled every 10 s from `started`, its RSS rising steadily."""
    out = []
    t = started
    while t <= until:
        out.append(Sample(t=t, daemon=daemon, pid=1, age_s=t - started,
                          rss_mb=rss_at + mb_per_hour * (t - started) / 3600, fds=50,
                          threads=20, kafka_clients=4, store_files=5, balanced=True,
                          processors="p1", role=role))
        t += 10.0
    return out


def _by_name(samples: list[Sample]) -> dict[str, dict[str, object]]:
    return {d["name"]: d for d in daemon_figures(samples, WINDOW_S)}


def test_a_daemon_up_all_run_has_the_slope_of_its_samples_after_the_window() -> None:
    figures = _by_name(_samples("p1", 0.0, 3600.0, 70.0, 4.0))
    assert figures["p1"]["rss_slope_mb_per_hour"] == 4.0


def test_the_slope_skips_a_late_daemons_own_warm_up() -> None:
    # 30 MB/hour in its first ten minutes, then 2 MB/hour: the slope is the latter
    warm = _samples("c0", 1800.0, 2400.0, 60.0, 30.0, role="leader")
    steady = _samples("c0", 2410.0, 3600.0, 0.0, 2.0, role="leader")
    steady = [Sample(**{**s.__dict__, "age_s": s.t - 1800.0,
                        "rss_mb": warm[-1].rss_mb + 2.0 * (s.t - 2400.0) / 3600})
              for s in steady]
    figures = _by_name(warm + steady)
    assert figures["c0"]["rss_slope_mb_per_hour"] == 2.0


def test_a_daemon_that_never_outlives_its_warm_up_has_no_slope() -> None:
    # a coordinator between two failovers: eight minutes of start-up
    figures = _by_name(_samples("c1", 1200.0, 1680.0, 66.0, 80.0, role="leader"))
    assert figures["c1"]["rss_slope_mb_per_hour"] is None
    assert figures["c1"]["rss_mb_end"] > figures["c1"]["rss_mb_start"]    # still reported


def _waited(balanced: bool, timeout_s: float, tmp_path: Path) -> float:
    """Seconds `settle_clients` waited for this process (no librdkafka client), labelled
    p1, whose floor is below what it holds (-1): it can never reach it."""
    shape = (balanced, "p1+p2", {"p1": "active"})
    sampler = Sampler(lambda: {"p1": (os.getpid(), 0.0)}, lambda: shape, tmp_path)
    sampler.samples = [Sample(t=1.0, daemon="p1", pid=os.getpid(), age_s=1.0, rss_mb=1.0,
                              fds=1, threads=1, kafka_clients=-1, store_files=0,
                              balanced=True, processors="p1+p2", role="active")]
    started = time.monotonic()
    sampler.settle_clients(timeout_s, quiet_s=1.5)
    return time.monotonic() - started


def test_the_end_sample_waits_until_the_clients_hold_still(tmp_path: Path) -> None:
    # above its floor for good (a client kept once made), but still: the wait ends
    assert 1.4 <= _waited(True, 30.0, tmp_path) < 10.0
    # not balanced: the job is still moving, so the wait runs to its bound
    assert _waited(False, 4.0, tmp_path) >= 4.0
