"""The bulk path on a Spark cluster whose executors reach the driver on a non-loopback
address: a standalone master and two workers (from the pyspark wheel's `spark-class`)
in a network namespace joined to this host by a veth pair, `spark.authenticate` on
everywhere with the secret read from a 0600 file through `[spark] conf`.

The driver runs in the host's namespace; by default it advertises the address its
route to the master leaves from (the host side of the veth), never 127.0.0.1, which
the executors could not reach. The executors read the test broker through a relay
pair (the broker listens on the host's loopback). Nothing leaves this machine."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.devkit.embedded import free_port
from orchestrator.wire.config import dump_config, load_config
from processor.spark.session import driver_host, session_settings
from tests.processor.conftest import REPO, spark_class_path
from tests.processor.spark.bulk_support import TRAIL, consumer_path, produce_input, store_bytes
from tests.processor.spark.netns import Namespace, veth_namespace

pytestmark = [pytest.mark.integration, pytest.mark.spark]

HERE = Path(__file__).resolve().parent
MASTER_PORT, MASTER_UI = 7077, 8080      # inside the namespace: every port is free
CLUSTER_START_TIMEOUT_S = 120.0


@dataclass
class RemoteCluster:
    ns: Namespace
    master: str
    secret_file: Path


def _start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _relay(command: list[str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _stop(procs: list[Any]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def _alive_workers(ns: Namespace) -> int:
    try:
        with urllib.request.urlopen(f"http://{ns.ns_ip}:{MASTER_UI}/json/", timeout=2) as reply:
            state = json.load(reply)
    except (OSError, ValueError):
        return 0
    workers = state.get("workers", []) if isinstance(state, dict) else []
    return sum(1 for worker in workers if worker.get("state") == "ALIVE")


@pytest.fixture
def remote_cluster(broker: Any, tmp_path: Path) -> Iterator[RemoteCluster]:
    secret_file = tmp_path / "spark.secret"
    secret = secrets.token_hex(16)
    secret_file.write_text(secret + "\n")
    os.chmod(secret_file, 0o600)
    broker_port = broker.bootstrap.rpartition(":")[2]
    auth = f"-Dspark.authenticate=true -Dspark.authenticate.secret={secret}"
    logs = tmp_path / "cluster"
    logs.mkdir()
    with veth_namespace() as ns:
        env = {**os.environ, "SPARK_LOCAL_IP": ns.ns_ip, "SPARK_LOG_DIR": str(logs / "logs"),
               "SPARK_LOCAL_DIRS": str(logs / "local"),
               "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               "SPARK_MASTER_OPTS": f"-Dspark.master.rest.enabled=false {auth}",
               "SPARK_WORKER_OPTS": auth}
        procs: list[Any] = []
        try:
            relay_port = str(free_port())
            relay = [sys.executable, str(HERE / "relay.py")]
            procs.append(_relay([*relay, ns.host_ip, relay_port, "127.0.0.1", broker_port]))
            procs.append(_relay(ns.command(*relay, "127.0.0.1", broker_port, ns.host_ip,
                                           relay_port)))
            spark_class = str(spark_class_path())
            procs.append(_start(ns.command(
                spark_class, "org.apache.spark.deploy.master.Master", "--host", ns.ns_ip,
                "--port", str(MASTER_PORT), "--webui-port", str(MASTER_UI)), env,
                logs / "master.log"))
            for n in (1, 2):
                procs.append(_start(ns.command(
                    spark_class, "org.apache.spark.deploy.worker.Worker",
                    f"spark://{ns.ns_ip}:{MASTER_PORT}", "--host", ns.ns_ip, "--cores", "1",
                    "--memory", "1g", "--webui-port", str(MASTER_UI + n)),
                    {**env, "SPARK_WORKER_DIR": str(logs / f"worker{n}")},
                    logs / f"worker{n}.log"))
            deadline = time.monotonic() + CLUSTER_START_TIMEOUT_S
            while _alive_workers(ns) < 2:
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise AssertionError(f"the namespaced cluster did not start; see {logs}")
                time.sleep(0.5)
            yield RemoteCluster(ns, f"spark://{ns.ns_ip}:{MASTER_PORT}", secret_file)
        finally:
            _stop(procs[::-1])


DRIVER = r"""
import json, sys, time
from pathlib import Path
from orchestrator.wire.config import load_config
from processor.spark.bulk import run_bulk_catch_up
from processor.spark import spark_session
from processor.spark.ingest import ingest_bulk
from store import TaskStore

