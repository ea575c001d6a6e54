"""Coordinator failover through the stream lease (a script, not a test).

Two coordinators of one job on one broker (`--broker`: Apache Kafka by default, or the
embedded noida-db), `coordinator.takeover_ms` = --takeover-ms: the leader writes its
"leader" record to the coordinator stream every quarter of that, the standby follows the
stream and takes over once the leader has written nothing for takeover_ms (fencing the
old leader's transactional id first: orchestrator/daemon/leader.py). Each round SIGKILLs
the leader and times, from the SIGKILL:

decided     the standby's "taking over" line in its log (the lease ran out);
leads       the standby answering `GET /status` with 200 as the leader (the stream
            opened, the old writer fenced, the stream read to its end, the API up);

then starts the killed coordinator again as the standby of the new leader. The limit
is takeover_ms itself (a standby cannot know sooner that a silent leader is dead): the
report gives leads / takeover_ms, on this broker in this run. No processor runs: the
lease is the coordinators' alone.

    .venv/bin/python bench/coordinator_failover.py [--takeover-ms 2000 10000]
        [--rounds 3] [--broker kafka|embedded] [--json]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
import tomllib
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from _common import BenchBroker, broker_option, log, report, start_broker, wait_until
from confluent_kafka.admin import AdminClient, NewTopic

from orchestrator.devkit.cluster import Cluster
from orchestrator.devkit.demo import make_config
from orchestrator.devkit.embedded import free_port
from orchestrator.devkit.settings_report import changed_settings
from orchestrator.wire.config import dump_config
from orchestrator.wire.token import read_token

_TAKING_OVER = "; taking over"


def _answers_as_leader(url: str, token: str) -> bool:
    try:
        reply = httpx.get(f"{url}/status", timeout=1.0,
                          headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError:
        return False
    return reply.status_code == 200


def _says(path: Path, text: str) -> bool:
    return path.exists() and text in path.read_text(errors="replace")


def _decided_at(path: Path) -> float | None:
    """Epoch seconds of the last "taking over" line of a coordinator's log."""
    last = None
    for line in path.read_text(errors="replace").splitlines():
        if _TAKING_OVER in line:
            last = datetime.strptime(" ".join(line.split()[:2]), "%Y-%m-%d %H:%M:%S,%f")
    return None if last is None else last.timestamp()


def run(broker: BenchBroker, takeover_ms: int, rounds: int) -> dict[str, Any]:
    """`rounds` SIGKILLs of the leader with this takeover_ms; seconds per round."""
    tag = f"{takeover_ms}-{time.monotonic_ns() % 10**6}"
    topics = (f"events-{tag}", f"sums-{tag}")
    admin = AdminClient(broker.settings())
    for future in admin.create_topics([NewTopic(t, 4, 1) for t in topics]).values():
        future.result(30)
    with tempfile.TemporaryDirectory(prefix="baton-failover-") as tmp:
        workdir = Path(tmp)
        config = make_config(workdir, broker.bootstrap, topics, broker.daemon)
        raw = tomllib.loads(config.read_text())
        raw["job"]["name"] = f"failover-{tag}"
        listens = [raw["coordinator"]["listen"], f"127.0.0.1:{free_port()}"]
        raw["coordinator"].update({"url": [f"http://{x}" for x in listens],
                                   "takeover_ms": takeover_ms})
        config.write_text(dump_config(raw))
        settings = changed_settings(config)
        cluster = Cluster(workdir, config, log)
        names = ["c0", "c1"]
        rows: list[dict[str, float]] = []
        try:
            cluster.start(names[0], "coordinator", "--listen", listens[0])
            wait_until("the token", (workdir / "coordinator.token").exists, 120)
            token = read_token(workdir / "coordinator.token")
            wait_until("c0 leading", lambda: _answers_as_leader(f"http://{listens[0]}",
                                                                token), 120)
            leader = 0
            for _ in range(rounds):
                standby = 1 - leader
                if names[standby] not in cluster.procs:
                    cluster.start(names[standby], "coordinator", "--listen", listens[standby])
                standby_log = workdir / f"{names[standby]}.log"
                wait_until(f"{names[standby]} standing by", functools.partial(
                    _says, standby_log, "standby: job"), 120)
                time.sleep(max(2.0, takeover_ms / 1000))    # a few keepalives seen
                killed = time.time()
                cluster.procs.pop(names[leader]).kill()
                led = wait_until(f"{names[standby]} leading", functools.partial(
                    _answers_as_leader, f"http://{listens[standby]}", token),
                    takeover_ms / 1000 + 120, 0.02)
                decided = _decided_at(standby_log) or led
                rows.append({"decided_s": round(decided - killed, 3),
                             "leads_s": round(led - killed, 3)})
                log(f"takeover_ms {takeover_ms}: {rows[-1]}")
                (workdir / f"{names[leader]}.log").unlink()
                leader = standby
        finally:
            cluster.stop_all()
    leads = [r["leads_s"] for r in rows]
    return {"takeover_ms": takeover_ms, "rounds": rows, "settings": settings,
            "leads_s_median": round(statistics.median(leads), 3),
            "leads_s_max": round(max(leads), 3),
            "ratio_to_takeover": round(statistics.median(leads) / (takeover_ms / 1000), 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--takeover-ms", type=int, nargs="+", default=[2000, 10000])
    parser.add_argument("--rounds", type=int, default=3)
    broker_option(parser)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.rounds <= 0 or min(args.takeover_ms) < 1000:
        parser.error("--rounds must be positive and --takeover-ms at least 1000")
    with start_broker(args.broker) as broker:
        results = [run(broker, ms, args.rounds) for ms in args.takeover_ms]
    lines = [f"broker: {args.broker}"] + [
        f"takeover_ms {r['takeover_ms']:>6}: SIGKILL -> standby leads median "
        f"{r['leads_s_median']} s (max {r['leads_s_max']} s; {r['ratio_to_takeover']}x "
        f"takeover_ms); lease ran out after "
        + ", ".join(f"{x['decided_s']}" for x in r["rounds"]) + " s" for r in results]
    report({"broker": args.broker, "runs": results}, args.json, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
