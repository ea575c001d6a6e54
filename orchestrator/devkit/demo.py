"""`baton demo`: the running-sum job on the embedded broker, scaled under live traffic.

Theory of operation: the demo is a scale-out script like an operator's. It starts a
broker, a coordinator and two processors as child processes, keeps a keyed producer
running, then adds a third processor, drains one, expands the input from 4 to 8
partitions, splits the tasks (4 -> 8) and adds processors until the job runs on more
processors than it had tasks, watching `/status` with progress bars. At the end it stops
the traffic, lets the job finish, and checks the oracle over the output topic: per
key, the output sequence must equal the running sums of the key's inputs in order.
Pauses are measured from the output itself: the largest gap between consecutive
outputs of a moved task's keys while its handoff was in flight.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from orchestrator.devkit.cluster import Cluster, committed_all, read_topic
from orchestrator.devkit.embedded import (
    EMBEDDED_CATCH_UP_SETTINGS,
    EMBEDDED_KAFKA_SETTINGS,
    EMBEDDED_PROCESSOR_SETTINGS,
    EmbeddedBroker,
    free_port,
)
from orchestrator.devkit.handoff_phases import phase_summary, read_phases
from orchestrator.devkit.pauses import (
    Gap,
    Watch,
    handoff_kind,
    handoff_outcome,
    handoff_pauses,
    pause_gaps,
    percentile,
)
from orchestrator.devkit.settings_report import changed_settings
from orchestrator.wire.barrier import input_records
from orchestrator.wire.client import CoordinatorClient
from orchestrator.wire.config import dump_config, load_config
from orchestrator.wire.status import is_balanced
from orchestrator.wire.token import read_token
from processor.oracle import OracleResult, check_running_sums

__all__ = ["DEMO_SETTINGS", "DemoResult", "make_config", "run_demo"]

INPUT_PARTITIONS = 4
EXPANDED_PARTITIONS = 8
FINAL_PROCESSORS = 5          # more than the job's original 4 tasks, few enough for 2 cores
KEYS = 2000
RATE = 1500.0                 # records/s: steady traffic a 2-core machine keeps up with
WARM_S = 8.0                  # traffic before the scale-out, so there is state to move
PHASE_TIMEOUT_S = 60.0


@dataclass
class DemoResult:
    records_in: int = 0
    records_out: int = 0
    lost: int = 0
    duplicated: int = 0
    wrong: int = 0
    handoffs: int = 0
    pause_ms_p50: float = 0.0
    pause_ms_p99: float = 0.0
    catch_up_records_per_s: float = 0.0
    split_children: int = 0
    split_to_balanced_s: float = 0.0   # `baton split` to every child live and balanced
    # every handoff seen: {"task", "kind" (move | split | drain), "from", "to", "outcome"
    # (done | cancelled | failed), "pause_ms", "at"}, so one slow handoff shows which
    # and where to look in the daemons' logs (orchestrator/devkit/pauses.py)
    handoff_pauses: list[dict[str, Any]] = field(default_factory=list)
    # where the pauses went: each phase's p50 and p99 in ms, from the daemons' logs
    # (orchestrator/devkit/handoff_phases.py)
    phases_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    # what the demo's daemons run with that differs from Baton's defaults
    settings: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    ok: bool = False
    metrics: dict[str, str] = field(default_factory=dict)
    steps: list[str] = field(default_factory=list)


class _Feeder:
    """Steady keyed traffic; the partition is the key's hash modulo the current count."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        # log_level 4: its notice about the expansion would land amid the progress bars
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                  "log_level": 4})
        self.topic, self.partitions, self.sent = topic, INPUT_PARTITIONS, 0
        self._stop = threading.Event()
        self.hold = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-feeder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            if self.hold.is_set():
                self.producer.flush(30)
                started = time.monotonic() - self.sent / RATE   # no burst after the hold
                time.sleep(0.01)
                continue
            due = int((time.monotonic() - started) * RATE)
            while self.sent < due:
                key = f"key-{self.sent * 7919 % KEYS}".encode()
                self.producer.produce(self.topic, key=key, value=str(self.sent % 9 + 1).encode(),
                                      partition=zlib.crc32(key) % self.partitions)
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.01)
        self.producer.flush(30)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(60)
        return self.sent


# the config sections the demo's daemons add on the embedded broker
_EMBEDDED_DAEMON = {"kafka": EMBEDDED_KAFKA_SETTINGS, "processor": EMBEDDED_PROCESSOR_SETTINGS,
                    "catch_up": EMBEDDED_CATCH_UP_SETTINGS}


