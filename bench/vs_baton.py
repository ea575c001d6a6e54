"""The Baton side of bench/vs_kafka_streams.py: a coordinator and processor daemons
(`python -m orchestrator.cli coordinator|processor`) on a TOML config, measured like the
Kafka Streams peer. Settings are Baton's defaults but for `catch_up.source =
"changelog"` (state moves by its changelog, as Kafka Streams' does; the default input
source replays the input instead) and the heartbeat interval (HEARTBEAT_MS).
"""

from __future__ import annotations

import time
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

from _common import caught_up_records, last_done
from vs_common import (
    PARTITIONS,
    CpuWindow,
    Traffic,
    committed,
    create_topics,
    first_outputs_after,
    moved_gaps_ms,
    oracle,
    preload,
    read_topic,
    wait_until,
)

from orchestrator.devkit.cluster import Cluster
from orchestrator.devkit.embedded import free_port
from orchestrator.wire.client import CoordinatorClient, CoordinatorUnreachable
from orchestrator.wire.config import dump_config
from orchestrator.wire.status import is_balanced
from orchestrator.wire.token import read_token

__all__ = ["failover", "scale_out"]

# A handoff's release and activation each wait for the processors' next heartbeat:
# Baton's own pause and join benchmarks run at 100 ms, as here (the default is 1 s).
HEARTBEAT_MS = 100
WARM_S = 3.0
SETTLE_S = 2.0
PROCESS_TIMEOUT_S = 900.0
BALANCE_TIMEOUT_S = 600.0
FAILOVER_TIMEOUT_S = 600.0
STANDBY_CAUGHT_UP = 100


def _config(workdir: Path, bootstrap: str, job: str, topics: tuple[str, str],
            standbys: int) -> Path:
    port = free_port()
    raw = {
        "job": {"name": job, "class": "processor.examples:StampedSum",
                "inputs": [topics[0]], "output": topics[1]},
        "kafka": {"bootstrap_servers": bootstrap},
        "coordinator": {"listen": f"127.0.0.1:{port}", "url": f"http://127.0.0.1:{port}",
                        "token_file": str(workdir / "coordinator.token")},
        "processor": {"state_dir": str(workdir / "state"),
                      "heartbeat_interval_ms": HEARTBEAT_MS},
        "catch_up": {"source": "changelog", "num_standbys": standbys},
    }
    path = workdir / "job.toml"
    path.write_text(dump_config(raw))
    return path


def _start(workdir: Path, config: Path, log: Any, processors: tuple[str, ...]
           ) -> tuple[Cluster, CoordinatorClient, str]:
    cluster = Cluster(workdir, config, log)
    cluster.start("coordinator", "coordinator")
    wait_until("the coordinator's token", (workdir / "coordinator.token").exists, 60)
    listen = tomllib.loads(config.read_text())["coordinator"]["listen"]
    client = CoordinatorClient(f"http://{listen}", read_token(workdir / "coordinator.token"))
    wait_until("the coordinator leading", lambda: _answers(client), 60, 0.2)
    for name in processors:
        cluster.start(name, "processor", "--id", name)
    return cluster, client, listen


def _answers(client: CoordinatorClient) -> bool:
    try:
        client.status()
    except CoordinatorUnreachable:      # a new coordinator is a standby until it leads
        return False
    return True


def _actives(status: dict[str, Any], processor: str) -> set[int]:
    """The input partitions of a processor's active tasks."""
    tasks = {t["name"]: t["partitions"] for t in status["tasks"]}
    mine = next((p for p in status["processors"] if p["id"] == processor), None)
    return {int(part.rsplit(":", 1)[1]) for name in (mine or {}).get("active", [])
            for part in tasks.get(name, [])}


def _owners(status: dict[str, Any]) -> dict[int, str]:
    """Input partition -> the processor running its task as active."""
    return {part: p["id"] for p in status["processors"] for part in _actives(status, p["id"])}


def _standby_lags(listen: str) -> list[int]:
    """Every standby's lag, from the coordinator's /metrics."""
    with urllib.request.urlopen(f"http://{listen}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return [int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
            if line.startswith("baton_task_lag_records{") and 'role="standby"' in line]


def _setup(bootstrap: str, keys: int, tag: str, workdir: Path) -> tuple[Path, str, str]:
    inp, out = f"{tag}-in", f"{tag}-out"
    create_topics(bootstrap, inp, out)
    preload(bootstrap, inp, keys)
    workdir = workdir / tag
    workdir.mkdir(parents=True)
    return workdir, inp, out


