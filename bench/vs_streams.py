"""The Kafka Streams side of bench/vs_kafka_streams.py: build the peer
(bench/peers/kafka-streams) when its jar is missing or older than its sources, run its
instances as JVMs, and read what each prints on stdout (state, active and standby tasks,
records rebuilt from the changelog).

Under `num.standby.replicas = 0` every standby task an instance reports is a KIP-441
warmup; the job is balanced once the new instance runs active tasks and no instance holds
a warmup, that is once its warmups were promoted by a probing rebalance.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

__all__ = ["SETTINGS", "Peer", "balanced_at", "ensure_peer", "failover", "parse_line", "scale_out"]

PEER_DIR = Path(__file__).resolve().parent / "peers" / "kafka-streams"
_JAR = PEER_DIR / "target" / "kafka-streams-peer-1.jar"
_MAIN = "baton.peer.RunningSumPeer"
# Kafka Streams' warmup settings as run: its defaults (probing every 10 minutes, 2 warmups
# at a time), and the fastest it allows (the probing interval's minimum is 60 s; as many
# warmups as there are tasks, so one probing round promotes them all).
SETTINGS: dict[str, dict[str, str]] = {
    "default": {},
    "fastest": {"probing-interval-ms": "60000", "max-warmups": str(PARTITIONS)},
}
# a heap that fits beside the broker and the other instances on a small machine; the
# state itself lives in RocksDB, off the heap
_JVM_OPTIONS = ["-Xms128m", "-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
                # its log lines get a time, to set them beside the reports and the topics
                "-Dorg.slf4j.simpleLogger.showDateTime=true",
                "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS"]
_STOP_GRACE_S = 60.0
WARM_S = 3.0                 # steady traffic before the measured step
SETTLE_S = 2.0               # traffic after it, so the pause window is closed by outputs
PROCESS_TIMEOUT_S = 900.0
FAILOVER_TIMEOUT_S = 600.0
STANDBY_CAUGHT_UP = 100      # records behind, summed over an instance's standbys
# up to four probing rounds of each setting (the new instance may get more tasks than warmups
# allowed at a time), and time to spare
BALANCE_TIMEOUT_S = {"default": 2400.0, "fastest": 400.0}


def ensure_peer(log: Any) -> None:
    """Build the peer with Maven unless its jar is newer than the pom and every source.

    Raises:
        RuntimeError: Maven is not installed, or it failed (its output is in the message).
    """
    sources = [PEER_DIR / "pom.xml", *PEER_DIR.glob("src/**/*.java")]
    if _JAR.exists() and all(s.stat().st_mtime <= _JAR.stat().st_mtime for s in sources):
        return
    if shutil.which("mvn") is None:
        raise RuntimeError(
            f"the Kafka Streams peer ({PEER_DIR}) is built with Maven, and `mvn` is not on "
            "PATH: run the benchmark as `./run bench vs_kafka_streams.py ...`, which installs "
            "Maven and a JDK, or install maven and openjdk-17-jdk-headless yourself")
    log(f"building the Kafka Streams peer ({PEER_DIR}) with Maven")
    done = subprocess.run(["mvn", "-q", "-B", "-f", str(PEER_DIR / "pom.xml"), "clean", "package",
                           "-Dstyle.color=never"], capture_output=True, text=True, check=False)
    if done.returncode != 0 or not _JAR.exists():
        raise RuntimeError(f"building the Kafka Streams peer failed (exit {done.returncode}):"
                           f"\n{done.stdout}{done.stderr}")


def parse_line(line: str) -> dict[str, Any] | None:
    """One stdout line of the peer: `peer <epoch ms> state=S active=0_1,0_2 standby=...
    rebuilt=N standby_lag=N` -> {"ms", "state", "active", "standby", "rebuilt",
    "standby_lag"}; None for any other line."""
    parts = line.split()
    if len(parts) < 3 or parts[0] != "peer" or not parts[1].isdigit():
        return None
    fields = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
    return {"ms": int(parts[1]), "state": fields.get("state", ""),
            "active": _tasks(fields.get("active", "")),
            "standby": _tasks(fields.get("standby", "")),
            "rebuilt": int(fields.get("rebuilt", "0")),
            "standby_lag": int(fields.get("standby_lag", "0"))}


def _tasks(text: str) -> set[int]:
    """Task ids `0_3` -> input partition 3 (the topology has one sub-topology)."""
    return {int(t.split("_")[1]) for t in text.split(",") if t}


@dataclass
class Peer:
    """One instance of the peer: a JVM whose stdout lines are kept as they come."""

    name: str
    proc: subprocess.Popen[bytes]
    lines: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def start(cls, name: str, workdir: Path, bootstrap: str, app: str, input_topic: str,
              output_topic: str, settings: dict[str, str]) -> Peer:
        args = {"bootstrap": bootstrap, "input": input_topic, "output": output_topic,
                "application-id": app, "state-dir": str(workdir / "state" / name), **settings}
        cmd = ["java", *_JVM_OPTIONS, "-cp", f"{_JAR}:{_JAR.parent / 'libs'}/*", _MAIN,
               *(x for k, v in args.items() for x in (f"--{k}", v))]
        with (workdir / f"{name}.log").open("ab") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        peer = cls(name, proc)
        threading.Thread(target=peer._read, args=(workdir / f"{name}.out",),
                         daemon=True).start()
        return peer

    def _read(self, copy: Path) -> None:
        assert self.proc.stdout is not None
        with copy.open("a") as out:
            for raw in self.proc.stdout:
                text = raw.decode(errors="replace")
                out.write(text)
                parsed = parse_line(text)
                if parsed is not None:
                    self.lines.append(parsed)

    @property
    def latest(self) -> dict[str, Any]:
        return self.lines[-1] if self.lines else {"ms": 0, "state": "", "active": set(),
                                                  "standby": set(), "rebuilt": 0,
                                                  "standby_lag": 0}

    def kill(self) -> None:
        """SIGKILL, like a crashed host."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        """SIGTERM (Kafka Streams closes: commits and leaves the group), then SIGKILL."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.kill()


