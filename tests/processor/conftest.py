"""A task store on real RocksDB for the unit tests. Spark fixtures: ONE local[2]
SparkSession for the whole test session, and a real Spark standalone cluster (a master
and two workers on 127.0.0.1) for the cluster test.

A JVM holds one SparkContext, and the shared session owns this process's. The cluster
test therefore runs its driver in a subprocess (tests/processor/spark/test_bulk.py's
CLUSTER_DRIVER script) instead of stopping and restarting the shared session: test
order stays free, and the shared session's start-up is paid once.

Executors import job classes by name: the repository root goes on PYTHONPATH (read by
the JVM when it starts Python workers), so `tests.processor.conftest:Trail` imports there.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from processor.job import Job, Output, Record, State
from processor.spark import spark_session, stop_spark
from store import TaskStore

REPO = Path(__file__).resolve().parents[2]
CLUSTER_START_TIMEOUT_S = 60.0


class Trail(Job):
    """An order-sensitive job: a per-key hash chain of the values and the last offsets.

    The value b"0" is poison: it raises AFTER writing state, so a path that skips it
    without undoing its writes builds a different state.
    """

    def process(self, record: Record, state: State) -> Iterator[Output]:
        prev = state.get(record.key, {"n": 0, "chain": 0, "last": []})
        chain = zlib.crc32(record.value or b"", prev["chain"])
        state[record.key] = {"n": prev["n"] + 1, "chain": chain,
                             "last": (prev["last"] + [record.offset])[-3:]}
        if record.value == b"0":
            raise ValueError(f"poison record at {record.topic}:{record.partition}@"
                             f"{record.offset}")
        yield record.key, f"{prev['n'] + 1}:{chain}"


class ExecutorBomb(Job):
    """Fails in every Spark task (not on the driver): to test task retries and errors."""

    def __init__(self) -> None:
        from pyspark import TaskContext

        if TaskContext.get() is not None:
            raise RuntimeError("boom in an executor")

    def process(self, record: Record, state: State) -> Iterator[Output]:
        yield from ()


class Tally(Job):
    """Keeps state across keys (a global count): no per-key parallel fold can rebuild it."""

    def process(self, record: Record, state: State) -> Iterator[Output]:
        state["records"] = state.get("records", 0) + 1
        yield record.key, str(state["records"])


def _with_repo_on_pythonpath(env: dict[str, str]) -> dict[str, str]:
    parts = [str(REPO), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    return {**env, "PYTHONPATH": os.pathsep.join(dict.fromkeys(parts))}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The test session's one SparkSession (local[2]); stopped at the end."""
    os.environ.update(_with_repo_on_pythonpath(dict(os.environ)))
    session = spark_session("local[2]")
    try:
        yield session
    finally:
        stop_spark()


@dataclass
class Cluster:
    master: str
    env: dict[str, str]
    pids: list[int]


def spark_class_path() -> Path:
    """The pyspark wheel's `spark-class` launcher, which starts a standalone master or
    worker (here, and in tests/processor/spark/test_remote_driver.py)."""
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([str(spark_class_path()), *args], env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def _alive_workers(ui_port: int) -> int:
    """0 until the master's UI answers its JSON (it may answer an HTML page while starting)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as reply:
            state = json.load(reply)
    except (OSError, ValueError):
        return 0
    if not isinstance(state, dict):
        return 0
    return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")


def _distinct_free_ports(count: int) -> list[int]:
    """Ports free now and distinct from each other: all sockets stay bound until all are chosen."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def _start_cluster(tmp_path: Path, attempt: int) -> tuple[Cluster, list[subprocess.Popen[bytes]]]:
    """One try: a port taken meanwhile makes Spark fail (no silent retry on port+1)."""
    port, ui, ui1, ui2 = _distinct_free_ports(4)
    logs = tmp_path / f"try{attempt}"
    no_retry = "-Dspark.port.maxRetries=0"
    env = _with_repo_on_pythonpath({
        **os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(logs / "logs"),
        "SPARK_LOCAL_DIRS": str(logs / "local"),
        "SPARK_MASTER_OPTS": f"-Dspark.master.rest.enabled=false {no_retry}",
        "SPARK_WORKER_OPTS": no_retry})
    logs.mkdir(parents=True)
    procs = [_start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(port), "--webui-port", str(ui)], env, logs / "master.log")]
    try:
        for n, worker_ui in ((1, ui1), (2, ui2)):
            worker_env = {**env, "SPARK_WORKER_DIR": str(logs / f"worker{n}")}
            procs.append(_start([
                "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                "--webui-port", str(worker_ui)], worker_env, logs / f"worker{n}.log"))
        deadline = time.monotonic() + CLUSTER_START_TIMEOUT_S
        while _alive_workers(ui) < 2:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"standalone cluster did not start; see {logs}/*.log")
            time.sleep(0.5)
    except BaseException:
        _stop(procs[::-1])
        raise
    return Cluster(f"spark://127.0.0.1:{port}", env, [p.pid for p in procs]), procs


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A Spark master and two 1-core workers on 127.0.0.1, stopped by PID at the end of
    the session; the tests' drivers are its applications one after another, as on a
    shared cluster (its start is most of such a test's time).

    Ports are chosen before the JVMs bind them, so another process may take one in
    between: such a start fails fast and is tried again on new ports (three tries).
    """
    for attempt in range(1, 4):
        try:
            cluster, procs = _start_cluster(tmp_path_factory.mktemp("spark-cluster"),
                                            attempt)
            break
        except RuntimeError:
            if attempt == 3:
                raise
    try:
        yield cluster
    finally:
        _stop(procs[::-1])


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TaskStore]:
    """A fresh task store on real RocksDB."""
    with TaskStore(tmp_path / "s") as opened:
        yield opened
