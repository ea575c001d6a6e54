"""The fault-injection suite: live traffic, a scale-out, one fault each.

Every case checks the running-sum oracle over the output topic (per key, exactly the
running sums of its inputs: nothing lost, nothing duplicated) and convergence
(`baton wait --until balanced` exits 0). Phases are held open by freezing processes
(SIGSTOP), never by timing: a frozen target cannot catch up or activate, frozen
owners cannot acknowledge a release. A table of the cases is printed at the end.

Run alone: `./run test -m faults`.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from orchestrator.wire.client import CoordinatorUnreachable
from tests.conftest import FAULT_RESULTS, Broker, Feeder, oracle_check, wait_for
from tests.orchestrator.test_e2e import PARTITIONS, Job

pytestmark = [pytest.mark.integration, pytest.mark.faults]

# short timeouts so declared-dead paths run in seconds; processors are never timed out
# by silence unless a case wants it
FAST = {"coordinator": {"release_timeout_ms": 4000, "processor_timeout_ms": 3000}}
PATIENT = {"coordinator": {"release_timeout_ms": 60000, "processor_timeout_ms": 60000}}


@pytest.fixture
def job(coordinated, daemons) -> Callable[..., Job]:
    def make(**sections: dict[str, Any]) -> Job:
        config, path = coordinated(PARTITIONS, **sections)
        return Job(config, path, daemons)
    return make


def _two(j: Job, broker: Broker, rate: float = 400.0) -> Feeder:
    j.start_coordinator()
    j.start_processor("p1")
    j.start_processor("p2")
    wait_for(lambda: j.balanced() and sorted(len(a) for a in j.holding().values()) == [2, 2],
             90, "p1 and p2 balanced with 2 tasks each")
    feeder = Feeder(broker, j.config.job.inputs[0], keys=40, rate=rate).start()
    wait_for(lambda: feeder.sent > 1000, 30, "some traffic")
    return feeder


def _source_of(j: Job, *phases: str) -> str:
    handoffs = [h for phase in phases for h in j.handoffs(phase)]
    assert handoffs, j.status()["handoffs"]
    return str(handoffs[0]["from"])


# A handoff whose target has not caught up yet. Catching up a few thousand records
# takes the target tens of milliseconds, so the phase before it (planned: the warmup is
# listed, not yet reported) counts too; the target is frozen the moment it is seen.
_BEFORE_RELEASE = ("planned", "catching_up")


def _leads(j: Job) -> bool:
    try:
        j.status()
    except CoordinatorUnreachable:
        return False
    return True


def _in_phase(j: Job, phase: str) -> bool:
    """A handoff in `phase` ("catching_up": before its release, see above)."""
    phases = _BEFORE_RELEASE if phase == "catching_up" else (phase,)
    return any(j.handoffs(p) for p in phases)


def _verify(case: str, j: Job, feeder: Feeder, broker: Broker,
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
                          result.duplicated, result.wrong))
    assert result.records_in == sent
    assert result.ok, result


def _backlog_scale_out(j: Job, broker: Broker) -> Feeder:
    """Two processors, a fast feeder, then p3 joins far behind: handoffs catch up."""
    feeder = _two(j, broker, rate=2000.0)
    wait_for(lambda: feeder.sent > 20000, 60, "a backlog")
    j.start_processor("p3", registered=False)
    # p3 catches ~5,000 records a task up in a few tens of ms, ~0.1 s after the plan: read
    # the plan from the coordinator's log, not from /status (whose answers can wait on a
    # decision), and freeze p3 at once to hold the handoff before its release
    wait_for(lambda: "-> p3 planned" in j.coordinator.log(), 60, "a handoff to p3 planned",
             step=lambda: time.sleep(0.002))
    j.signal(["p3"], signal.SIGSTOP)
    assert any(j.handoffs(p) for p in _BEFORE_RELEASE), j.status()["handoffs"]
    return feeder


def test_old_owner_killed_while_catching_up(job, broker) -> None:
    j = job(catch_up={"acceptable_lag": 10}, **FAST)
    feeder = _backlog_scale_out(j, broker)
    source = _source_of(j, *_BEFORE_RELEASE)
    j.processors[source].kill()
    j.signal(["p3"], signal.SIGCONT)
    _verify("old owner SIGKILL in catching_up", j, feeder, broker,
            tuple(p for p in ("p1", "p2", "p3") if p != source))


def _hold_releasing(j: Job, broker: Broker) -> Feeder:
    """Frozen owners: T1 stops, p3 catches up, nobody acknowledges the release."""
    feeder = _two(j, broker)
    j.signal(["p1", "p2"], signal.SIGSTOP)
    j.start_processor("p3")
    wait_for(lambda: j.all_handoffs("releasing"), 60, "the handoffs releasing")
    return feeder


def test_old_owner_killed_while_releasing(job, broker) -> None:
    j = job(**PATIENT)
    feeder = _hold_releasing(j, broker)
    source = _source_of(j, "releasing")
    j.processors[source].kill()
    j.signal([p for p in ("p1", "p2") if p != source], signal.SIGCONT)
    _verify("old owner SIGKILL in releasing", j, feeder, broker,
            tuple(p for p in ("p1", "p2", "p3") if p != source))


def test_new_owner_killed_while_catching_up(job, broker) -> None:
    j = job(catch_up={"acceptable_lag": 10}, **FAST)
    feeder = _backlog_scale_out(j, broker)
    j.processors["p3"].kill()
    wait_for(lambda: not j.status()["handoffs"], 60, "the handoffs cancelled")
    _verify("new owner SIGKILL in catching_up", j, feeder, broker, ("p1", "p2"))


def _hold_activating(j: Job, broker: Broker) -> Feeder:
    """p3 caught up, then frozen; the owners released: the handoffs sit in activating."""
    feeder = _hold_releasing(j, broker)
    j.signal(["p3"], signal.SIGSTOP)
    j.signal(["p1", "p2"], signal.SIGCONT)
    wait_for(lambda: j.all_handoffs("activating"), 60, "the handoffs activating")
    return feeder


def test_new_owner_killed_while_activating(job, broker) -> None:
    j = job(coordinator={"release_timeout_ms": 60000, "processor_timeout_ms": 3000,
                         "activate_timeout_ms": 60000})
    feeder = _hold_activating(j, broker)
    j.processors["p3"].kill()
    _verify("new owner SIGKILL in activating", j, feeder, broker, ("p1", "p2"))


@pytest.mark.parametrize("phase", ["catching_up", "releasing", "activating"])
def test_coordinator_killed_in_each_phase(job, broker, phase) -> None:
    if phase == "catching_up":
        j = job(catch_up={"acceptable_lag": 10}, **PATIENT)
        feeder = _backlog_scale_out(j, broker)
        frozen = ["p3"]
        j.signal(frozen, signal.SIGSTOP)
    elif phase == "releasing":
        j = job(**PATIENT)
        feeder = _hold_releasing(j, broker)
        frozen = ["p1", "p2"]
    else:
        j = job(coordinator={"release_timeout_ms": 60000, "processor_timeout_ms": 60000,
                             "activate_timeout_ms": 60000})
        feeder = _hold_activating(j, broker)
        frozen = ["p3"]
    try:
        assert _in_phase(j, phase), j.status()["handoffs"]
        assert j.coordinator is not None
        j.coordinator.kill()
        j.start_coordinator()
        assert _in_phase(j, phase), j.status()["handoffs"]
    finally:
        j.signal(frozen, signal.SIGCONT)
    _verify(f"coordinator SIGKILL in {phase}", j, feeder, broker, ("p1", "p2", "p3"))
    assert j.holding().get("p3")


def test_frozen_old_owner_is_declared_dead_and_fenced(job, broker) -> None:
    j = job(coordinator={"release_timeout_ms": 3000, "processor_timeout_ms": 60000})
    feeder = _two(j, broker)
    j.signal(["p1"], signal.SIGSTOP)           # p1 cannot acknowledge its releases
    j.start_processor("p3")
    wait_for(lambda: any(h["from"] == "p1" and h["phase"] in ("activating", "done")
                         for h in j.status()["handoffs"]) or "p1" not in j.holding(),
             90, "p1's handoff to proceed without it")
    j.signal(["p1"], signal.SIGCONT)
    code = j.processors["p1"].wait(60)
    assert code == 3, j.processors["p1"].log()[-3000:]
    assert "not alive" in j.processors["p1"].log()
    _verify("old owner SIGSTOP past release timeout", j, feeder, broker, ("p2", "p3"))


class TestBrokerRestart:
    """On a broker of the test's own (the shared one is not ours to restart)."""

    @pytest.fixture
    def broker(self, restartable_broker: Broker) -> Broker:
        return restartable_broker

    def test_broker_restarted_during_catch_up(self, job, broker) -> None:
        j = job(catch_up={"acceptable_lag": 10}, **PATIENT)
        feeder = _backlog_scale_out(j, broker)
        try:
            assert _in_phase(j, "catching_up"), j.status()["handoffs"]
            sent = feeder.sent
            broker.local.restart()         # same port, same data dir, clean stop
            wait_for(lambda: feeder.sent > sent + 2000, 60, "traffic after the restart")
            # while the broker was away the coordinator could not renew its lease on the
            # stream, so it stood by; it leads again once a stream write succeeds
            wait_for(lambda: _leads(j), 60, "the coordinator to lead again")
            assert _in_phase(j, "catching_up"), j.status()["handoffs"]
        finally:
            j.signal(["p3"], signal.SIGCONT)
        _verify("broker restart during catching_up", j, feeder, broker, ("p1", "p2", "p3"))
        assert j.holding().get("p3")