def balanced_at(peers: list[Peer], new: Peer) -> float | None:
    """Epoch seconds at which the last report making the job balanced was printed: every
    instance running, every task active exactly once, no warmup left, and the new
    instance running active tasks; None while it is not."""
    latest = [p.latest for p in peers]
    actives = [t for line in latest for t in line["active"]]
    if (all(line["state"] == "RUNNING" for line in latest)
            and sorted(actives) == list(range(PARTITIONS))
            and not any(line["standby"] for line in latest) and new.latest["active"]):
        return max(_since(p) for p in peers)
    return None


def _since(peer: Peer) -> float:
    """Epoch seconds of the first of `peer`'s latest reports with its current state and
    tasks (later ones may differ in their counters only)."""
    shape = [(line["state"], line["active"], line["standby"]) for line in peer.lines]
    at = len(shape) - 1
    while at > 0 and shape[at - 1] == shape[-1]:
        at -= 1
    return float(peer.lines[at]["ms"]) / 1000


def rebuilt_until(peer: Peer, until_s: float) -> tuple[int, float]:
    """Records `peer` rebuilt from the changelog until its warmups first caught up (lag
    0; a standby goes on applying live changes after that), and the epoch seconds of
    that report; without such a report, what it rebuilt up to `until_s`."""
    upto = [line for line in peer.lines if line["ms"] / 1000 <= until_s]
    caught_up = next((line for line in upto if line["rebuilt"] and line["standby"]
                      and line["standby_lag"] == 0), None)
    if caught_up is not None:
        return caught_up["rebuilt"], caught_up["ms"] / 1000
    if not upto:
        return 0, until_s
    total = upto[-1]["rebuilt"]
    first = next(line for line in upto if line["rebuilt"] == total)
    return total, first["ms"] / 1000


def owners(peers: list[Peer]) -> dict[int, str]:
    """Input partition -> the instance running its task as active, from the latest
    reports."""
    return {task: p.name for p in peers for task in p.latest["active"]}


def _stop_all(peers: list[Peer]) -> None:
    for peer in peers:
        peer.stop()


