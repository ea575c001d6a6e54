"""A single-node Apache Kafka broker (KRaft) for the tests and benchmarks.

One JVM is both broker and controller (`process.roles=broker,controller`), on two free
127.0.0.1 ports, with its log in a directory of its owner. `./run` fetches the jars
(deploy/kafka/pom.xml) into `.cache/kafka/libs`; `BATON_KAFKA_LIBS` points elsewhere.
Start formats the log directory once (`kafka.tools.StorageTool format --standalone`:
a one-voter dynamic quorum), runs `kafka.Kafka server.properties` and waits until a
metadata request answers. A clean stop is SIGTERM (a controlled shutdown); `kill()` is
SIGKILL, after which a start on the same directory recovers the log, as a crashed
host's broker would.

The settings are those one node needs and no more (the comment above
KAFKA_BROKER_SETTINGS says why each is there); Baton's clients need no setting of their
own here.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from confluent_kafka.admin import AdminClient

from orchestrator.devkit.embedded import free_port

__all__ = ["KAFKA_BROKER_SETTINGS", "KafkaBroker", "KafkaBrokerError", "kafka_libs",
           "new_cluster_id"]

# What a one-node cluster needs: the internal topics default to replication factor 3
# (and a transaction log min.isr of 2), which one broker can never satisfy, so groups
# and transactions would fail; a new group's first rebalance waits 3 s for more members
# by default, which every test joining a group would pay; share groups' state topic
# likewise defaults to 3 replicas. 50 partitions each for the offsets and transaction
# logs is for spreading coordinators over many brokers; on one broker it only makes
# the first group and the first transactional producer wait while all 50 load. The
# controller fences a broker whose heartbeats stop for broker.session.timeout.ms (9 s
# by default); on a loaded 2-core machine a stall of the one JVM can do that to its own
# broker, which then leaves the metadata and takes every partition offline with it
# (clients see leader -1, transactions time out and are fenced by the broker), so one
# node waits 30 s. A SIGKILLed broker's restart waits out its old session as well.
KAFKA_BROKER_SETTINGS: dict[str, str] = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "broker.session.timeout.ms": "30000",
}
# A heap that fits beside the suite on a small machine (Kafka's own script gives 1 GB);
# G1 with short pauses as in Kafka's kafka-run-class.sh.
_JVM_OPTIONS = ["-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
                "-Djava.awt.headless=true"]
# A tool that runs for a second or two: the C2 compiler's work would never pay back
_TOOL_JVM_OPTIONS = ["-XX:TieredStopAtLevel=1"]
_START_TIMEOUT_S = 120.0   # a JVM start on a small, loaded machine takes up to a minute
_STOP_GRACE_S = 30.0
_LOG4J = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.state.name = state.change.logger
logger.state.level = WARN
"""


class KafkaBrokerError(RuntimeError):
    """The Kafka broker could not be found, formatted, started or reached."""


