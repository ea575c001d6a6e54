"""bench/soak_sampling.py's choice of the samples a daemon's figures compare: the same
shape of the job, the same role, each settled; a standby that has just taken over
opens its leader's clients in its first seconds as the leader, which is start-up, not
growth."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from soak_sampling import Sample, daemon_figures  # noqa: E402 - a bench module


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