def scale_out(bootstrap: str, broker_pid: int | None, keys: int, settings: str,
              workdir: Path, log: Any) -> dict[str, Any]:
    """Two instances under traffic, a third starts: see bench/vs_kafka_streams.py."""
    tag = f"ks-{settings}-{keys}-scale"
    inp, out = f"{tag}-in", f"{tag}-out"
    create_topics(bootstrap, inp, out)
    preload(bootstrap, inp, keys)
    workdir = workdir / tag
    workdir.mkdir(parents=True)
    peers: list[Peer] = []
    try:
        for name in ("i1", "i2"):
            peers.append(Peer.start(name, workdir, bootstrap, tag, inp, out, SETTINGS[settings]))
        wait_until("i1 and i2 processed the preload",
                   lambda: committed(bootstrap, inp, tag)[0] >= keys, PROCESS_TIMEOUT_S, 0.5)
        traffic = Traffic(bootstrap, inp, keys).start()
        time.sleep(WARM_S)
        before = owners(peers)
        started = time.time()
        new = Peer.start("i3", workdir, bootstrap, tag, inp, out, SETTINGS[settings])
        peers.append(new)
        cpu = CpuWindow({"new": new.proc.pid, "i1": peers[0].proc.pid,
                         "i2": peers[1].proc.pid, "broker": broker_pid}).start()
        log(f"kafka_streams/{settings}: i3 started; waiting for its warmups' promotion")
        wait_until("i3 balanced", lambda: balanced_at(peers, new) is not None,
                   BALANCE_TIMEOUT_S[settings], 0.2)
        balanced = balanced_at(peers, new) or time.time()
        spent = cpu.stop()
        # the assignor may also move tasks between the old instances: each pauses
        moved = {t for t, owner in owners(peers).items() if before.get(t) != owner}
        rebuilt, rebuilt_end = rebuilt_until(new, balanced)
        time.sleep(SETTLE_S)
        traffic.stop()
        wait_until("the traffic processed", lambda: _all_done(bootstrap, inp, tag),
                   PROCESS_TIMEOUT_S, 0.5)
    finally:
        _stop_all(peers)
    gaps = moved_gaps_ms(read_topic(bootstrap, out), moved, started, balanced + SETTLE_S)
    verdict = oracle(bootstrap, inp, out)
    return {"balanced_s": round(balanced - started, 2), "moved": sorted(moved), "gaps_ms": gaps,
            "rebuilt": rebuilt, "rebuilt_s": round(max(rebuilt_end - started, 0.001), 2),
            "cpu_s": {"new": spent["new"], "old": round(spent["i1"] + spent["i2"], 2),
                      "broker": spent["broker"]}, "oracle": verdict}


def failover(bootstrap: str, keys: int, settings: str, workdir: Path,
             log: Any) -> dict[str, Any]:
    """Two instances with one standby each under traffic; SIGKILL one."""
    tag = f"ks-{settings}-{keys}-failover"
    inp, out = f"{tag}-in", f"{tag}-out"
    create_topics(bootstrap, inp, out)
    preload(bootstrap, inp, keys)
    workdir = workdir / tag
    workdir.mkdir(parents=True)
    with_standby = {**SETTINGS[settings], "standbys": "1"}
    peers = [Peer.start(n, workdir, bootstrap, tag, inp, out, with_standby)
             for n in ("i1", "i2")]
    try:
        wait_until("i1 and i2 processed the preload",
                   lambda: committed(bootstrap, inp, tag)[0] >= keys, PROCESS_TIMEOUT_S, 0.5)
        wait_until("standbys caught up", lambda: all(
            p.latest["state"] == "RUNNING" and p.latest["standby"]
            and p.latest["standby_lag"] <= STANDBY_CAUGHT_UP for p in peers),
            PROCESS_TIMEOUT_S, 0.2)
        traffic = Traffic(bootstrap, inp, keys).start()
        time.sleep(WARM_S)
        victim = peers[0]
        tasks = set(victim.latest["active"])
        killed_ms = int(time.time() * 1000)
        victim.kill()
        log(f"kafka_streams/{settings}: i1 killed; waiting for its tasks {sorted(tasks)}")
        firsts = first_outputs_after(bootstrap, out, killed_ms, tasks, FAILOVER_TIMEOUT_S)
        time.sleep(SETTLE_S)
        traffic.stop()
        wait_until("the traffic processed", lambda: _all_done(bootstrap, inp, tag),
                   PROCESS_TIMEOUT_S, 0.5)
    finally:
        _stop_all(peers)
    return {"failover_s": round(max(firsts.values()) - killed_ms / 1000, 2),
            "oracle": oracle(bootstrap, inp, out)}


def _all_done(bootstrap: str, topic: str, group: str) -> bool:
    done, end = committed(bootstrap, topic, group)
    return done >= end
