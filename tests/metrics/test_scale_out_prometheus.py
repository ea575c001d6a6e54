"""A scale-out watched by a real Prometheus: the coordinator and processor daemons as
subprocesses on the broker, a RunningSum job under a live keyed producer, and Debian's
`prometheus` binary scraping every daemon's /metrics each second.

Prometheus finds its targets in a file_sd target file built from `GET /status` (the
coordinator's own `metrics_url`, and each processor's as it reported it). The file is
rewritten when p3 registers, and Prometheus picks p3 up without a restart, as it
would from an operator's service discovery.

The job runs on p1 and p2 until a backlog has built up; then p3 joins with
`acceptable_lag` 10. p3 runs the same RunningSum on a slower "host": its process()
is paced to `SLOW_RATE` records a second (same outputs, no CPU burnt). Unpaced, a
warmup replays the whole backlog in a fraction of a second, between two scrapes;
paced, its catch-up lasts seconds, so Prometheus records it at its 1 s scrape
interval however loaded the machine is.

What Prometheus recorded (HTTP API: /api/v1/query and /api/v1/query_range) must
show the scale-out: p3's catch-up remaining records above 0, then 0 or gone once
balanced; `baton_handoffs_total{outcome="done"}` up; every processor's
`baton_records_processed_total` and `baton_store_memtable_bytes` above 0. The
running-sum oracle then checks the output, as in tests/orchestrator/test_e2e.py.

(The daemons import this module for `PacedRunningSum`, so it imports nothing that
only exists under pytest's path set-up at run time.)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

from orchestrator.wire.config import load_config
from processor.examples import RunningSum
from processor.job import Output, Record, State
from tests.daemon_support import Daemon
from tests.orchestrator.test_e2e import PARTITIONS, Job, finish, processor_config, start_two
from tests.waiting import wait_for

if TYPE_CHECKING:
    from prometheus_harness import PrometheusServer

pytestmark = pytest.mark.integration

# A warmup is caught up at 10 records behind: the backlog below is hundreds of times that.
ACCEPTABLE_LAG = 10
# 250 records/s per partition: easy for p1 and p2, and for p3 (paced) once it is active.
FEED_RATE = 1000.0
# About 8 s of input, 2,000 records per partition: p3's backlog when it joins.
BACKLOG = 8000
# p3's process() pace: its warmup gains on the input at 800 - 250 = 550 records/s, so
# its catch-up takes about 2000 / 550 = 3.6 s: several scrapes, not a whole minute.
SLOW_RATE = 800.0
# Pacing sleeps only when this far ahead of the pace (fewer, longer sleeps: accurate).
PACING_SLACK_S = 0.01
# The handoff of p3's task: its catch-up (seconds), release and activation.
BALANCED_TIMEOUT_S = 90.0
# A scrape is every second; the target file is watched (inotify) and re-read every second.
SCRAPE_TIMEOUT_S = 30.0


class PacedRunningSum(RunningSum):
    """RunningSum on a slow host: at most `SLOW_RATE` records a second, same outputs."""

    def __init__(self) -> None:
        super().__init__()
        self._due = 0.0

    def process(self, record: Record, state: State) -> Iterator[Output]:
        now = time.monotonic()
        self._due = max(self._due, now) + 1.0 / SLOW_RATE
        if self._due - now > PACING_SLACK_S:
            time.sleep(self._due - now)
        return super().process(record, state)


# By its path from the repository root (pytest imports this file as a top-level module).
PACED = "tests.metrics.test_scale_out_prometheus:PacedRunningSum"


@pytest.fixture
def job(coordinated: Callable[..., Any], daemons: Callable[..., Daemon]) -> Job:
    config, path = coordinated(PARTITIONS, catch_up={"acceptable_lag": ACCEPTABLE_LAG})
    return Job(config, path, daemons)


def start_paced_processor(job: Job, pid: str) -> Daemon:
    """Start `pid` with the job class swapped for `PacedRunningSum`; wait until registered."""
    own = processor_config(job.path, pid)
    text = own.read_text()
    assert f'"{job.config.job.class_}"' in text, text
    own.write_text(text.replace(f'"{job.config.job.class_}"', f'"{PACED}"'))
    assert load_config(own).job.class_ == PACED
    daemon = job.daemons(pid, "processor", "-c", own, "--id", pid)
    job.processors[pid] = daemon
    wait_for(lambda: pid in job.holding() or not daemon.running(), 60, f"{pid} registered")
    job.check_running()
    return daemon


def scrape_target(metrics_url: str) -> str:
    """host:port of a daemon's metrics URL (its path must be Prometheus' default)."""
    parts = urlsplit(metrics_url)
    assert parts.scheme == "http" and parts.path == "/metrics", metrics_url
    return parts.netloc


def targets(status: dict[str, Any]) -> dict[str, str]:
    """Daemon name -> scrape target: the coordinator and every live processor."""
    found = {"coordinator": scrape_target(status["coordinator"]["metrics_url"])}
    for processor in status["processors"]:
        if processor["alive"] and processor.get("metrics_url"):
            found[processor["id"]] = scrape_target(processor["metrics_url"])
    return found


def values(result: list[dict[str, Any]]) -> list[float]:
    return [float(sample["value"][1]) for sample in result]


def wait_scraped(prometheus: PrometheusServer, job_name: str, wanted: dict[str, str]) -> None:
    """Wait until Prometheus has scraped every wanted target successfully."""
    def all_up(result: list[dict[str, Any]]) -> bool:
        up = {s["metric"]["instance"] for s in result if s["value"][1] == "1"}
        return up >= set(wanted.values())
    prometheus.wait_for(f'up{{job="{job_name}"}}', all_up, SCRAPE_TIMEOUT_S)


def query_range(prometheus: PrometheusServer, expr: str, start: float,
                end: float) -> list[list[float]]:
    """/api/v1/query_range at 1 s steps: each series' values, in time order."""
    data = prometheus.api("query_range", query=expr, start=f"{start:.3f}",
                          end=f"{end:.3f}", step="1s")
    assert data["resultType"] == "matrix", data
    return [[float(v) for _, v in series["values"]] for series in data["result"]]