# what the demo (and the benches built on it) change from Baton's defaults, to show a
# handoff within a few minutes of a demo: heartbeats and partition polls 10x and 5x as
# often, warmups handed over 700 records sooner, twice as many warmups at once
DEMO_SETTINGS: dict[str, dict[str, Any]] = {
    "coordinator": {"release_timeout_ms": 10000, "monitor_interval_ms": 1000},
    "processor": {"heartbeat_interval_ms": 100, "coordinator_grace_ms": 15000,
                  "commit_interval_ms": 100},
    "catch_up": {"acceptable_lag": 300, "max_warmups": 4},
}


def make_config(workdir: Path, bootstrap: str, topics: tuple[str, str],
                daemon: Mapping[str, Mapping[str, Any]] | None = None,
                defaults: bool = False) -> Path:
    """The demo job's config; `daemon`: the sections ("kafka", "processor", "catch_up")
    the broker needs on top (None: the embedded broker's; {} on Apache Kafka), so a
    bench runs the same daemons on either broker; `defaults`: Baton's defaults instead
    of DEMO_SETTINGS (the broker's own settings still apply)."""
    extra = _EMBEDDED_DAEMON if daemon is None else daemon
    tuned: dict[str, dict[str, Any]] = {} if defaults else DEMO_SETTINGS
    port = free_port()
    raw = {
        "job": {"name": "demo", "class": "processor.examples:StampedSum",
                "inputs": [topics[0]], "output": topics[1], "grouping": "partition",
                # the demo's producer holds its writes while `baton expand` runs and
                # refreshes its metadata before it writes again: it is never stale, so
                # no grace (the default is the clients' 5 minutes)
                "expansion_grace_ms": 0},
        "kafka": {"bootstrap_servers": bootstrap, **extra.get("kafka", {})},
        "coordinator": {"listen": f"127.0.0.1:{port}", "url": f"http://127.0.0.1:{port}",
                        "token_file": str(workdir / "coordinator.token"),
                        **tuned.get("coordinator", {})},
        "processor": {"state_dir": str(workdir / "state"), **tuned.get("processor", {}),
                      **extra.get("processor", {})},
        "catch_up": {**tuned.get("catch_up", {}), **extra.get("catch_up", {})},
    }
    path = workdir / "demo.toml"
    path.write_text(dump_config(raw))
    return path


class Demo:
    def __init__(self, console: Console | None) -> None:
        self.console = console
        self.result = DemoResult()
        self.watches: list[Watch] = []                 # one per handoff seen
        self._live: dict[tuple[str, str], Watch] = {}  # handoffs in the last /status

    def log(self, text: str) -> None:
        self.result.steps.append(text)
        if self.console is not None:
            self.console.print(f"[bold cyan]demo[/] {text}")

    def wait(self, client: CoordinatorClient, what: str, done: Callable[[dict[str, Any]], bool],
             timeout: float = PHASE_TIMEOUT_S) -> dict[str, Any]:
        """Poll /status, drawing a progress bar per moving task, until `done`."""
        deadline = time.monotonic() + timeout
        with self._progress() as progress:
            bars: dict[tuple[str, str], Any] = {}
            while True:
                status = client.status()
                self._observe(status, progress, bars)
                if done(status):
                    return status
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{what}: not reached in {timeout:.0f}s; pending: "
                                       f"{status.get('pending') or status.get('handoffs')}")
                time.sleep(0.2)

    @contextmanager
    def _progress(self) -> Iterator[Progress]:
        progress = Progress(TextColumn("{task.description}"), BarColumn(),
                            TextColumn("lag {task.fields[lag]:>7}"),
                            TextColumn("{task.fields[rate]:>8} rec/s"), TimeRemainingColumn(),
                            console=self.console, disable=self.console is None, transient=False)
        with progress:
            yield progress

    def _observe(self, status: dict[str, Any], progress: Progress,
                 bars: dict[tuple[str, str], Any]) -> None:
        now = time.monotonic()
        live: dict[tuple[str, str], Watch] = {}
        for handoff in status.get("handoffs", []):
            key = (handoff["task"], str(handoff.get("to")))
            lag = int(handoff.get("lag") or 0)
            watch = self._live.get(key)
            if watch is None:       # a handoff not in the previous /status: a new one
                watch = Watch(handoff["task"], now, now, handoff.get("from"),
                              handoff.get("to"), handoff_kind(handoff, status))
                self.watches.append(watch)
            live[key] = watch
            watch.last_seen = now
            watch.max_lag = max(watch.max_lag, lag)
            if handoff["phase"] not in ("planned", "catching_up") and watch.caught_up_at is None:
                watch.caught_up_at = now
            label = (f"{handoff['task']} {handoff.get('from')}→{handoff.get('to')} "
                     f"{handoff['phase']}")
            if key not in bars:
                bars[key] = progress.add_task(label, total=max(lag, 1), lag=lag, rate="-")
            elapsed = max(now - watch.first_seen, 1e-3)
            rate = f"{(watch.max_lag - lag) / elapsed:.0f}"
            progress.update(bars[key], description=label, total=max(watch.max_lag, 1),
                            completed=watch.max_lag - lag, lag=lag, rate=rate)
        for key, ended in self._live.items():
            if key not in live:
                ended.outcome = handoff_outcome(ended, status)
        self._live = live
        for moved, bar in bars.items():
            if moved not in live:
                progress.update(bar, completed=progress.tasks[bar].total, lag=0)


