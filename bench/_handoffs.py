"""A job on real daemons, measured at one state size: a coordinator and p1 holding the
state, p2 joining (the time to balanced and what p2 caught up), then handoffs under
traffic and each one's pause, read back from the output topic.

bench/handoff_pause.py reports it at several sizes; bench/join_catchup.py sets the join
beside the same catch-up alone. A bench runs as a script, so its folder is on the import
path and it imports this module as `_handoffs`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import zlib
from datetime import datetime
from pathlib import Path
from typing import Any

from _common import (
    PHASE_LINE,
    BenchBroker,
    Traffic,
    caught_up_records,
    cpu_seconds,
    last_done,
    machine_cpu_seconds,
    preload,
    start_broker,
    thread_cpu_seconds,
    wait_broker_quiet,
    wait_until,
)
from _floor import measure_floor

from orchestrator.devkit.cluster import Cluster, committed_all, create_topics, read_topic
from orchestrator.devkit.demo import Demo, make_config
from orchestrator.devkit.handoff_phases import phase_summary, read_phases
from orchestrator.devkit.pauses import pause_gaps, percentile
from orchestrator.devkit.settings_report import changed_settings
from orchestrator.wire.client import CoordinatorClient
from orchestrator.wire.config import dump_config
from orchestrator.wire.status import is_balanced
from orchestrator.wire.token import read_token

__all__ = ["PARTITIONS", "RATE", "run_size"]

PARTITIONS = 4
RATE = 1000.0


def _partition_of(key: bytes) -> int:
    return zlib.crc32(key) % PARTITIONS


def _wait_committed(bootstrap: str, topic: str, timeout: float) -> None:
    def done() -> bool:
        committed, end = committed_all(bootstrap, topic, "baton.demo")
        return committed >= end

    wait_until(f"every record of {topic} committed", done, timeout, 0.5)


def _cpu_of(cluster: Cluster, broker: BenchBroker) -> dict[str, float]:
    """CPU seconds so far of each process ("p1", this bench's own: "bench") and of its
    threads by name ("broker/autosave", "p1/rdk:broker1")."""
    pids = {name: proc.pid for name, proc in cluster.procs.items()}
    spent: dict[str, float] = {"machine": machine_cpu_seconds()}
    for name, pid in {**pids, "broker": broker.pid, "bench": os.getpid()}.items():
        spent[name] = cpu_seconds(pid)
        for comm, seconds in thread_cpu_seconds(pid).items():
            spent[f"{name}/{comm}"] = seconds
    return spent


def _catch_up_window(coordinator_log: Path, to: str) -> float | None:
    """Seconds from the first handoff to `to` entering catching_up to the last one
    leaving it (the coordinator's log): the catch-up inside the join, without the
    processor's start, its registration and the last handoff."""
    started: list[datetime] = []
    ended: list[datetime] = []
    for line in coordinator_log.read_text(errors="replace").splitlines():
        match = PHASE_LINE.match(line)
        if match is None or match.group(3) != to:
            continue
        when = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
        if match.group(5) == "catching_up":
            started.append(when)
        elif match.group(4) == "catching_up":
            ended.append(when)
    if not started or not ended:
        return None
    return (max(ended) - min(started)).total_seconds()


def run_size(keys: int, handoffs: int, log: Any, source: str = "input",
             keep_logs: Path | None = None, read_from: str | None = None,
             kind: str = "kafka", kafka: dict[str, Any] | None = None,
             defaults: bool = False) -> dict[str, Any]:
    """Preload `keys` keys, let p2 join (catching up half of them), then `handoffs`
    handoffs under traffic; `source`: catch_up.source; `read_from`:
    catch_up.changelog_read_from (None: the broker's profile's); `kind`: the broker;
    `kafka`: [kafka] settings on top of its profile's; the daemons' logs are copied to
    `keep_logs`/<keys> when given; `defaults`: Baton's defaults, not the demo's settings."""
    with tempfile.TemporaryDirectory(prefix="baton-pause-") as tmp, start_broker(kind) as broker:
        workdir = Path(tmp)
        create_topics(broker.settings(), {"events": PARTITIONS, "sums": PARTITIONS})
        daemon = {**broker.daemon, "kafka": {**broker.daemon.get("kafka", {}), **(kafka or {})}}
        config = make_config(workdir, broker.bootstrap, ("events", "sums"), daemon, defaults)
        if source != "input" or read_from is not None:
            import tomllib

            raw = tomllib.loads(config.read_text())
            raw["catch_up"]["source"] = source
            if read_from is not None:
                raw["catch_up"]["changelog_read_from"] = read_from
            config.write_text(dump_config(raw))
        settings = changed_settings(config)
        demo = Demo(None)
        cluster = Cluster(workdir, config, log)
        started = time.monotonic()
        preload(broker.bootstrap, "events", keys, _partition_of, flush_s=120)
        log(f"{keys} keys preloaded in {time.monotonic() - started:.1f}s")
        cluster.start("coordinator", "coordinator")
        measured_from = float("inf")        # the handoffs under traffic: their phases
        try:
            token = workdir / "coordinator.token"
            while not token.exists():
                time.sleep(0.1)
            import tomllib

            listen = tomllib.loads(config.read_text())["coordinator"]["listen"]
            client = CoordinatorClient(f"http://{listen}", read_token(token))
            cluster.start("p1", "processor", "--id", "p1")
            demo.wait(client, "p1 active", lambda s: is_balanced(s) and any(
                p["active"] for p in s["processors"]), 300)
            _wait_committed(broker.bootstrap, "events", 900)
            log(f"p1 processed the state in {time.monotonic() - started:.1f}s; the broker's "
                f"saves of it done {wait_broker_quiet(broker.pid):.1f}s later")
            joined = time.time()
            cluster.start("p2", "processor", "--id", "p2")
            cpu_before = _cpu_of(cluster, broker)
            balanced = demo.wait(client, "p2 balanced", lambda s: is_balanced(s) and all(
                p["active"] for p in s["processors"]) and len(s["processors"]) == 2, 900)
            join_cpu = {name: round(spent - cpu_before.get(name, 0.0), 2)
                        for name, spent in _cpu_of(cluster, broker).items()
                        if spent - cpu_before.get(name, 0.0) >= 0.01}
            # exact, not sampled: the status poll is 200 ms apart and sees a lag only
            # after the catch-up has begun
            join_s = (last_done(workdir / "coordinator.log", "p2") or time.time()) - joined
            volume = caught_up_records(next(p["metrics_url"] for p in balanced["processors"]
                                             if p["id"] == "p2"))
            catch_up_s = _catch_up_window(workdir / "coordinator.log", "p2")
            log(f"p2 joined -> balanced in {join_s:.2f}s (caught up {volume} records; "
                f"catching up {catch_up_s}s; CPU seconds meanwhile {join_cpu})")
            traffic = Traffic(broker.bootstrap, "events", keys, RATE, _partition_of).start()
            measured_from = time.time()
            time.sleep(2)
            demo.watches.clear()
            victim = "p1"
            while len(demo.watches) < handoffs:
                client.drain(victim)
                demo.wait(client, f"{victim} drained", lambda s, v=victim: not any(
                    p["id"] == v for p in s["processors"]) and is_balanced(s), 300)
                cluster.stop(victim)
                cluster.start(victim, "processor", "--id", victim)
                demo.wait(client, f"{victim} back", lambda s: is_balanced(s) and len(
                    s["processors"]) == 2 and all(p["active"] for p in s["processors"]), 300)
                log(f"{len(demo.watches)} handoffs so far")
                victim = "p2" if victim == "p1" else "p1"
            # the same steps under the load the handoffs ran in: the live traffic and
            # both processors' commits on the same cores
            loaded_floor = measure_floor(broker.settings())
            traffic.stop()
            _wait_committed(broker.bootstrap, "events", 300)
            status = client.status()
            tasks = {t["name"]: t["partitions"] for t in status["tasks"]}
        finally:
            cluster.stop_all()
            phases = [h for h in read_phases(workdir / "coordinator.log",
                                             {p: workdir / f"{p}.log" for p in ("p1", "p2")})
                      if h.decided >= measured_from]
            if keep_logs is not None:
                kept = keep_logs / str(keys)
                kept.mkdir(parents=True, exist_ok=True)
                for daemon_log in workdir.glob("*.log"):
                    shutil.copy(daemon_log, kept / daemon_log.name)
        inputs = read_topic(broker.bootstrap, "events")
        outputs = read_topic(broker.bootstrap, "sums")
        gaps = pause_gaps(demo.watches, inputs, outputs, tasks)
        for gap in gaps:    # to find a slow one in the daemons' logs
            log(f"pause {gap.ms:.0f} ms: {gap.task!r} from "
                f"{time.strftime('%H:%M:%S', time.localtime(gap.began))}"
                f".{int(gap.began % 1 * 1000):03d}")
        pauses = [gap.ms for gap in gaps]
        floor = measure_floor(broker.settings())    # the same broker, its traffic stopped
        return {"keys": keys, "handoffs": len(pauses),
                "pause_ms_p50": round(percentile(pauses, 50), 1),
                "pause_ms_p99": round(percentile(pauses, 99), 1),
                "pause_ms_max": round(max(pauses), 1) if pauses else 0.0,
                "join_to_balanced_s": round(join_s, 2), "catch_up_records": volume,
                "catch_up_records_per_s": round(volume / join_s, 1) if join_s else 0.0,
                "catching_up_s": catch_up_s, "join_cpu_s": join_cpu,
                "phases_ms": phase_summary(phases), "floor_ms": floor,
                "floor_under_traffic_ms": loaded_floor, "settings": settings}
