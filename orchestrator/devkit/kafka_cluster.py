"""A three-node Apache Kafka cluster (KRaft) for the tests and benchmarks, laid out the
way production clusters run: replication factor 3 and `min.insync.replicas` 2 for every
topic, the offsets topic and the transaction state log included, so one node can be
down, killed or frozen while every partition keeps a leader and accepts acks=all writes.

Layout: three JVMs on 127.0.0.1 (orchestrator/devkit/kafka.py's `KafkaBroker`, one per
node), each both broker and controller (`process.roles=broker,controller`, as KRaft's
"combined" mode), with a static three-voter quorum (`controller.quorum.voters`): every
node's log directory is formatted with the same cluster id, and the quorum elects its
leader (the active controller) once two of the three run. Combined nodes keep the
cluster at three JVMs at `-Xmx512m`, which a 2-core machine holds beside the daemons;
separate controllers would double that.

What a fault test needs is here too: which node leads a partition, which node is the
transaction coordinator of a transactional id, which node is the active controller
(`leaders`),
and a rolling restart that waits for every replica to be back in sync before it takes
the next node down (as an operator's does).
"""

from __future__ import annotations

import contextlib
import json
import signal
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from confluent_kafka.admin import AdminClient

from orchestrator.devkit.kafka import (
    KAFKA_BROKER_SETTINGS,
    KafkaBroker,
    KafkaBrokerError,
    new_cluster_id,
)

__all__ = ["ClusterLeaders", "KAFKA_CLUSTER_SETTINGS", "KafkaCluster", "transaction_partition"]

# What three nodes change from one node's settings (KAFKA_BROKER_SETTINGS): Kafka's own
# defaults for the internal topics (replication 3, the transaction log's min.isr 2)
# hold again, and every topic gets 3 replicas and needs 2 in sync (what production
# clusters set, so an acks=all write survives the loss of any one node). 6 partitions
# each for the offsets and transaction logs put two coordinators on every node, so
# killing one node moves some groups' and transactions' coordinators and not others.
# A broker is fenced after 15 s without heartbeats: Kafka's 9 s fenced live nodes of
# a loaded 2-core machine running three JVMs; 15 s still lets a frozen node be fenced
# and its partitions move well within a test.
KAFKA_CLUSTER_SETTINGS: dict[str, str] = {
    **KAFKA_BROKER_SETTINGS,
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "6",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "6",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "broker.session.timeout.ms": "15000",
}
NODES = 3
_IN_SYNC_TIMEOUT_S = 180.0      # replicas catching up after a node's restart, loaded host
_POLL_S = 0.2
_TRANSACTION_LOG = "__transaction_state"


def transaction_partition(transactional_id: str, partitions: int) -> int:
    """The `__transaction_state` partition of a transactional id: Java's
    `String.hashCode` of the id, its absolute value (Kafka's `Utils.abs`: 0 for
    Integer.MIN_VALUE), modulo the partition count (TransactionStateManager)."""
    units = transactional_id.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    signed = h - (1 << 32) if h & 0x80000000 else h
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions


