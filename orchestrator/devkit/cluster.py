"""Daemons of a local job as child processes, and the topic helpers around them, for
`baton demo`, `baton dev` and the benches: start a coordinator and processors from one
config file, stop them all (processors first), read a topic back."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from orchestrator.kafka.topics import replication_for

__all__ = ["Cluster", "committed_all", "create_topics", "read_topic"]


class Cluster:
    """The child processes; every one is stopped on exit and on Ctrl-C.

    Args:
        workdir: where each daemon's log goes (`<name>.log`) and, unless
            `own_state_dirs` is False, its state (`state/<name>`).
        config_file: the config every daemon is started with.
        log: told of each start.
        new_session: start each daemon in a session of its own, so a Ctrl-C in the
            terminal reaches only the parent, which then stops them in order.
        own_state_dirs: give each processor `--state-dir workdir/state/<name>`; False
            leaves the config's state_dir (processors keep their stores apart under
            their ids there, and one started by hand finds the same layout).
    """

    def __init__(self, workdir: Path, config_file: Path, log: Callable[[str], None],
                 *, new_session: bool = False, own_state_dirs: bool = True) -> None:
        self.workdir, self.config_file, self.log = workdir, config_file, log
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._new_session, self._own_state_dirs = new_session, own_state_dirs

    def start(self, name: str, *args: str) -> None:
        if args[0] == "processor" and self._own_state_dirs:
            args = (*args, "--state-dir", str(self.workdir / "state" / name))
        logfile = (self.workdir / f"{name}.log").open("ab")
        cmd = [sys.executable, "-m", "orchestrator.cli", *args, "-c", str(self.config_file)]
        self.procs[name] = subprocess.Popen(cmd, stdout=logfile, stderr=logfile,
                                            stdin=subprocess.DEVNULL,
                                            start_new_session=self._new_session)
        logfile.close()
        self.log(f"started {name} (pid {self.procs[name].pid})")

    def stop(self, name: str, timeout: float = 30.0) -> int | None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return proc.returncode

    def stop_all(self) -> None:
        for name in [n for n in self.procs if n != "coordinator"] + ["coordinator"]:
            self.stop(name, 15)

    def wait_for_file(self, path: Path, timeout: float = 30.0) -> None:
        """Wait for a file a daemon writes (the coordinator's token file)."""
        deadline = time.monotonic() + timeout
        while not path.exists():
            exited = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
            if exited:
                raise RuntimeError(f"{', '.join(exited)} exited ({exited}); see "
                                   f"{self.workdir}/<name>.log")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} did not appear in {timeout:.0f}s; see the "
                                   f"daemons' logs in {self.workdir}")
            time.sleep(0.1)


def create_topics(settings: Mapping[str, Any], partitions: Mapping[str, int],
                  config: Mapping[str, str] | None = None) -> None:
    """Create each topic with its partition count and `config` (topic settings),
    replicated as Baton replicates its own topics (3 on a cluster of three brokers or
    more); existing ones stay."""
    admin = AdminClient(dict(settings))
    replicas = replication_for(len(admin.list_topics(timeout=30).brokers))
    futures = admin.create_topics([NewTopic(name, count, replicas, config=dict(config or {}))
                                   for name, count in partitions.items()])
    for name, future in futures.items():
        try:
            future.result(30)
        except Exception as exc:  # noqa: BLE001 - KafkaException, its code tells
            if "TOPIC_ALREADY_EXISTS" not in str(exc) and "already exists" not in str(exc):
                raise RuntimeError(f"cannot create topic {name!r}: {exc}") from None


def committed_all(bootstrap: str, topic: str, group: str) -> tuple[int, int]:
    """(the group's committed offsets, the topic's end offsets), summed over partitions."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        tps = [TopicPartition(topic, p) for p in parts]
        committed = sum(max(tp.offset, 0) for tp in consumer.committed(tps, timeout=10))
        end = sum(consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in tps)
        return committed, end
    finally:
        consumer.close()


def read_topic(bootstrap: str, topic: str) -> list[Any]:
    """Every committed record of `topic`, in (partition, offset) order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"demo-read-{time.time()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "receive.message.max.bytes": 1_000_000_000})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in parts}
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[Any] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            out.extend(m for m in consumer.consume(10000, 0.5) if not m.error())
            positions = consumer.position([TopicPartition(topic, p) for p in parts])
            if all(tp.offset >= ends[tp.partition] for tp in positions):
                break
        out.sort(key=lambda m: (m.partition(), m.offset()))
        return out
    finally:
        consumer.close()
