"""Coordinator load: N simulated processors over the real HTTP API (a script, not a test).

For each N in --processors: a fresh job with N x --tasks-per-processor input partitions
(one task each) on the broker (`--broker`: Apache Kafka by default, or the embedded
noida-db; --bootstrap: an existing one), a real `baton coordinator` subprocess, and N simulated
processors speaking its protocol with the processor token: `POST /processors/register`,
then `POST /processors/heartbeat` once a second each (staggered), reporting their tasks
as a processor does (active with positions, warm-ups caught up, released tasks with
their final positions), sending the generation they hold. They follow the assignment
until the job is balanced, then the measured window starts.

Per N: heartbeats sent and answered, latency p50/p99, replies that carried the job
model (only when the generation was stale), the coordinator's CPU (utime+stime from
/proc) per heartbeat and in cores, and the load generator's own CPU.

Targets: 1,000 processors at 1 Hz over 10,000 tasks, every heartbeat
answered, p99 <= 100 ms, coordinator <= 0.5 core.

    PYTHONPATH=. .venv/bin/python bench/coordinator_load.py [--processors 100 1000]
        [--tasks-per-processor 10] [--seconds 30] [--broker kafka|embedded]
        [--bootstrap HOST:PORT] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from _common import (
    broker_name,
    broker_option,
    cpu_seconds,
    own_cpu_seconds,
    start_broker,
)
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from orchestrator.devkit.embedded import EMBEDDED_CLIENT_SETTINGS, free_port
from orchestrator.wire.config import dump_config
from orchestrator.wire.status import is_balanced
from orchestrator.wire.token import read_token

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Sim:
    """One simulated processor: what it holds, what it reports."""

    pid: str
    execution: str = field(default_factory=lambda: uuid.uuid4().hex)
    generation: int | None = None
    tasks: dict[str, list[str]] = field(default_factory=dict)   # the model it holds
    active: set[str] = field(default_factory=set)
    warmup: set[str] = field(default_factory=set)
    standby: set[str] = field(default_factory=set)
    released: dict[str, int] = field(default_factory=dict)      # task -> beats left

    def request(self) -> dict[str, Any]:
        def positions(task: str) -> dict[str, int]:
            return {p: 0 for p in self.tasks.get(task, [])}

        reports: list[dict[str, Any]] = [{"task": t, "role": "active", "positions": positions(t)}
                   for t in sorted(self.active)]
        reports += [{"task": t, "role": role, "positions": positions(t), "lag": 0}
                    for role, held in (("warmup", self.warmup), ("standby", self.standby))
                    for t in sorted(held)]
        reports += [{"task": t, "role": "released", "positions": positions(t)}
                    for t in sorted(self.released)]
        body: dict[str, Any] = {"processor_id": self.pid, "execution_id": self.execution,
                                "tasks": reports}
        if self.generation is not None:
            body["generation"] = self.generation
        return body

    def take(self, reply: dict[str, Any]) -> bool:
        """Follow the reply; True when it carried the job model."""
        carried = bool(reply.get("tasks"))
        if carried:
            self.tasks = reply["tasks"]
        self.generation = reply.get("generation", self.generation)
        listing = reply.get("assignment") or {}
        active = set(listing.get("active", []))
        for task in self.active - active:
            self.released[task] = 5
        for task in list(self.released):
            self.released[task] -= 1
            if self.released[task] <= 0 or task in active:
                del self.released[task]
        self.active = active
        self.warmup = set(listing.get("warmup", []))
        self.standby = set(listing.get("standby", []))
        return carried


@dataclass
class Tally:
    sent: int = 0
    answered: int = 0
    errors: int = 0
    model_replies: int = 0
    statuses: dict[str, int] = field(default_factory=dict)   # what the errors were
    latencies: list[float] = field(default_factory=list)


class _Connection:
    """One simulated processor's keep-alive HTTP/1.1 connection, spoken by hand: a
    general client (httpx) costs ~2 ms of CPU per request, so at 1,000 heartbeats a
    second the generator, not the coordinator, would take both cores."""

    def __init__(self, url: str, token: str) -> None:
        host, _, port = url.removeprefix("http://").partition(":")
        self._address = (host, int(port))
        self._head = (f"Host: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
                      "Content-Type: application/json\r\n").encode()
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self._streams is not None and self._streams[0].at_eof():
            # the server closed it while idle (keep-alive timeout), as a pooled client
            # notices before reusing a connection
            self._streams[1].close()
            self._streams = None
        if self._streams is None:
            self._streams = await asyncio.open_connection(*self._address)
        reader, writer = self._streams
        try:
            writer.write(b"POST " + path.encode() + b" HTTP/1.1\r\n" + self._head
                         + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
                         + body)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = int(re.search(rb"(?i)content-length: *(\d+)", head)[1])  # type: ignore[index]
            return status, await reader.readexactly(length)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TypeError):
            writer.close()
            self._streams = None
            raise

    def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()


async def _beat(connections: dict[str, _Connection], sim: Sim, tally: Tally | None,
                path: str = "/processors/heartbeat") -> None:
    started = time.perf_counter()
    try:
        status, body = await connections[sim.pid].post(path, orjson.dumps(sim.request()))
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TypeError) as exc:
        if tally is not None:
            tally.sent += 1
            tally.errors += 1
            tally.statuses[type(exc).__name__] = tally.statuses.get(type(exc).__name__, 0) + 1
        return
    elapsed = time.perf_counter() - started
    ok = status == 200
    carried = sim.take(orjson.loads(body)) if ok else False
    if tally is not None:
        tally.sent += 1
        tally.answered += ok
        tally.errors += not ok
        if not ok:
            tally.statuses[str(status)] = tally.statuses.get(str(status), 0) + 1
        tally.model_replies += carried
        tally.latencies.append(elapsed)


async def _drive(connections: dict[str, _Connection], sim: Sim, until: float,
                 window: tuple[float, float], tally: Tally) -> None:
    """Heartbeat once a second until `until`; count only inside `window`."""
    await asyncio.sleep(random.random())
    while time.monotonic() < until:
        due = time.monotonic() + 1.0
        counted = window[0] <= time.monotonic() < window[1]
        await _beat(connections, sim, tally if counted else None)
        await asyncio.sleep(max(0.0, due - time.monotonic()))


def _balanced(client: httpx.Client, url: str) -> bool:
    return is_balanced(client.get(f"{url}/status").json())


async def _run(url: str, token: str, processors: int, seconds: float, settle_s: float,
               pid: int) -> dict[str, Any]:
    """Register, follow until balanced (at most `settle_s`), then measure `seconds`."""
    sims = [Sim(f"p{i:04d}") for i in range(processors)]
    connections = {s.pid: _Connection(url, token) for s in sims}
    headers = {"Authorization": f"Bearer {token}"}
    try:
        # the whole fleet starts at once, as after a deploy (registrations share the
        # coordinator's decisions)
        await asyncio.gather(*(_beat(connections, s, None, "/processors/register")
                               for s in sims))
        settled = False
        with httpx.Client(headers=headers, timeout=30.0) as sync:
            settled_by = time.monotonic() + settle_s
            while time.monotonic() < settled_by and not settled:
                end = time.monotonic() + 3.0
                await asyncio.gather(*(_drive(connections, s, end, (0, 0), Tally())
                                       for s in sims))
                settled = await asyncio.to_thread(_balanced, sync, url)
        begin = time.monotonic() + 1.0
        window = (begin, begin + seconds)
        tally = Tally()
        cpu: dict[str, float] = {}

        async def sample(at: float, key: str) -> None:
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            cpu[key], cpu["own" + key] = cpu_seconds(pid), own_cpu_seconds()

        # the generator's own full collections stopped it for 0.4-1.3 s each, which
        # its latencies then counted: none while it measures
        gc.freeze()
        gc.disable()
        await asyncio.gather(sample(window[0], "0"), sample(window[1], "1"),
                             *(_drive(connections, s, window[1] + 0.5, window, tally)
                               for s in sims))
    finally:
        gc.enable()
        gc.unfreeze()
        for connection in connections.values():
            connection.close()
    lat = sorted(tally.latencies)
    used, own = cpu["1"] - cpu["0"], cpu["own1"] - cpu["own0"]
    return {"processors": processors, "settled": settled, "seconds": seconds,
            "sent": tally.sent, "answered": tally.answered, "errors": tally.errors,
            "answered_fraction": round(tally.answered / max(tally.sent, 1), 4),
            "model_replies": tally.model_replies, "error_kinds": tally.statuses,
            "p50_ms": round(1000 * statistics.median(lat), 1) if lat else None,
            "p99_ms": round(1000 * lat[int(0.99 * (len(lat) - 1))], 1) if lat else None,
            "coordinator_cores": round(used / seconds, 3),
            "coordinator_cpu_ms_per_heartbeat": round(1000 * used / max(tally.answered, 1), 3),
            "generator_cores": round(own / seconds, 3)}


def measure(bootstrap: str, processors: int, per_processor: int, seconds: float,
            settle_s: float, kafka: dict[str, Any] | None = None) -> dict[str, Any]:
    """One N; `kafka`: the coordinator's [kafka] settings beside the bootstrap (None:
    the clients' settings the embedded broker needs, harmless on Kafka)."""
    tasks = processors * per_processor
    workdir = Path(tempfile.mkdtemp(prefix="baton-load-"))
    name = f"load-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(f"{name}-in", tasks, 1),
                                       NewTopic(f"{name}-out", 1, 1)]).values():
        future.result(60)
    _await_logs(admin, f"{name}-in", tasks)
    port = free_port()
    raw = {"job": {"name": name, "class": "processor.examples:RunningSum",
                   "inputs": [f"{name}-in"], "output": f"{name}-out"},
           "kafka": {"bootstrap_servers": bootstrap,
                     **(EMBEDDED_CLIENT_SETTINGS if kafka is None else kafka)},
           "coordinator": {"listen": f"127.0.0.1:{port}", "url": f"http://127.0.0.1:{port}",
                           "token_file": str(workdir / "coordinator.token"),
                           "processor_timeout_ms": 60000, "release_timeout_ms": 60000},
           "catch_up": {"acceptable_lag": 1000, "max_warmups": tasks}}
    config = workdir / "job.toml"
    config.write_text(dump_config(raw))
    with (workdir / "coordinator.log").open("wb") as log:
        coordinator = subprocess.Popen([sys.executable, "-m", "orchestrator.cli",
                                        "coordinator", "-c", str(config)], cwd=ROOT,
                                       stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            token = _wait_up(url, workdir / "coordinator.token", coordinator)
            row = asyncio.run(_run(url, token, processors, seconds, settle_s, coordinator.pid))
        finally:
            coordinator.terminate()
            coordinator.wait(30)
    return {**row, "tasks": tasks}


def _await_logs(admin: AdminClient, topic: str, partitions: int) -> None:
    """Wait until every partition of a new topic answers ListOffsets. Apache Kafka shows
    a new topic's leaders at once but creates its logs after (~25 ms a partition on a
    busy 2-core machine: ~25 s for 1,000), and a topic created meanwhile, such as the
    coordinator's stream, waits behind them."""
    wanted = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    deadline = time.monotonic() + 120
    while True:
        futures = admin.list_offsets(wanted, request_timeout=10)
        try:
            for future in futures.values():
                future.result()
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _wait_up(url: str, token_file: Path, proc: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the coordinator exited with {proc.returncode}")
        if token_file.exists():
            token = read_token(token_file)
            try:
                if httpx.get(f"{url}/status", timeout=2,
                             headers={"Authorization": f"Bearer {token}"}).status_code == 200:
                    return token
            except httpx.HTTPError:
                pass
        time.sleep(0.2)
    raise SystemExit("the coordinator did not come up in 60 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processors", type=int, nargs="+", default=[100, 200, 500, 1000])
    parser.add_argument("--tasks-per-processor", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=120.0)
    broker_option(parser)
    parser.add_argument("--bootstrap", default=None,
                        help="an existing broker instead of starting one")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    name = broker_name(args.broker, args.bootstrap)
    if not args.json:
        print(f"broker: {name}", flush=True)
    rows = []
    with ExitStack() as stack:
        broker = None if args.bootstrap else stack.enter_context(start_broker(args.broker))
        bootstrap = args.bootstrap or broker.bootstrap  # type: ignore[union-attr]
        kafka = {} if broker is None else broker.daemon.get("kafka", {})
        for n in args.processors:
            row = measure(bootstrap, n, args.tasks_per_processor, args.seconds, args.settle,
                          kafka)
            rows.append({"broker": name, **row})
            if not args.json:
                print(_line(row), flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


def _line(row: dict[str, Any]) -> str:
    return (f"{row['processors']:>5} processors {row['tasks']:>6} tasks: "
            f"answered {row['answered']}/{row['sent']} ({100 * row['answered_fraction']:.1f}%), "
            f"p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms "
            f"({row['p99_ms'] / 100:.2f}x the 100 ms limit), coordinator "
            f"{row['coordinator_cores']} cores ({row['coordinator_cores'] / 0.5:.2f}x the 0.5 "
            f"limit), {row['coordinator_cpu_ms_per_heartbeat']} CPU-ms/heartbeat, model in "
            f"{row['model_replies']} replies; generator {row['generator_cores']} cores"
            + (f"; errors {row['error_kinds']}" if row["errors"] else ""))


if __name__ == "__main__":
    sys.exit(main())