def _holds_tasks(processor: str) -> Callable[[dict[str, Any]], bool]:
    def check(status: dict[str, Any]) -> bool:
        mine = [p for p in status["processors"] if p["id"] == processor]
        return bool(mine and mine[0]["active"]) and is_balanced(status)
    return check


def _scale(demo: Demo, cluster: Cluster, client: CoordinatorClient, feeder: _Feeder,
           topic: str) -> dict[str, Any]:
    demo.wait(client, "coordinator up", lambda s: True, 30)
    for p in ("p1", "p2"):
        cluster.start(p, "processor", "--id", p)
    demo.wait(client, "2 processors balanced", lambda s: is_balanced(s) and
              sum(len(p["active"]) for p in s["processors"]) == INPUT_PARTITIONS)
    feeder.start()
    demo.log(f"traffic: {RATE:.0f} records/s over {KEYS} keys; warming up {WARM_S:.0f}s")
    time.sleep(WARM_S)
    demo.log("scale out: starting p3 (catch-up, then handoffs)")
    cluster.start("p3", "processor", "--id", "p3")
    demo.wait(client, "p3 takes over tasks", _holds_tasks("p3"))
    demo.log("scale in: draining p1")
    client.drain("p1")
    demo.wait(client, "p1 drained", lambda s: is_balanced(s) and not any(
        p["id"] == "p1" and p["active"] for p in s["processors"]))
    demo.log(f"expand: {topic} {INPUT_PARTITIONS} -> {EXPANDED_PARTITIONS} partitions")
    # Our producer switches to the new partition count when `baton expand` returns; the
    # barrier is recorded when the partitions are created, so the producer holds its
    # writes meanwhile (a few hundred ms), as a producer must for per-key order.
    feeder.hold.set()
    expanded = subprocess.run([sys.executable, "-m", "orchestrator.cli", "expand", "-c",
                               str(cluster.config_file), "--topic", topic, "--partitions",
                               str(EXPANDED_PARTITIONS)], capture_output=True, text=True,
                              timeout=120)
    if expanded.returncode != 0:
        raise RuntimeError(f"baton expand failed: {expanded.stderr.strip()}")
    feeder.producer.list_topics(topic, timeout=10)     # see the new partitions first
    feeder.partitions = EXPANDED_PARTITIONS
    feeder.hold.clear()
    demo.wait(client, "expansion live", lambda s: is_balanced(s) and all(
        len(t["partitions"]) == 2 for t in s["tasks"]))
    split_at = time.monotonic()
    split = client.split(dry_run=False)
    demo.result.split_children = len(split["splits"])
    demo.log(f"split: {len(split['splits'])} child task(s), {split['tasks']} tasks in all")
    # Every daemon here shares the machine's cores: started now, the new processors'
    # start-up (imports and clients, ~1.5 CPU-seconds each) would run inside the
    # children's first handoffs, which it does not on hosts of their own
    demo.wait(client, "split settled", is_balanced)
    extra = [f"p{n}" for n in range(4, 4 + FINAL_PROCESSORS - 2)]
    demo.log(f"scale out past the original {INPUT_PARTITIONS} tasks: starting "
             f"{', '.join(extra)}")
    for p in extra:
        cluster.start(p, "processor", "--id", p)
    demo.wait(client, f"{FINAL_PROCESSORS} processors balanced over {split['tasks']} tasks",
              lambda s: is_balanced(s) and sum(bool(p["active"]) for p in s["processors"]
                                             if p["alive"]) == FINAL_PROCESSORS)
    demo.result.split_to_balanced_s = round(time.monotonic() - split_at, 1)
    return client.status()