config = load_config(sys.argv[1])
spark = spark_session(config.spark.master, conf=config.spark.conf)
sc = spark.sparkContext
deadline = time.monotonic() + 60
while sc._jsc.sc().getExecutorMemoryStatus().size() < 3:   # two executors + the driver
    assert time.monotonic() < deadline, "the two workers' executors did not register"
    time.sleep(0.2)
executors = sc._jsc.sc().getExecutorMemoryStatus().keySet().toString()
store = TaskStore(Path(sys.argv[3]))
result = run_bulk_catch_up(config, json.loads(sys.argv[2]), "Partition 0")
ingest_bulk(store, result)
store.close()
print(json.dumps({"driver_host": sc.getConf().get("spark.driver.host"),
                  "authenticate": sc.getConf().get("spark.authenticate"),
                  "executors": executors, "records": result.records}))
spark.stop()
"""


def test_bulk_path_with_a_driver_reached_off_loopback_and_authentication(
        broker: Any, unique: Any, tmp_path: Path, remote_cluster: RemoteCluster) -> None:
    topic = broker.create_topic(unique("bulk-remote"), 2)
    ranges = produce_input(broker, topic, 2, 2000, 100, seed=5)
    raw = {"job": {"name": unique("remote"), "class": TRAIL, "inputs": [topic],
                   "output": topic},
           "kafka": broker.kafka_table(),
           "spark": {"master": remote_cluster.master, "conf": {
               "spark.authenticate": True,
               "spark.authenticate.secret": {"file": str(remote_cluster.secret_file)}}}}
    path = tmp_path / "job.toml"
    path.write_text(dump_config(raw))
    secret = remote_cluster.secret_file.read_text().strip()
    assert load_config(path).spark.conf["spark.authenticate.secret"] == secret
    run = subprocess.run([sys.executable, "-c", DRIVER, str(path), json.dumps(ranges),
                          str(tmp_path / "bulk")], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, check=False,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr[-4000:]
    assert secret not in run.stdout + run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    ns = remote_cluster.ns
    assert report["driver_host"] == ns.host_ip       # the default: not 127.0.0.1
    assert report["authenticate"] == "true"
    assert report["executors"].count(f"{ns.ns_ip}:") == 2, report["executors"]
    assert report["records"] == 2000
    consumer_path(broker, tmp_path / "ref", ranges, "input")
    assert store_bytes(tmp_path / "bulk") == store_bytes(tmp_path / "ref")


def test_the_driver_binds_loopback_only_for_a_local_master_and_conf_wins() -> None:
    local = session_settings("local[2]", {})
    assert local["spark.driver.host"] == local["spark.driver.bindAddress"] == "127.0.0.1"
    cluster = session_settings("spark://192.0.2.10:7077", {"spark.authenticate": True})
    assert cluster["spark.driver.host"] == driver_host("spark://192.0.2.10:7077")
    assert cluster["spark.driver.host"] != "127.0.0.1"
    assert "spark.driver.bindAddress" not in cluster     # Spark binds to driver.host
    assert cluster["spark.authenticate"] == "true"
    given = session_settings("spark://192.0.2.10:7077", {
        "spark.driver.host": "10.1.2.3", "spark.driver.bindAddress": "0.0.0.0",
        "spark.ui.enabled": True})
    assert (given["spark.driver.host"], given["spark.driver.bindAddress"],
            given["spark.ui.enabled"]) == ("10.1.2.3", "0.0.0.0", "true")