class KafkaCluster:
    """Three Apache Kafka nodes (broker and controller each) on 127.0.0.1."""

    def __init__(self, data_dir: Path | None = None, settings: dict[str, str] | None = None,
                 logs: Path | None = None, nice: int = 0,
                 jvm_options: Sequence[str] = ()) -> None:
        """`data_dir`: one folder per node (`node1`...) for its settings and its own
        log; `logs`: where the nodes keep their partitions and metadata logs (a folder
        per node; default: in `data_dir`); `settings` on top of KAFKA_CLUSTER_SETTINGS;
        `nice`: the JVMs' scheduling priority; `jvm_options`: the nodes' (KafkaBroker)."""
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="baton-kafka3-")
            data_dir = Path(self._tmp.name)
        self.data_dir = data_dir
        merged = {**KAFKA_CLUSTER_SETTINGS, **(settings or {})}
        self.nodes = [KafkaBroker(data_dir / f"node{n}", settings=merged, nice=nice, node_id=n,
                                  logs=logs / f"node{n}" if logs is not None else None,
                                  jvm_options=jvm_options)
                      for n in range(1, NODES + 1)]
        cluster_id = new_cluster_id()
        voters = ",".join(f"{node.node_id}@127.0.0.1:{node.controller_port}"
                          for node in self.nodes)
        for node in self.nodes:
            node.cluster_id, node.quorum_voters = cluster_id, voters
        self.leaders = ClusterLeaders(self.nodes, self._admin)

    @property
    def bootstrap(self) -> str:
        """Every node's address: a client reaches the cluster while any one is up."""
        return ",".join(node.bootstrap for node in self.nodes)

    @property
    def pid(self) -> int | None:
        """The first node's JVM (what a bench samples), None when it is down."""
        return self.nodes[0].pid

    def client_settings(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap}

    def start(self) -> str:
        """Start every node that is not running and wait until all of them answer and
        are registered with the controller.

        Returns:
            The bootstrap addresses.

        Raises:
            KafkaBrokerError: a node exited or did not answer in time.
        """
        starting = [node for node in self.nodes if node.pid is None]
        for node in starting:
            node.launch()
        for node in starting:
            node.wait_ready()
        self._wait(lambda: len(self._admin().list_topics(timeout=5).brokers) == NODES,
                   "all three brokers registered")
        return self.bootstrap

    def start_node(self, node: KafkaBroker) -> None:
        """Start one node again (after `stop`, `kill`) and wait until the cluster lists it."""
        node.start()
        self._wait(lambda: node.node_id in self._admin().list_topics(timeout=5).brokers,
                   f"node {node.node_id} registered again")

    def restart(self) -> None:
        """A restart of the whole cluster under its clients: the rolling one below (what
        a single broker's clean stop and start is to one node)."""
        self.rolling_restart()

    def rolling_restart(self) -> None:
        """Restart every node in turn with a clean shutdown, each only once every replica
        of every partition is in sync again (Kafka's rolling-bounce procedure)."""
        for node in self.nodes:
            self.wait_in_sync()
            node.stop()
            self.start_node(node)
        self.wait_in_sync()

    def wait_in_sync(self, timeout: float = _IN_SYNC_TIMEOUT_S) -> None:
        """Wait until every partition (internal topics included) has all its replicas
        in its ISR.

        Raises:
            KafkaBrokerError: some are still out of sync after `timeout` seconds.
        """
        self._wait(lambda: not self.under_replicated(), "every replica in sync", timeout)

    def under_replicated(self) -> list[str]:
        """The partitions (`topic:N`) whose ISR lacks one of their replicas."""
        meta = self._admin().list_topics(timeout=10)
        return [f"{name}:{p.id}" for name, topic in meta.topics.items()
                for p in topic.partitions.values() if set(p.isrs) != set(p.replicas)]

    def stop(self) -> None:
        """Stop every node, SIGTERM to all at once: one at a time, the last ones would
        wait for a controller quorum that is already gone."""
        running = [node for node in self.nodes if node.pid is not None]
        for node in running:
            with contextlib.suppress(KafkaBrokerError):      # one that exited on its own
                node.signal(signal.SIGTERM)
        for node in running:
            node.stop()

    def kill(self) -> None:
        """SIGKILL every node."""
        for node in self.nodes:
            node.kill()

    def thaw(self) -> None:
        """SIGCONT every running node (one left frozen would not hear a SIGTERM)."""
        for node in self.nodes:
            if node.pid is not None:
                with contextlib.suppress(KafkaBrokerError):
                    node.signal(signal.SIGCONT)

    def close(self) -> None:
        self.thaw()
        self.stop()
        for node in self.nodes:
            node.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def _admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})

    def _wait(self, done: Any, what: str, timeout: float = _IN_SYNC_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if done():
                    return
            except Exception as exc:  # noqa: BLE001 - a node away answers nothing yet
                last = exc
            time.sleep(_POLL_S)
        raise KafkaBrokerError(f"the Kafka cluster on {self.bootstrap}: not {what} in "
                               f"{timeout:.0f}s (last error: {last}); see the nodes' "
                               f"server.log in {self.data_dir}")

    def __enter__(self) -> KafkaCluster:
        self.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class ClusterLeaders:
    """Which node of a cluster leads what now: a partition, a transactional id's
    transactions, the controller quorum (what a fault test kills or freezes).

    Args:
        nodes: the cluster's nodes.
        admin: a new admin client of the cluster.
    """

    def __init__(self, nodes: list[KafkaBroker], admin: Callable[[], AdminClient]) -> None:
        self._nodes = nodes
        self._admin = admin

    def node(self, node_id: int) -> KafkaBroker:
        """The node of a broker id (1, 2 or 3).

        Raises:
            KafkaBrokerError: no such node (a partition without a leader has -1).
        """
        for node in self._nodes:
            if node.node_id == node_id:
                return node
        raise KafkaBrokerError(f"no Kafka node {node_id} in this cluster (nodes "
                               f"{[n.node_id for n in self._nodes]}); -1 is no leader")

    def leader_of(self, topic: str, partition: int) -> KafkaBroker:
        """The node leading `topic:partition` now.

        Raises:
            KafkaBrokerError: the partition has no leader (or does not exist).
        """
        meta = self._admin().list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None or partition not in meta.partitions:
            raise KafkaBrokerError(f"{topic}:{partition} is not in the cluster's metadata "
                                   f"({meta.error if meta is not None else 'no topic'})")
        return self.node(meta.partitions[partition].leader)

    def transaction_coordinator(self, transactional_id: str) -> KafkaBroker:
        """The node that coordinates `transactional_id`'s transactions: the leader of its
        `__transaction_state` partition (which exists once a producer initialised one)."""
        meta = self._admin().list_topics(_TRANSACTION_LOG, timeout=10).topics[_TRANSACTION_LOG]
        return self.leader_of(_TRANSACTION_LOG,
                              transaction_partition(transactional_id, len(meta.partitions)))

    def active_controller(self) -> KafkaBroker:
        """The quorum's leader, from the election state each running node keeps
        (`__cluster_metadata-0/quorum-state`): the leader of the highest epoch known.

        Raises:
            KafkaBrokerError: no running node knows a leader.
        """
        best: tuple[int, int] | None = None
        for node in self._nodes:
            if node.pid is None:
                continue
            try:
                state = json.loads((node.logs / "__cluster_metadata-0/quorum-state").read_text())
            except (OSError, ValueError):
                continue
            epoch, leader = int(state.get("leaderEpoch", -1)), int(state.get("leaderId", -1))
            if leader >= 0 and (best is None or epoch > best[0]):
                best = (epoch, leader)
        if best is None:
            raise KafkaBrokerError("no running Kafka node knows the quorum's leader")
        return self.node(best[1])