def kafka_libs() -> Path:
    """The folder of the broker's jars: `BATON_KAFKA_LIBS`, else the repository's cache.

    Raises:
        KafkaBrokerError: no jars there (run `./run test`, which fetches them).
    """
    given = os.environ.get("BATON_KAFKA_LIBS")
    libs = Path(given) if given else Path(__file__).resolve().parents[2] / ".cache/kafka/libs"
    if not any(libs.glob("kafka_2.13-*.jar")):
        raise KafkaBrokerError(f"no Apache Kafka jars in {libs}: `./run test` fetches them "
                               "(deploy/kafka/pom.xml), or set BATON_KAFKA_LIBS")
    return libs


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, not starting
    with "-" (StorageTool's argument parser would take it for an option, as Kafka's own
    Uuid.randomUuid avoids)."""
    while True:
        found = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not found.startswith("-"):
            return found


class KafkaBroker:
    """One Apache Kafka broker (and its KRaft controller) on 127.0.0.1."""

    def __init__(self, data_dir: Path | None = None, port: int | None = None,
                 settings: dict[str, str] | None = None, logs: Path | None = None,
                 nice: int = 0, node_id: int = 1, jvm_options: Sequence[str] = ()) -> None:
        """`logs`: where the partitions' and the metadata log live (default: `log` in
        `data_dir`, beside the broker's own log and settings). `nice`: the JVM's
        scheduling priority (below 0 needs root; GNU nice runs it unchanged otherwise).
        `jvm_options`: the broker JVM's, after the defaults (a test suite's brokers
        trade peak speed for CPU: tests/brokers.py).
        `node_id`: its id in a cluster (orchestrator/devkit/kafka_cluster.py sets it with
        `cluster_id` and `quorum_voters`; alone, a one-voter quorum of its own)."""
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="baton-kafka-")
            data_dir = Path(self._tmp.name)
        self.data_dir = data_dir
        self.logs = logs or data_dir / "log"
        self.nice = nice
        self.jvm_options = list(jvm_options)
        self.port = port or free_port()
        self.controller_port = free_port()
        self.settings = {**KAFKA_BROKER_SETTINGS, **(settings or {})}
        self.node_id = node_id
        self.cluster_id: str | None = None      # None: a new one at the first format
        self.quorum_voters: str | None = None   # "id@host:port,...": a static quorum
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "server.log"

    def client_settings(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap}

    def listener_properties(self) -> dict[str, str]:
        """The listeners (a subclass adds its own: orchestrator/devkit/kafka_secure.py)."""
        listeners = (f"PLAINTEXT://127.0.0.1:{self.port},"
                     f"CONTROLLER://127.0.0.1:{self.controller_port}")
        return {"listeners": listeners,
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"}

    def _quorum(self) -> dict[str, str]:
        if self.quorum_voters is not None:
            return {"controller.quorum.voters": self.quorum_voters}
        return {"controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}"}

    def _properties(self) -> Path:
        lines = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            **self._quorum(),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            **self.listener_properties(),
            "log.dirs": str(self.logs),
            **self.settings,
        }
        path = self.data_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        (self.data_dir / "log4j2.properties").write_text(_LOG4J.format(log=self.log_path))
        return path

    def _java(self, main: str, *args: str, options: Sequence[str] = ()) -> list[str]:
        log4j = self.data_dir / "log4j2.properties"
        nice = ["nice", "-n", str(self.nice)] if self.nice else []
        return [*nice, "java", *_JVM_OPTIONS, *options, f"-Dlog4j2.configurationFile={log4j}",
                "-cp", f"{kafka_libs()}/*", main, *args]

    def _format(self, properties: Path) -> None:
        """Format the log directory once; a restart keeps what is there."""
        if (self.logs / "meta.properties").exists():
            return
        # a static quorum's voters are in the properties; alone, it is the only voter
        alone = ["--standalone"] if self.quorum_voters is None else []
        cmd = self._java("kafka.tools.StorageTool", "format", "-t",
                         self.cluster_id or new_cluster_id(), "-c", str(properties), *alone,
                         options=_TOOL_JVM_OPTIONS)
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=_START_TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise KafkaBrokerError(f"formatting {self.logs} failed "
                                   f"(exit {done.returncode}): "
                                   f"{(done.stdout + done.stderr).decode(errors='replace')}")

    def start(self) -> str:
        """Format (first time), start the broker and wait until a metadata request answers.

        Returns:
            The bootstrap address.

        Raises:
            KafkaBrokerError: the jars are missing, or it exited or did not answer in time.
        """
        self.launch()
        self.wait_ready()
        return self.bootstrap

    def launch(self) -> None:
        """Format (first time) and start the JVM without waiting for it to answer (a
        cluster's nodes answer only once a majority of its controllers runs).

        Raises:
            KafkaBrokerError: the jars are missing or formatting failed.
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        properties = self._properties()
        self._format(properties)
        with (self.data_dir / "stdout.log").open("ab") as out:
            self._proc = subprocess.Popen(self._java("kafka.Kafka", str(properties),
                                                     options=self.jvm_options),
                                          stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)

    def wait_ready(self) -> None:
        """Wait until a metadata request to this node answers.

        Raises:
            KafkaBrokerError: it exited or did not answer in time (it is then killed).
        """
        deadline = time.monotonic() + _START_TIMEOUT_S
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise KafkaBrokerError(f"Kafka exited with {self._proc.returncode}; "
                                       f"see {self.log_path} and {self.data_dir}/stdout.log")
            try:
                if admin.list_topics(timeout=1).brokers:
                    return
            except Exception:  # noqa: BLE001 - not answering yet is the expected case
                pass
            time.sleep(0.1)
        self.kill()
        raise KafkaBrokerError(f"Kafka on {self.bootstrap} did not answer in "
                               f"{_START_TIMEOUT_S:.0f}s; see {self.log_path}")

    def stop(self) -> None:
        """SIGTERM (a controlled shutdown that closes the log cleanly), then SIGKILL if
        it has not exited in time."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def restart(self) -> None:
        """Stop cleanly and start again on the same ports with the same log."""
        self.stop()
        self.start()

    def signal(self, sig: signal.Signals) -> None:
        """Send `sig` to the running JVM (SIGSTOP / SIGCONT: a frozen host and its return).

        Raises:
            KafkaBrokerError: it is not running.
        """
        if self._proc is None or self._proc.poll() is not None:
            raise KafkaBrokerError(f"Kafka node {self.node_id} on {self.bootstrap} "
                                   "is not running")
        self._proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL, like a crashed host: the next start recovers the log."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> KafkaBroker:
        self.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