def test_drain_under_traffic(job, broker) -> None:
    j = job()
    feeder = _two(j, broker)
    j.start_processor("p3")
    wait_for(lambda: j.balanced() and bool(j.holding().get("p3")), 90, "p3 holds tasks")
    j.client.drain("p2")
    assert j.processors["p2"].wait(120) == 0
    _verify("drain under traffic", j, feeder, broker, ("p1", "p3"))
    assert "p2" not in j.holding()


class TestSplitFaults:
    """Faults while split children move: 4 -> 8 partitions under traffic, p3
    joins, p3 is frozen, `baton split`: the children's moves to p3 wait for it (planned
    or catching_up), and the fault strikes then."""

    MOVING = ("planned", "catching_up")
    # a frozen p3 must not be declared lost before it thaws; a killed one is, in 15 s
    TIMEOUTS = {"coordinator": {"release_timeout_ms": 4000, "processor_timeout_ms": 15000}}

    @staticmethod
    def _children_to_p3(j: Job) -> list[dict[str, Any]]:
        return [h for h in j.status()["handoffs"] if h["task"] in CHILDREN
                and h["to"] == "p3" and h["phase"] in TestSplitFaults.MOVING]

    def _split_toward_frozen_p3(self, j: Job, broker: Broker) -> Feeder:
        from tests.orchestrator.test_split_e2e import FAST_METADATA, expand_under_pause, split

        j.start_coordinator()
        j.start_processor("p1")
        j.start_processor("p2")
        wait_for(lambda: j.balanced(), 90, "p1 and p2 balanced")
        feeder = Feeder(broker, j.config.job.inputs[0], keys=64, rate=1000.0,
                        **FAST_METADATA).start()
        wait_for(lambda: feeder.sent > 5000, 60, "a backlog on the parents")
        expand_under_pause(j, feeder, 2 * PARTITIONS)
        j.start_processor("p3")
        wait_for(lambda: j.balanced() and bool(j.holding().get("p3")), 90, "p3 holds tasks")
        j.signal(["p3"], signal.SIGSTOP)
        assert len(split(j)["splits"]) == PARTITIONS
        wait_for(lambda: bool(self._children_to_p3(j)), 10, "split children moving to p3")
        return feeder

    def test_parent_owner_killed_while_child_catches_up(self, job, broker) -> None:
        j = job(catch_up={"acceptable_lag": 10}, **self.TIMEOUTS)
        feeder = self._split_toward_frozen_p3(j, broker)
        source = str(self._children_to_p3(j)[0]["from"])
        j.processors[source].kill()
        j.signal(["p3"], signal.SIGCONT)
        _verify("split: parent owner SIGKILL, child catching up", j, feeder, broker,
                tuple(p for p in ("p1", "p2", "p3") if p != source))

    def test_child_target_killed_while_catching_up(self, job, broker) -> None:
        j = job(catch_up={"acceptable_lag": 10}, **self.TIMEOUTS)
        feeder = self._split_toward_frozen_p3(j, broker)
        j.processors["p3"].kill()
        wait_for(lambda: all(h["to"] != "p3" for h in j.status()["handoffs"]), 60,
                 "the child handoffs to p3 cancelled")
        _verify("split: child target SIGKILL in catching_up", j, feeder, broker, ("p1", "p2"))

    def test_coordinator_killed_before_children_activate(self, job, broker) -> None:
        j = job(catch_up={"acceptable_lag": 10}, **PATIENT)
        feeder = self._split_toward_frozen_p3(j, broker)
        try:
            assert j.coordinator is not None
            j.coordinator.kill()
            j.start_coordinator()
            status = j.status()
            assert len(status["tasks"]) == 2 * PARTITIONS          # the split survived
            assert any(t.get("split_from") for t in status["tasks"])
        finally:
            j.signal(["p3"], signal.SIGCONT)
        _verify("split: coordinator SIGKILL before activation", j, feeder, broker,
                ("p1", "p2", "p3"))
        assert j.holding().get("p3")