def scale_out(bootstrap: str, broker_pid: int | None, keys: int, workdir: Path,
              log: Any) -> dict[str, Any]:
    """Two processors under traffic, a third starts: see bench/vs_kafka_streams.py."""
    tag = f"baton-{keys}-scale"
    workdir, inp, out = _setup(bootstrap, keys, tag, workdir)
    config = _config(workdir, bootstrap, tag, (inp, out), 0)
    group = f"baton.{tag}"
    cluster, client, _ = _start(workdir, config, log, ("p1", "p2"))
    try:
        wait_until("p1 and p2 processed the preload", lambda: is_balanced(client.status())
                   and committed(bootstrap, inp, group)[0] >= keys, PROCESS_TIMEOUT_S, 0.5)
        traffic = Traffic(bootstrap, inp, keys).start()
        time.sleep(WARM_S)
        before = _owners(client.status())
        started = time.time()
        cluster.start("p3", "processor", "--id", "p3")
        pids = {name: proc.pid for name, proc in cluster.procs.items()}
        cpu = CpuWindow({**pids, "broker": broker_pid}).start()
        wait_until("p3 balanced", lambda: _joined(client.status()), BALANCE_TIMEOUT_S, 0.1)
        spent = cpu.stop()
        balanced = last_done(workdir / "coordinator.log", "p3") or time.time()
        status = client.status()
        moved = {t for t, owner in _owners(status).items() if before.get(t) != owner}
        metrics_url = next(p["metrics_url"] for p in status["processors"] if p["id"] == "p3")
        rebuilt = caught_up_records(metrics_url)
        time.sleep(SETTLE_S)
        traffic.stop()
        wait_until("the traffic processed", lambda: _done(bootstrap, inp, group),
                   PROCESS_TIMEOUT_S, 0.5)
    finally:
        cluster.stop_all()
    gaps = moved_gaps_ms(read_topic(bootstrap, out), moved, started, balanced + SETTLE_S)
    return {"balanced_s": round(balanced - started, 2), "moved": sorted(moved), "gaps_ms": gaps,
            "rebuilt": rebuilt, "rebuilt_s": round(balanced - started, 2),
            "cpu_s": {"new": spent["p3"], "old": round(spent["p1"] + spent["p2"], 2),
                      "coordinator": spent["coordinator"], "broker": spent["broker"]},
            "oracle": oracle(bootstrap, inp, out)}


def _joined(status: dict[str, Any]) -> bool:
    return (is_balanced(status) and len(status["processors"]) == 3
            and bool(_actives(status, "p3")))


def failover(bootstrap: str, keys: int, workdir: Path, log: Any) -> dict[str, Any]:
    """Two processors, one standby of every task, under traffic; SIGKILL one."""
    tag = f"baton-{keys}-failover"
    workdir, inp, out = _setup(bootstrap, keys, tag, workdir)
    config = _config(workdir, bootstrap, tag, (inp, out), 1)
    group = f"baton.{tag}"
    cluster, client, listen = _start(workdir, config, log, ("p1", "p2"))
    try:
        wait_until("p1 and p2 processed the preload", lambda: is_balanced(client.status())
                   and committed(bootstrap, inp, group)[0] >= keys, PROCESS_TIMEOUT_S, 0.5)
        wait_until("standbys caught up", lambda: len(lags := _standby_lags(listen)) ==
                   PARTITIONS and max(lags) <= STANDBY_CAUGHT_UP, PROCESS_TIMEOUT_S, 0.2)
        traffic = Traffic(bootstrap, inp, keys).start()
        time.sleep(WARM_S)
        tasks = _actives(client.status(), "p1")
        killed_ms = int(time.time() * 1000)
        victim = cluster.procs.pop("p1")
        victim.kill()
        victim.wait()
        log(f"baton: p1 killed; waiting for its tasks {sorted(tasks)}")
        firsts = first_outputs_after(bootstrap, out, killed_ms, tasks, FAILOVER_TIMEOUT_S)
        time.sleep(SETTLE_S)
        traffic.stop()
        wait_until("the traffic processed", lambda: _done(bootstrap, inp, group),
                   PROCESS_TIMEOUT_S, 0.5)
    finally:
        cluster.stop_all()
    return {"failover_s": round(max(firsts.values()) - killed_ms / 1000, 2),
            "oracle": oracle(bootstrap, inp, out)}


def _done(bootstrap: str, topic: str, group: str) -> bool:
    done, end = committed(bootstrap, topic, group)
    return done >= end
