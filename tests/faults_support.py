"""The fault-injection suite's moves (tests/test_faults.py; the CLI's failover test
uses them too): two processors under traffic, a scale-out held in a phase by freezing a
process, a second coordinator standing by, and the check every case ends with (converge,
then the running-sum oracle), whose rows the suite's table prints.
"""

from __future__ import annotations

import signal
import time
import tomllib
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from orchestrator.devkit.embedded import free_port
from orchestrator.wire.client import CoordinatorUnreachable
from orchestrator.wire.config import dump_config, load_config
from tests.brokers import Broker
from tests.feeder import Feeder
from tests.oracle_report import oracle_check
from tests.orchestrator.test_e2e import PARTITIONS, Job
from tests.waiting import wait_for

__all__ = [
    "BEFORE_RELEASE", "FAST", "FAULT_FIGURES", "FAULT_RESULTS", "PATIENT", "backlog_scale_out",
    "committed_records", "hold_activating", "hold_releasing", "in_phase", "leader_killed",
    "leads", "source_of", "start_standby", "two_under_traffic", "verify", "with_standby_url",
]

# (case, records in, records out, lost, duplicated, wrong, seconds from the traffic's
# start to the oracle's verdict) rows of the fault suite, printed by tests/conftest.py's
# pytest_terminal_summary
FAULT_RESULTS: list[tuple[str, int, int, int, int, int, float]] = []
# what a case measured (name -> seconds), printed under the table
FAULT_FIGURES: dict[str, float] = {}

# short timeouts so declared-dead paths run in seconds; processors are never timed out
# by silence unless a case wants it
FAST = {"coordinator": {"release_timeout_ms": 4000, "processor_timeout_ms": 3000}}
# long ones, so a frozen process is never declared dead while its case holds it
PATIENT = {"coordinator": {"release_timeout_ms": 60000, "processor_timeout_ms": 60000}}
# Owners frozen while a new processor starts and catches up (`hold_releasing`: up to
# 15 s on a loaded machine) and thawed to release must find their open transactions
# still there: past the producers' transaction.timeout.ms (Baton's default 10 s) the
# broker aborts them, the thawed owners are fenced and their tasks fail instead of
# releasing (safe, but not the case such a test is after)
THAWED_OWNERS = {"transaction.timeout.ms": 60000}


def two_under_traffic(j: Job, broker: Broker, rate: float = 400.0) -> Feeder:
    """A coordinator, p1 and p2 balanced with two tasks each, and a feeder running."""
    j.start_coordinator()
    j.start_processor("p1")
    j.start_processor("p2")
    wait_for(lambda: j.balanced() and sorted(len(a) for a in j.holding().values()) == [2, 2],
             90, "p1 and p2 balanced with 2 tasks each")
    feeder = Feeder(broker, j.config.job.inputs[0], keys=40, rate=rate).start()
    wait_for(lambda: feeder.sent > 1000, 30, "some traffic")
    return feeder


def source_of(j: Job, *phases: str) -> str:
    """The old owner of the first handoff in one of `phases`."""
    handoffs = [h for phase in phases for h in j.handoffs(phase)]
    assert handoffs, j.status()["handoffs"]
    return str(handoffs[0]["from"])


# A handoff whose target has not caught up yet. Catching up a few thousand records
# takes the target tens of milliseconds, so the phase before it (planned: the warmup is
# listed, not yet reported) counts too; the target is frozen the moment it is seen.
BEFORE_RELEASE = ("planned", "catching_up")


def leads(j: Job) -> bool:
    """Whether a coordinator answers /status as the leader."""
    try:
        j.status()
    except CoordinatorUnreachable:
        return False
    return True


def in_phase(j: Job, phase: str) -> bool:
    """A handoff in `phase` ("catching_up": before its release, see above)."""
    phases = BEFORE_RELEASE if phase == "catching_up" else (phase,)
    return any(j.handoffs(p) for p in phases)