def run_demo(console: Console | None, keep_logs: Path | None = None) -> DemoResult:
    """Run the whole scenario; the result says whether the oracle held. The daemons'
    logs are copied to `keep_logs` when given (they go with the demo's workdir)."""
    demo = Demo(console)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="baton-demo-") as tmp, EmbeddedBroker() as broker:
        workdir = Path(tmp)
        topics = ("events", "sums")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic(topics[0], INPUT_PARTITIONS, 1),
                                           NewTopic(topics[1], INPUT_PARTITIONS, 1)]).values():
            future.result(30)
        config_file = make_config(workdir, broker.bootstrap, topics)
        demo.result.settings = changed_settings(config_file)
        demo.log(f"embedded broker on {broker.bootstrap}; config {config_file}")
        cluster = Cluster(workdir, config_file, demo.log)
        feeder = _Feeder(broker.bootstrap, topics[0])
        try:
            token_file = workdir / "coordinator.token"
            _wait_file(token_file, cluster)
            config = load_config(config_file)
            url = config.coordinator.url
            client = CoordinatorClient.for_config(config, read_token(token_file))
            status = _scale(demo, cluster, client, feeder, topics[0])
            demo.result.metrics = {p["id"]: p.get("metrics_url") or "-"
                                   for p in status["processors"]}
            demo.result.metrics["coordinator"] = f"{url}/metrics"
            sent = feeder.stop()
            demo.log(f"traffic stopped after {sent} records; letting the job finish")
            deadline = time.monotonic() + PHASE_TIMEOUT_S
            while True:
                done, end = committed_all(broker.bootstrap, topics[0], "baton.demo")
                if done >= end or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
            tasks = {t["name"]: t["partitions"] for t in client.status()["tasks"]}
        finally:
            feeder.stop()
            cluster.stop_all()
            demo.result.phases_ms = phase_summary(read_phases(
                workdir / "coordinator.log",
                {p.stem: p for p in workdir.glob("p*.log")}))
            if keep_logs is not None:
                keep_logs.mkdir(parents=True, exist_ok=True)
                for daemon_log in workdir.glob("*.log"):
                    shutil.copy(daemon_log, keep_logs / daemon_log.name)
        del feeder, admin       # their librdkafka handles would log the broker's stop
        inputs = input_records(read_topic(broker.bootstrap, topics[0]))
        outputs = read_topic(broker.bootstrap, topics[1])
        oracle = check_running_sums([(m.key(), m.value()) for m in inputs],
                                    [(m.key(), m.value()) for m in outputs])
        _summarise(demo, oracle, pause_gaps(demo.watches, inputs, outputs, tasks))
    demo.result.seconds = round(time.monotonic() - started, 1)
    return demo.result


def _wait_file(path: Path, cluster: Cluster) -> None:
    cluster.start("coordinator", "coordinator")
    cluster.wait_for_file(path)


def _summarise(demo: Demo, oracle: OracleResult, gaps: list[Gap]) -> None:
    result = demo.result
    pauses = [gap.ms for gap in gaps]
    result.handoff_pauses = handoff_pauses(demo.watches, gaps)
    result.records_in, result.records_out = oracle.records_in, oracle.records_out
    result.lost, result.duplicated, result.wrong = oracle.lost, oracle.duplicated, oracle.wrong
    result.handoffs = len(demo.watches)
    result.pause_ms_p50 = round(percentile(pauses, 50), 1)
    result.pause_ms_p99 = round(percentile(pauses, 99), 1)
    rates = [w.max_lag / (w.caught_up_at - w.first_seen) for w in demo.watches
             if w.caught_up_at is not None and w.caught_up_at > w.first_seen and w.max_lag]
    result.catch_up_records_per_s = round(statistics.mean(rates), 1) if rates else 0.0
    result.ok = oracle.ok
    if not oracle.ok:
        result.steps.extend(oracle.examples)


def print_summary(console: Console, result: DemoResult) -> None:
    table = Table(title="baton demo")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name in ("records_in", "records_out", "lost", "duplicated", "wrong", "handoffs",
                 "pause_ms_p50", "pause_ms_p99", "catch_up_records_per_s", "split_children",
                 "split_to_balanced_s", "seconds"):
        table.add_row(name, str(getattr(result, name)))
    for name, url in result.metrics.items():
        table.add_row(f"metrics {name}", url)
    console.print(table)
    table = Table(title="handoffs")
    for column in ("task", "kind", "from", "to", "outcome", "pause_ms", "at"):
        table.add_column(column, justify="right" if column == "pause_ms" else "left")
    for handoff in result.handoff_pauses:
        table.add_row(*("-" if handoff[c] is None else str(handoff[c])
                        for c in ("task", "kind", "from", "to", "outcome", "pause_ms", "at")))
    console.print(table)
    console.print("[bold green]oracle holds[/]" if result.ok else "[bold red]ORACLE FAILED[/]")


if __name__ == "__main__":  # pragma: no cover
    out = run_demo(Console(stderr=True))
    print(json.dumps(out.__dict__), file=sys.stdout)
    os._exit(0 if out.ok else 1)
