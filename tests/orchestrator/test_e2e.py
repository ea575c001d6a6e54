"""End to end: the coordinator and processor daemons as subprocesses on the broker,
a RunningSum job under a live keyed producer, and the running-sum oracle (per key,
the committed outputs equal the running sums of that key's inputs: no gap, no
duplicate).

- scale out: 2 processors, a third joins, `baton wait --until balanced` returns 0,
  the third holds tasks;
- the coordinator is SIGKILLed and restarted while a handoff is catching up, and
  while one is releasing: the handoffs complete.

The phases are held open on purpose, never timed: a SIGSTOPped target cannot catch
up (so its handoffs stay in catching_up), SIGSTOPped sources cannot acknowledge a
release (so their handoffs stay in releasing) while the coordinator is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.wire.config import load_config
from orchestrator.wire.http import httpx
from tests.daemon_support import Daemon, wait_for_coordinator
from tests.feeder import Feeder
from tests.oracle_report import oracle_check, unseen
from tests.waiting import wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 4


def processor_config(path: Path, pid: str) -> Path:
    """The job's config with this processor's own state directory (stores are per
    processor: two processes must never open one RocksDB directory)."""
    own = path.with_name(f"{path.stem}-{pid}.toml")
    text = path.read_text()
    config = load_config(path)
    own.write_text(text.replace(str(config.processor.state_dir),
                                str(path.parent / f"state-{pid}")))
    assert load_config(own).state_dir != config.state_dir
    return own


class Job:
    """A coordinator and its processors for one job config."""

    def __init__(self, config: Any, path: Path, daemons: Callable[..., Daemon]) -> None:
        self.config, self.path, self.daemons = config, path, daemons
        self.coordinator: Daemon | None = None
        self.processors: dict[str, Daemon] = {}
        self.restarts = 0

    def start_coordinator(self) -> Any:
        self.restarts += 1
        self.coordinator = self.daemons(f"coordinator-{self.restarts}", "coordinator", "-c",
                                        self.path)
        self.client = wait_for_coordinator(self.config, self.coordinator)
        return self.client

    def start_processor(self, pid: str, registered: bool = True, shared: bool = False,
                        state_dir: Path | None = None) -> Daemon:
        """Start a processor; by default wait until the coordinator knows it. `shared`:
        with the job's own config, as an operator starts several on one host;
        `state_dir`: its stores there (`--state-dir`)."""
        config = self.path if shared else processor_config(self.path, pid)
        where = ("--state-dir", str(state_dir)) if state_dir is not None else ()
        daemon = self.daemons(pid, "processor", "-c", config, "--id", pid, *where)
        self.processors[pid] = daemon
        if registered:
            wait_for(lambda: pid in self.holding() or not daemon.running(), 60,
                     f"{pid} registered")
            self.check_running()
        return daemon

    def status(self) -> dict[str, Any]:
        return dict(self.client.status())

    def metrics(self) -> str:
        """The leading coordinator's Prometheus text (`/metrics` needs no token)."""
        return str(httpx.get(f"{self.client.url}/metrics", timeout=10).text)

    def holding(self) -> dict[str, list[str]]:
        return {p["id"]: p["active"] for p in self.status()["processors"] if p["alive"]}

    def signal(self, pids: list[str], sig: signal.Signals) -> None:
        for pid in pids:
            os.kill(self.processors[pid].pid, sig)

    def check_running(self) -> None:
        for name, daemon in self.processors.items():
            assert daemon.running(), f"{name} exited: {daemon.log()[-3000:]}"

    def balanced(self) -> bool:
        self.check_running()
        status = self.status()
        return bool(status["balanced"]) and not status["handoffs"]

    def handoffs(self, phase: str) -> list[dict[str, Any]]:
        return [h for h in self.status()["handoffs"] if h["phase"] == phase]

    def all_handoffs(self, phase: str) -> bool:
        handoffs = self.status()["handoffs"]
        return bool(handoffs) and all(h["phase"] == phase for h in handoffs)

    def baton_wait(self, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestrator.cli", "wait", "-c",
                               str(self.path), "--until", "balanced", "--timeout",
                               str(timeout)], capture_output=True, text=True,
                              timeout=timeout + 30, cwd=ROOT)

    def all_consumed(self, total: int) -> bool:
        """Every input record is committed (task lags 0 and the producer's count reached)."""
        status = self.status()
        return all(t["lag"] == 0 for t in status["tasks"]) and sum(
            self._ends().values()) >= total

    def _ends(self) -> dict[str, int]:
        from confluent_kafka.admin import AdminClient  # noqa: F401 - keeps imports local

        status = self.status()
        return {p: 0 for t in status["tasks"] for p in t["partitions"]} | self._high()

    def _high(self) -> dict[str, int]:
        from orchestrator.kafka.topics import TopicAdmin

        admin = TopicAdmin(self.config.kafka_settings(), "e2e-reader")
        try:
            partitions = [p for t in self.status()["tasks"] for p in t["partitions"]]
            return {p: m.high for p, m in admin.watermarks(partitions).items()}
        finally:
            admin.close()