def verify(case: str, j: Job, feeder: Feeder, broker: Broker,
           alive: tuple[str, ...]) -> None:
    """Converge, finish the traffic, and check the oracle; record the row."""
    for pid in [p for p in j.processors if p not in alive]:
        del j.processors[pid]          # killed on purpose; not expected to run
    waited = j.baton_wait()
    assert waited.returncode == 0, waited.stderr
    j.check_running()
    sent = feeder.stop()
    wait_for(lambda: j.all_consumed(sent), 120, f"all {sent} records consumed")
    result = oracle_check(broker, j.config)
    FAULT_RESULTS.append((case, result.records_in, result.records_out, result.lost,
                          result.duplicated, result.wrong, time.monotonic() - feeder.started))
    assert result.records_in == sent
    assert result.ok, result


def backlog_scale_out(j: Job, broker: Broker) -> Feeder:
    """Two processors, a fast feeder, then p3 joins far behind: handoffs catch up."""
    feeder = two_under_traffic(j, broker, rate=2000.0)
    wait_for(lambda: feeder.sent > 20000, 60, "a backlog")
    j.start_processor("p3", registered=False)
    # p3 catches ~5,000 records a task up in a few tens of ms, ~0.1 s after the plan: read
    # the plan from the coordinator's log, not from /status (whose answers can wait on a
    # decision), and freeze p3 at once to hold the handoff before its release
    wait_for(lambda: "-> p3 planned" in j.coordinator.log(), 60, "a handoff to p3 planned",
             step=lambda: time.sleep(0.002))
    j.signal(["p3"], signal.SIGSTOP)
    assert any(j.handoffs(p) for p in BEFORE_RELEASE), j.status()["handoffs"]
    return feeder


def hold_releasing(j: Job, broker: Broker) -> Feeder:
    """Frozen owners: T1 stops, p3 catches up, nobody acknowledges the release."""
    feeder = two_under_traffic(j, broker)
    j.signal(["p1", "p2"], signal.SIGSTOP)
    j.start_processor("p3")
    wait_for(lambda: j.all_handoffs("releasing"), 60, "the handoffs releasing")
    return feeder


def hold_activating(j: Job, broker: Broker) -> Feeder:
    """p3 caught up, then frozen; the owners released: the handoffs sit in activating."""
    feeder = hold_releasing(j, broker)
    j.signal(["p3"], signal.SIGSTOP)
    j.signal(["p1", "p2"], signal.SIGCONT)
    wait_for(lambda: j.all_handoffs("activating"), 60, "the handoffs activating")
    return feeder


def committed_records(broker: Broker, group: str, topic: str) -> int:
    """Records the job has committed on `topic` (read straight from the broker)."""
    consumer = Consumer(broker.settings(**{"group.id": group}))
    try:
        parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        return sum(max(tp.offset, 0) for tp in consumer.committed(parts, timeout=10))
    finally:
        consumer.close()


def with_standby_url(j: Job) -> str:
    """Rewrite the job's config with two coordinator URLs; returns the standby's listen."""
    listen = f"127.0.0.1:{free_port()}"
    raw = tomllib.loads(j.path.read_text())
    raw["coordinator"]["url"] = [j.config.coordinator.urls[0], f"http://{listen}"]
    j.path.write_text(dump_config(raw))
    j.config = load_config(j.path)
    return listen


def start_standby(j: Job, listen: str) -> Any:
    """A second coordinator on `listen`, started and standing by."""
    standby = j.daemons("coordinator-standby", "coordinator", "-c", j.path, "--listen", listen)
    wait_for(lambda: "standby: job" in standby.log() or not standby.running(), 30,
             "the second coordinator standing by")
    assert standby.running(), standby.log()
    return standby


def leader_killed(j: Job, standby: Any) -> None:
    """SIGKILL the leading coordinator; returns once `standby` leads."""
    assert j.coordinator is not None
    j.coordinator.kill()
    wait_for(lambda: "leads job" in standby.log(), 30, "the standby leading")