CHILDREN = {f"Partition {n}" for n in range(PARTITIONS, 2 * PARTITIONS)}


def test_processors_outlive_a_coordinator_outage(job, broker) -> None:
    """The coordinator SIGKILLed for 45 s under traffic (past the processors'
    coordinator_grace_ms): no processor exits, outputs keep committing; the coordinator
    comes back, a third processor joins and gets tasks; the oracle holds."""
    import time

    j = job(processor={"coordinator_grace_ms": 5000})
    feeder = _two(j, broker)
    assert j.coordinator is not None
    j.coordinator.kill()
    group = f"baton.{j.config.job.name}"
    first = _committed(broker, group, j.config.job.inputs[0])
    time.sleep(45)
    j.check_running()                                 # nobody exited
    during = _committed(broker, group, j.config.job.inputs[0])
    assert during > first + 1000, (first, during)     # outputs kept committing
    j.start_coordinator()
    j.start_processor("p3")
    _verify("coordinator down 45 s, then p3 joins", j, feeder, broker, ("p1", "p2", "p3"))
    assert j.holding().get("p3")


def _committed(broker: Broker, group: str, topic: str) -> int:
    """Records the job has committed on `topic` (read straight from the broker)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(broker.settings(**{"group.id": group}))
    try:
        parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        return sum(max(tp.offset, 0) for tp in consumer.committed(parts, timeout=10))
    finally:
        consumer.close()


# ---- two coordinators: the standby finishes what the leader started -------------------

def _with_standby_url(j: Job) -> str:
    """Rewrite the job's config with two coordinator URLs; returns the standby's listen."""
    import tomllib

    from orchestrator.devkit.embedded import free_port
    from orchestrator.wire.config import dump_config, load_config

    listen = f"127.0.0.1:{free_port()}"
    raw = tomllib.loads(j.path.read_text())
    raw["coordinator"]["url"] = [j.config.coordinator.urls[0], f"http://{listen}"]
    j.path.write_text(dump_config(raw))
    j.config = load_config(j.path)
    return listen


def _start_standby(j: Job, listen: str) -> Any:
    standby = j.daemons("coordinator-standby", "coordinator", "-c", j.path, "--listen", listen)
    wait_for(lambda: "standby: job" in standby.log() or not standby.running(), 30,
             "the second coordinator standing by")
    assert standby.running(), standby.log()
    return standby


def _leader_killed(j: Job, standby: Any) -> None:
    assert j.coordinator is not None
    j.coordinator.kill()
    wait_for(lambda: "leads job" in standby.log(), 30, "the standby leading")


@pytest.mark.parametrize("phase", ["catching_up", "activating"])
def test_standby_coordinator_finishes_the_scale_out(job, broker, phase) -> None:
    """The leader is SIGKILLed and never restarted; the standby takes the stream over
    and completes the handoffs in flight."""
    if phase == "catching_up":
        j = job(catch_up={"acceptable_lag": 10}, **PATIENT)
        listen = _with_standby_url(j)
        feeder = _backlog_scale_out(j, broker)
        frozen = ["p3"]
        j.signal(frozen, signal.SIGSTOP)
    else:
        j = job(coordinator={"release_timeout_ms": 60000, "processor_timeout_ms": 60000,
                             "activate_timeout_ms": 60000})
        listen = _with_standby_url(j)
        feeder = _hold_activating(j, broker)
        frozen = ["p3"]
    standby = _start_standby(j, listen)
    try:
        assert _in_phase(j, phase), j.status()["handoffs"]
        _leader_killed(j, standby)
        assert _in_phase(j, phase), j.status()["handoffs"]      # the client followed
    finally:
        j.signal(frozen, signal.SIGCONT)
    _verify(f"leader SIGKILL in {phase}, standby finishes", j, feeder, broker,
            ("p1", "p2", "p3"))
    assert j.holding().get("p3")
    assert standby.running()


def test_a_deposed_leader_cannot_write_and_stands_by(job, broker) -> None:
    """SIGSTOP the leader past the takeover: the standby leads; SIGCONT: the old leader's
    next write is fenced, it becomes a standby pointing at the new leader; SIGKILL the
    new leader: the old one, following the stream since, leads again."""
    import httpx

    j = job(**PATIENT)
    listen = _with_standby_url(j)
    feeder = _two(j, broker)
    standby = _start_standby(j, listen)
    assert j.coordinator is not None
    old = j.coordinator
    os.kill(old.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: "leads job" in standby.log(), 30, "the standby leading")
        j.start_processor("p3")           # a scale-out under the new leader
    finally:
        os.kill(old.pid, signal.SIGCONT)
    wait_for(lambda: "deposed" in old.log(), 30, "the old leader stepping down")
    assert old.running(), old.log()[-3000:]
    first_url = j.config.coordinator.urls[0]
    answers: list[httpx.Response] = []

    def names_the_leader() -> bool:
        # "deposed" is logged before the stream is read again: until then it answers 503
        # naming no leader (or, for an instant, still itself)
        answers.append(httpx.get(f"{first_url}/status", timeout=10))
        return answers[-1].status_code == 503 and \
            answers[-1].json().get("leader") == f"http://{listen}"

    wait_for(names_the_leader, 30, "the old leader naming the new one")
    assert all(a.status_code == 503 for a in answers), [a.text for a in answers]
    assert "leads job" not in old.log().split("deposed", 1)[1], "a spurious take-over"
    standby.kill()              # the new leader dies too: the deposed one, following, leads
    wait_for(lambda: "leads job" in old.log().split("deposed", 1)[1], 30,
             "the deposed leader leading again")
    _verify("deposed leader leads again after the new one dies", j, feeder, broker,
            ("p1", "p2", "p3"))