def finish(job: Job, feeder: Feeder, broker: Any) -> None:
    """Stop the producer, let every record through, and check the oracle."""
    sent = feeder.stop()
    wait_for(lambda: job.all_consumed(sent), 120, f"all {sent} records consumed")
    result = oracle_check(broker, job.config)
    assert result.ok, result
    assert result.records_in == sent, unseen(broker, job.config.job.inputs[0], feeder.delivered)


def start_two(job: Job, broker: Any, rate: float = 300.0) -> Feeder:
    job.start_coordinator()
    job.start_processor("p1")
    job.start_processor("p2")
    wait_for(lambda: job.balanced() and sorted(len(a) for a in job.holding().values()) == [2, 2],
             90, "p1 and p2 balanced with 2 tasks each")
    return Feeder(broker, job.config.job.inputs[0], keys=40, rate=rate).start()


@pytest.mark.smoke
def test_scale_out_to_a_third_processor(job, broker) -> None:
    j = job()
    feeder = start_two(j, broker)
    wait_for(lambda: feeder.sent > 1500, 30, "some traffic")
    j.start_processor("p3")
    waited = j.baton_wait()
    assert waited.returncode == 0, waited.stderr
    holding = j.holding()
    assert holding.get("p3"), holding
    assert sorted(len(a) for a in holding.values()) == [1, 1, 2]
    j.check_running()
    finish(j, feeder, broker)
    metrics = j.metrics()
    assert 'baton_handoffs_total{job="' in metrics


def test_coordinator_killed_while_catching_up(job, broker) -> None:
    # acceptable_lag 10 and a backlog: the warmups are far behind when p3 is frozen. A
    # warmup replays 20,000 records in well under 100 ms: the backlog is 100,000, and the
    # status is polled often, or the catching-up phase could pass between two polls
    j = job(catch_up={"acceptable_lag": 10},
            coordinator={"processor_timeout_ms": 60000, "release_timeout_ms": 30000})
    feeder = start_two(j, broker, rate=10000.0)
    wait_for(lambda: feeder.sent > 100000, 60, "a backlog")
    j.start_processor("p3", registered=False)
    # p3 catches a warmup up in tens of ms once it hears of it: freeze it the moment the
    # coordinator's log shows the plan (a /status poll first, then the signal, let the
    # catch-up finish in between on a loaded machine), so its handoffs cannot release
    assert j.coordinator is not None
    coordinator = j.coordinator
    wait_for(lambda: "-> p3 planned" in coordinator.log(), 60, "a handoff to p3 planned",
             step=lambda: time.sleep(0.002))
    j.signal(["p3"], signal.SIGSTOP)
    assert j.handoffs("catching_up") or j.handoffs("planned"), j.status()["handoffs"]
    j.coordinator.kill()
    j.start_coordinator()
    assert j.handoffs("catching_up") or j.handoffs("planned"), j.status()["handoffs"]
    j.signal(["p3"], signal.SIGCONT)
    waited = j.baton_wait()
    assert waited.returncode == 0, waited.stderr
    assert j.holding().get("p3")
    j.check_running()
    finish(j, feeder, broker)


def test_coordinator_killed_while_releasing(job, broker) -> None:
    j = job(coordinator={"processor_timeout_ms": 60000, "release_timeout_ms": 60000})
    feeder = start_two(j, broker)
    wait_for(lambda: feeder.sent > 1500, 30, "some traffic")
    # freeze the owners: their T1 stops moving, so p3 catches up, and they cannot
    # acknowledge the release, so the handoffs stay in releasing
    j.signal(["p1", "p2"], signal.SIGSTOP)
    try:
        j.start_processor("p3")
        wait_for(lambda: j.all_handoffs("releasing"), 40, "the handoffs releasing")
        assert j.coordinator is not None
        j.coordinator.kill()
        j.start_coordinator()
        assert j.all_handoffs("releasing"), j.status()["handoffs"]
    finally:
        j.signal(["p1", "p2"], signal.SIGCONT)
    waited = j.baton_wait()
    assert waited.returncode == 0, waited.stderr
    assert j.holding().get("p3")
    j.check_running()
    finish(j, feeder, broker)