def test_scale_out_as_prometheus_saw_it(
        job: Job, broker: Any, prometheus_factory: Callable[..., PrometheusServer]) -> None:
    from prometheus_harness import require_binary

    require_binary("prometheus")   # a missing binary fails here, before the daemons start
    name = job.config.job.name
    feeder = start_two(job, broker, rate=FEED_RATE)
    try:
        before = targets(job.status())
        assert set(before) == {"coordinator", "p1", "p2"}, before
        prometheus = prometheus_factory(sorted(before.values()), job_name=name, file_sd=True)
        wait_scraped(prometheus, name, before)
        done = f'sum(baton_handoffs_total{{job="{name}",outcome="done"}})'
        done_before = values(prometheus.query(done))
        assert len(done_before) == 1, done_before   # p1 -> p2 handoffs of start_two
        wait_for(lambda: feeder.sent > BACKLOG, 60, f"a backlog of {BACKLOG} records")

        joined = time.time()
        start_paced_processor(job, "p3")
        after = targets(job.status())
        assert set(after) == {"coordinator", "p1", "p2", "p3"}, after
        prometheus.set_targets(sorted(after.values()))
        wait_scraped(prometheus, name, after)
        wait_for(job.balanced, BALANCED_TIMEOUT_S, "the scale-out to p3 balanced",
                 step=lambda: time.sleep(0.2))
        assert job.holding().get("p3"), job.holding()

        # the catch-up fell back: 0, or no series once p3's replica is no longer a warmup
        remaining = f'baton_catchup_remaining_records{{job="{name}",processor="p3"}}'
        prometheus.wait_for(remaining, lambda r: all(v == 0 for v in values(r)),
                            SCRAPE_TIMEOUT_S)
        # ... after it rose while p3 caught up
        seen = query_range(prometheus, remaining, joined, time.time())
        assert seen and max(max(series) for series in seen) > ACCEPTABLE_LAG, seen
        warmup_lag = query_range(prometheus, f'baton_task_lag_records{{job="{name}",'
                                 f'processor="p3",role="warmup"}}', joined, time.time())
        assert warmup_lag and max(max(series) for series in warmup_lag) > ACCEPTABLE_LAG, \
            warmup_lag

        prometheus.wait_for(done, lambda r: values(r)[0] > done_before[0], SCRAPE_TIMEOUT_S)
        prometheus.wait_for(
            f'sum by (processor) (baton_records_processed_total{{job="{name}"}}) > 0',
            lambda r: {s["metric"]["processor"] for s in r} >= {"p1", "p2", "p3"},
            SCRAPE_TIMEOUT_S)
        # the state the tasks wrote, in each processor's memtables
        prometheus.wait_for(
            f'baton_store_memtable_bytes{{job="{name}"}} > 0',
            lambda r: {s["metric"]["processor"] for s in r} >= {"p1", "p2", "p3"},
            SCRAPE_TIMEOUT_S)
        job.check_running()
        finish(job, feeder, broker)
    finally:
        feeder.stop()
