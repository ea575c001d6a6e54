"""Broker faults on the three-node Apache Kafka cluster (replication 3,
min.insync.replicas 2): the bar is Kafka's own system tests for Kafka Streams (broker
bounce, clean and hard, of a partition leader and of the controller).

Every case runs under traffic and during handoffs, and ends with the running-sum
oracle over the output topic and `baton wait --until balanced` (tests/faults_support.py's
`verify`). The handoffs are held in `releasing` (the owners frozen, p3 caught up) when
the fault strikes, and the owners thawed at once: their releases, the final commits of
a handoff, run against the faulty cluster. The rolling restart instead drives handoffs
(a processor joins, is drained, another joins) for as long as the restart lasts.

They need the cluster: `BATON_TEST_BROKER=kafka3 ./run test -m kafka3
tests/test_cluster_faults.py`, a lane run by hand (README, "Tests"); under any other
broker they are deselected.
"""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from orchestrator.devkit.kafka import KafkaBroker
from orchestrator.devkit.kafka_cluster import KafkaCluster
from orchestrator.wire.client import CoordinatorUnreachable
from tests.brokers import Broker
from tests.faults_support import PATIENT, hold_releasing, verify
from tests.feeder import Feeder
from tests.orchestrator.test_e2e import PARTITIONS, Job
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.kafka3]

OWNERS = ["p1", "p2"]
# Kafka fences a broker that stopped heartbeating after broker.session.timeout.ms; the
# frozen node is held this much longer, so it is fenced and its partitions move
# before it comes back.
_PAST_SESSION_S = 5.0


@pytest.fixture
def broker(restartable_broker: Broker) -> Broker:
    """The module's own cluster: its nodes are the faults' subjects."""
    assert restartable_broker.cluster is not None, "BATON_TEST_BROKER=kafka3 runs these"
    return restartable_broker


@pytest.fixture
def job(coordinated, daemons) -> Callable[..., Job]:
    def make(**sections: dict[str, Any]) -> Job:
        config, path = coordinated(PARTITIONS, **sections)
        return Job(config, path, daemons)
    return make


def cluster_of(broker: Broker) -> KafkaCluster:
    assert broker.cluster is not None
    return broker.cluster


def releasing_task(j: Job) -> str:
    """A task whose handoff waits in `releasing`."""
    return str(j.handoffs("releasing")[0]["task"])


def input_leader(j: Job, cluster: KafkaCluster, task: str) -> KafkaBroker:
    """The node leading the input partition of `task` (`Partition N` holds events:N)."""
    return cluster.leaders.leader_of(j.config.job.inputs[0], int(task.rsplit(" ", 1)[1]))


def leads_none(j: Job, cluster: KafkaCluster, node: KafkaBroker) -> bool:
    """Whether every input partition has a leader and none is `node` (False while the
    metadata does not answer: a request may go to the frozen node and time out)."""
    topic = j.config.job.inputs[0]
    try:
        return all(cluster.leaders.leader_of(topic, p) is not node for p in range(PARTITIONS))
    except Exception:  # noqa: BLE001 - no leader yet, or no answer: not yet
        return False


def settled(j: Job) -> bool:
    """Whether the job is balanced; False while no coordinator leads: a node's death
    can take the coordinator stream's leader or its transaction coordinator with it,
    and the coordinator answers 503 until a stream write lands again (the new leader
    is elected once the controller fences the dead node, broker.session.timeout.ms)."""
    try:
        return j.balanced()
    except CoordinatorUnreachable:
        return False


def drain(j: Job, processor: str) -> bool:
    """Ask for `processor`'s drain; False while no coordinator leads (see `settled`)."""
    try:
        j.client.drain(processor)
    except CoordinatorUnreachable:
        return False
    return True


def strike_during_release(j: Job, feeder: Feeder, fault: Callable[[], None]) -> None:
    """Strike `fault` while the handoffs wait in releasing, thaw the owners at once (their
    releases commit against the faulty cluster), and wait until the job is balanced."""
    assert j.all_handoffs("releasing"), j.status()["handoffs"]
    try:
        j.signal(OWNERS, signal.SIGCONT)
        fault()
    finally:
        j.signal(OWNERS, signal.SIGCONT)
    sent = feeder.sent
    wait_for(lambda: settled(j), 180, "the handoffs done on the faulty cluster")
    wait_for(lambda: feeder.sent > sent + 1000, 60, "traffic through the fault")


def test_every_topic_has_three_replicas_and_two_in_sync(broker) -> None:
    """The cluster the faults strike: three brokers; test topics, the offsets topic and
    the transaction log with three replicas; two in sync required."""
    topic = broker.create_topic("replicated", 2)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    meta = admin.list_topics(timeout=30)
    assert len(meta.brokers) == 3
    for name in (topic, "__consumer_offsets", "__transaction_state"):
        partitions = meta.topics[name].partitions.values()
        assert partitions and all(len(p.replicas) == 3 for p in partitions), name
    resource = ConfigResource(ResourceType.TOPIC, topic)
    config = admin.describe_configs([resource])[resource].result(30)
    assert config["min.insync.replicas"].value == "2"


def test_the_transaction_coordinator_found_is_the_clients(broker, unique) -> None:
    """ClusterLeaders.transaction_coordinator names the node a producer's client finds
    (librdkafka logs its FindCoordinator answer: "Transaction coordinator changed from
    ... -> host:port/<node id>")."""
    cluster = cluster_of(broker)
    lines: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger(unique("txn-coordinator"))
    logger.addHandler(Capture())
    logger.setLevel(logging.DEBUG)       # librdkafka's debug lines come at DEBUG
    for n in range(4):
        transactional_id = unique(f"baton.coordinated.Partition {n}")
        producer = Producer({"bootstrap.servers": broker.bootstrap, "debug": "eos",
                             "transactional.id": transactional_id, "logger": logger})
        producer.init_transactions(60)
        producer.flush(10)
        found = [m.group(1) for line in lines
                 if (m := re.search(r"Transaction coordinator changed from .* -> \S+/(\d+)",
                                    line))]
        assert found, lines[-20:]
        assert int(found[-1]) == cluster.leaders.transaction_coordinator(transactional_id).node_id
        lines.clear()