def test_drain_then_expand(job, broker) -> None:
    j = job()
    feeder = start_two(j, broker)
    wait_for(lambda: feeder.sent > 1000, 30, "some traffic")
    drained = subprocess.run([sys.executable, "-m", "orchestrator.cli", "drain", "-c",
                              str(j.path), "--processor", "p1", "--wait", "--timeout", "120"],
                             capture_output=True, text=True, timeout=150, cwd=ROOT)
    assert drained.returncode == 0, drained.stderr
    assert j.processors["p1"].wait(30) == 0
    del j.processors["p1"]
    assert j.holding() == {"p2": [f"Partition {i}" for i in range(PARTITIONS)]}
    topic = j.config.job.inputs[0]
    expanded = subprocess.run([sys.executable, "-m", "orchestrator.cli", "expand", "-c",
                               str(j.path), "--topic", topic, "--partitions",
                               str(2 * PARTITIONS), "--timeout", "120"],
                              capture_output=True, text=True, timeout=150, cwd=ROOT)
    assert expanded.returncode == 0, expanded.stderr
    status = j.status()
    # 2: the expansion; 3 once its barriers are settled (expansion_grace_ms 0: at once)
    assert status["generation"] in (2, 3)
    assert status["tasks"][1]["partitions"] == [f"{topic}:1", f"{topic}:{PARTITIONS + 1}"]
    assert status["balanced"], status["pending"]
    j.check_running()
    finish(j, feeder, broker)


def test_wait_for_a_processor_that_has_not_registered_yet(job, broker) -> None:
    """`baton wait --processors p3` right after p3's start waits until p3 holds tasks."""
    j = job()
    feeder = start_two(j, broker)
    j.start_processor("p3", registered=False)       # the wait starts before p3 registers
    waited = subprocess.run([sys.executable, "-m", "orchestrator.cli", "wait", "-c",
                             str(j.path), "--until", "balanced", "--processors", "p3",
                             "--timeout", "120"], capture_output=True, text=True,
                            timeout=150, cwd=ROOT)
    assert waited.returncode == 0, waited.stderr
    assert j.holding().get("p3"), j.holding()
    j.check_running()
    finish(j, feeder, broker)


def test_wait_refuses_a_bad_processor_id(job) -> None:
    j = job()
    j.start_coordinator()
    refused = subprocess.run([sys.executable, "-m", "orchestrator.cli", "wait", "-c",
                              str(j.path), "--until", "balanced", "--processors", "p3,no way"],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert refused.returncode == 2 and "--processors" in refused.stderr, refused.stderr


@pytest.mark.parametrize("old_layout", [False, True], ids=["fresh", "old-layout-stores"])
def test_three_processors_from_one_config(job, broker, old_layout: bool) -> None:
    """One job.toml, one state_dir: the stores live under each processor's id."""
    from store import TaskStore, task_store_path

    j = job()
    if old_layout:      # stores of the layout before the processor id: adopted, not lost
        for task in ("Partition 0", "Partition 1"):
            with TaskStore(task_store_path(j.config.state_dir, j.config.job.name, task)):
                pass
    j.start_coordinator()
    j.start_processor("p1", shared=True)
    j.start_processor("p2", shared=True)
    wait_for(lambda: j.balanced() and sorted(len(a) for a in j.holding().values()) == [2, 2],
             90, "p1 and p2 balanced with 2 tasks each")
    feeder = Feeder(broker, j.config.job.inputs[0], keys=40, rate=300.0).start()
    wait_for(lambda: feeder.sent > 1500, 30, "some traffic")
    j.start_processor("p3", shared=True, registered=False)
    waited = subprocess.run([sys.executable, "-m", "orchestrator.cli", "wait", "-c",
                             str(j.path), "--until", "balanced", "--processors", "p3",
                             "--timeout", "120"], capture_output=True, text=True,
                            timeout=150, cwd=ROOT)
    assert waited.returncode == 0, waited.stderr
    assert sorted(len(a) for a in j.holding().values()) == [1, 1, 2]
    job_dir = j.config.state_dir / j.config.job.name
    assert {p.name for p in job_dir.iterdir() if p.is_dir()} == {"p1", "p2", "p3"}
    again = j.daemons("p1-again", "processor", "-c", j.path, "--id", "p1")
    assert again.wait(60) == 2
    assert "in use by another execution" in again.log() and str(job_dir / "p1") in again.log()
    j.check_running()
    finish(j, feeder, broker)


def test_handoffs_are_counted_by_the_time_wait_returns(job) -> None:
    """No traffic at all: the new owners never output (no pause to report), yet the
    handoffs are counted when they end, so a script reading the counter after
    `baton wait` sees them."""
    j = job()
    j.start_coordinator()
    j.start_processor("p1")
    j.start_processor("p2")
    wait_for(lambda: j.balanced() and sorted(len(a) for a in j.holding().values()) == [2, 2],
             90, "p1 and p2 balanced with 2 tasks each")
    j.start_processor("p3", registered=False)
    waited = subprocess.run([sys.executable, "-m", "orchestrator.cli", "wait", "-c",
                             str(j.path), "--until", "balanced", "--processors", "p3",
                             "--timeout", "120"], capture_output=True, text=True,
                            timeout=150, cwd=ROOT)
    assert waited.returncode == 0, waited.stderr
    metrics = j.metrics()
    done = [line for line in metrics.splitlines()
            if line.startswith("baton_handoffs_total{") and 'outcome="done"' in line]
    assert done and float(done[0].rsplit(" ", 1)[1]) >= 1, done