def test_input_leader_killed_during_release(job, broker) -> None:
    """SIGKILL of the node leading a moving task's input partition; it comes back after
    the handoffs, as a crashed host does, and recovers its log."""
    cluster = cluster_of(broker)
    j = job(**PATIENT)
    feeder = hold_releasing(j, broker)
    victim = input_leader(j, cluster, releasing_task(j))
    strike_during_release(j, feeder, victim.kill)
    cluster.start_node(victim)
    verify(f"input leader (node {victim.node_id}) SIGKILL in releasing", j, feeder, broker,
           ("p1", "p2", "p3"))
    assert j.holding().get("p3")


def test_transaction_coordinator_killed_mid_commit(job, broker) -> None:
    """SIGKILL of the transaction coordinator of a releasing owner's task, the instant
    the owner thaws and commits its release: the commit in flight is completed by the
    coordinator's successor (its PrepareCommit is replicated) or aborted, never half."""
    cluster = cluster_of(broker)
    j = job(**PATIENT)
    feeder = hold_releasing(j, broker)
    task = releasing_task(j)
    victim = cluster.leaders.transaction_coordinator(f"baton.{j.config.job.name}.{task}")
    strike_during_release(j, feeder, victim.kill)
    cluster.start_node(victim)
    verify(f"transaction coordinator (node {victim.node_id}) SIGKILL mid-commit", j, feeder,
           broker, ("p1", "p2", "p3"))
    assert j.holding().get("p3")


def test_active_controller_killed_during_release(job, broker) -> None:
    """SIGKILL of the active KRaft controller (a broker too): the quorum elects another,
    which fences the dead node and moves its partitions."""
    cluster = cluster_of(broker)
    j = job(**PATIENT)
    feeder = hold_releasing(j, broker)
    victim = cluster.leaders.active_controller()
    strike_during_release(j, feeder, victim.kill)
    wait_for(lambda: cluster.leaders.active_controller() is not victim, 60, "a new controller")
    cluster.start_node(victim)
    verify(f"active controller (node {victim.node_id}) SIGKILL in releasing", j, feeder,
           broker, ("p1", "p2", "p3"))
    assert j.holding().get("p3")


def test_input_leader_frozen_past_its_session(job, broker) -> None:
    """SIGSTOP of the node leading a moving task's input partition for longer than
    broker.session.timeout.ms: the controller fences it and moves its leaderships; on
    SIGCONT it finds itself fenced, truncates to the new leaders and rejoins."""
    cluster = cluster_of(broker)
    j = job(**PATIENT)
    feeder = hold_releasing(j, broker)
    victim = input_leader(j, cluster, releasing_task(j))
    session_s = int(victim.settings["broker.session.timeout.ms"]) / 1000
    try:
        assert j.all_handoffs("releasing"), j.status()["handoffs"]
        victim.signal(signal.SIGSTOP)
        j.signal(OWNERS, signal.SIGCONT)
        frozen_at = time.monotonic()
        wait_for(lambda: leads_none(j, cluster, victim), session_s + 60,
                 f"node {victim.node_id}'s input leaderships moved")
        time.sleep(max(0.0, frozen_at + session_s + _PAST_SESSION_S - time.monotonic()))
    finally:
        victim.signal(signal.SIGCONT)
        j.signal(OWNERS, signal.SIGCONT)
    wait_for(lambda: settled(j), 180, "the handoffs done after the frozen node")
    cluster.wait_in_sync()
    verify(f"input leader (node {victim.node_id}) SIGSTOP {session_s + _PAST_SESSION_S:.0f} s "
           "in releasing", j, feeder, broker, ("p1", "p2", "p3"))


def test_rolling_restart_under_handoffs(job, broker) -> None:
    """Every node restarted in turn with a clean shutdown (each once every replica is in
    sync again), while processors keep joining and draining: handoffs run before,
    during and after each node's restart."""
    cluster = cluster_of(broker)
    j = job(**PATIENT)
    j.start_coordinator()
    j.start_processor("p1")
    j.start_processor("p2")
    wait_for(lambda: j.balanced(), 90, "p1 and p2 balanced")
    feeder = Feeder(broker, j.config.job.inputs[0], keys=40, rate=400.0).start()
    wait_for(lambda: feeder.sent > 1000, 30, "some traffic")
    failed: list[BaseException] = []

    def restart() -> None:
        try:
            cluster.rolling_restart()
        except BaseException as exc:  # noqa: BLE001 - the test raises it below
            failed.append(exc)

    rolling = threading.Thread(target=restart, name="rolling-restart")
    rolling.start()
    joined = 0
    try:
        while rolling.is_alive() or joined < 2:
            joined += 1
            pid = f"p{2 + joined}"
            j.start_processor(pid)
            wait_for(lambda: settled(j) and bool(j.holding().get(pid)), 180,  # noqa: B023
                     f"{pid} holds tasks")
            wait_for(lambda: drain(j, pid), 60, f"the coordinator draining {pid}")  # noqa: B023
            assert j.processors[pid].wait(180) == 0, j.processors[pid].log()[-3000:]
            del j.processors[pid]
    finally:
        rolling.join()
    assert not failed, failed
    verify(f"rolling restart of 3 nodes, {joined} joins and drains", j, feeder, broker,
           ("p1", "p2"))
