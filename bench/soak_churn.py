"""bench/soak.py's daemons and the operations it runs on them (its docstring lists them),
each through the `baton` command or a signal as an operator or a crash would, and a
poller of `/status` that sees every handoff in flight (for its pause) and the job's
shape (for the samples).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from _common import BenchBroker, Traffic, log, wait_until

from orchestrator.devkit.cluster import Cluster
from orchestrator.devkit.demo import Demo
from orchestrator.devkit.pauses import Watch
from orchestrator.wire.client import CoordinatorClient
from orchestrator.wire.status import is_balanced
from orchestrator.wire.token import read_token

__all__ = ["CYCLE", "Churn", "SoakError", "StatusWatch"]

CYCLE = ["expand_split", "scale_out", "processor_kill", "drain", "failover",
         "broker_restart"]
_ROOT = Path(__file__).resolve().parents[1]
_OP_TIMEOUT_S = 300.0       # a broker restart on a loaded 2-core machine takes a minute
_STATUS_FRESH_S = 2.0       # a status poll older than this says nothing of the shape now
# An operation under way is no resting shape, though the coordinator may still call the
# job balanced (a broker restart: every client's sockets close, and the processors' fds
# fall by a dozen or more until they reconnect), nor are its first seconds after.
_AFTER_OPERATION_S = 10.0
_STANDBY = "standby: job"
# a pending line of `baton wait` that names the processor it waits on
_PENDING = re.compile(r"task '([^']+)': (p\d+) (?:has not|does not)")
_DIGEST_LINES = 6           # per pending task, of its lines and of the warnings
_DIGEST_WIDTH = 240


class SoakError(RuntimeError):
    """An operation did not complete: which, and what the daemons said."""


def _leading(url: str, token: str) -> bool:
    try:
        return httpx.get(f"{url}/status", timeout=2.0,
                         headers={"Authorization": f"Bearer {token}"}).status_code == 200
    except httpx.HTTPError:
        return False


class StatusWatch:
    """Polls the job's `/status` on a thread of its own, through the demo's watcher (a
    Watch per handoff seen in flight, for its pause), keeping the last answer and which
    coordinator gave it; a failover or a broker restart only delays it."""

    def __init__(self, urls: list[str], token: str) -> None:
        self._client = CoordinatorClient(urls, token)
        self._demo = Demo(None)
        self.latest: tuple[float, dict[str, Any], str] = (0.0, {}, "")  # when, what, who
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="soak-status", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self._client.close()

    def watches(self) -> list[Watch]:
        return list(self._demo.watches)

    def _poll(self) -> None:
        def seen(status: dict[str, Any]) -> bool:
            self.latest = (time.monotonic(), status, self._client.url)
            return self._stop.is_set()

        while not self._stop.is_set():
            try:
                self._demo.wait(self._client, "the soak's end", seen, float("inf"))
            except Exception as exc:  # noqa: BLE001 - no leader for a while: try again
                log(f"status poll: {exc}")
                self._stop.wait(0.5)


class Churn:
    """The daemons of one job and the cycle's operations on them."""

    def __init__(self, workdir: Path, config: Path, listens: list[str], broker: BenchBroker,
                 partitions: int) -> None:
        self.workdir, self.config, self.broker = workdir, config, broker
        self.listens = listens
        self.urls = [f"http://{x}" for x in listens]
        self.partitions = partitions
        self.traffic: Traffic | None = None
        self.cluster = Cluster(workdir, config, log)
        self.done: list[tuple[float, str, float]] = []   # (monotonic, operation, seconds)
        self._labels: dict[str, tuple[str, float]] = {}  # name -> (label, started)
        self._starts: dict[str, int] = {}
        self._watch: StatusWatch | None = None
        self._token = ""
        self._operating_until = 0.0    # monotonic: an operation runs, or has just ended

    # ---- daemons -----------------------------------------------------------------------

    def _start(self, name: str, *args: str) -> None:
        self._starts[name] = self._starts.get(name, 0) + 1
        label = name if self._starts[name] == 1 else f"{name}#{self._starts[name]}"
        self.cluster.start(name, *args)
        self._labels[name] = (label, time.monotonic())

    def _coordinator(self, index: int) -> None:
        self._start(f"c{index}", "coordinator", "--listen", self.listens[index])

    def _processor(self, name: str) -> None:
        self._start(name, "processor", "--id", name)

    def daemons(self) -> dict[str, tuple[int, float]]:
        """{label: (pid, started)} of every daemon running now."""
        procs = dict(self.cluster.procs)
        return {self._labels[n][0]: (p.pid, self._labels[n][1]) for n, p in procs.items()
                if p.poll() is None and n in self._labels}

    def _log(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _standing_by(self, index: int, before: int) -> None:
        wait_until(f"c{index} standing by", lambda: self._log(f"c{index}").count(_STANDBY)
                   > before, _OP_TIMEOUT_S, 0.2)

    def start(self) -> None:
        """Both coordinators (c0 leads), p1 and p2 balanced, the status poller."""
        self._coordinator(0)
        self.cluster.wait_for_file(self.workdir / "coordinator.token", 120)
        self._token = read_token(self.workdir / "coordinator.token")
        wait_until("c0 leading", lambda: _leading(self.urls[0], self._token), 120)
        self._coordinator(1)
        self._standing_by(1, 0)
        self._client = CoordinatorClient(self.urls, self._token)
        self._watch = StatusWatch(self.urls, self._token)
        self._watch.start()
        for name in ("p1", "p2"):
            self._processor(name)
        self._wait_balanced("start", ["p1", "p2"])

    def stop(self) -> None:
        """The status watch, then the processors, then the coordinators."""
        if self._watch is not None:
            self._watch.stop()
        for name in sorted(self.cluster.procs, key=lambda n: n.startswith("c")):
            self.cluster.stop(name, 30)

    # ---- the job's status --------------------------------------------------------------

    def shape(self) -> tuple[bool, str, dict[str, str]]:
        """(balanced, the alive processors "+"-joined, each daemon's role) from a fresh
        status; not balanced when no fresh one is at hand (a failover, a broker
        restart), nor while an operation runs and `_AFTER_OPERATION_S` after. Roles: a
        processor "active" (alive, holding tasks), "idle" or "gone"; a coordinator
        "leader" (the one that answered) or "standby"."""
        at, status, leader = self._watch.latest if self._watch else (0.0, {}, "")
        if time.monotonic() - at > _STATUS_FRESH_S or not status:
            return False, "", {}
        mine = {p["id"]: p for p in status.get("processors", [])}
        alive = sorted(n for n, p in mine.items() if p.get("alive"))
        roles = {n: "active" if mine[n].get("active") else "idle" for n in alive}
        for name in self.cluster.procs:
            if name.startswith("c"):
                roles[name] = "leader" if self.urls[int(name[1:])] == leader else "standby"
            roles.setdefault(name, "gone")
        resting = time.monotonic() >= self._operating_until
        return resting and is_balanced(status), "+".join(alive), roles

    def status(self) -> dict[str, Any]:
        return dict(self._client.status())

    def watches(self) -> list[Watch]:
        return self._watch.watches() if self._watch else []

    # ---- operations --------------------------------------------------------------------

    def run(self, name: str) -> None:
        """One operation of CYCLE, timed."""
        operations: dict[str, Callable[[], None]] = {
            "scale_out": self._scale_out, "processor_kill": self._processor_kill,
            "drain": self._drain, "expand_split": self._expand_split,
            "failover": self._failover, "broker_restart": self._broker_restart}
        began = time.monotonic()
        log(f"{name} ...")
        self._operating_until = float("inf")
        try:
            operations[name]()
        finally:
            self._operating_until = time.monotonic() + _AFTER_OPERATION_S
        self.done.append((began, name, time.monotonic() - began))
        log(f"{name} done in {self.done[-1][2]:.1f}s")

    def _baton(self, what: str, *args: str) -> None:
        """A `baton` command; a daemon failing meanwhile ends it at once (a drained
        processor exits 0, one declared lost or failed otherwise)."""
        with subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *args, "-c",
                               str(self.config)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=_ROOT) as command:
            deadline = time.monotonic() + _OP_TIMEOUT_S + 60
            while command.poll() is None:
                failed = self._failed()
                if failed or time.monotonic() > deadline:
                    command.kill()
                    command.communicate()
                    raise SoakError(f"{what}: {failed or 'baton ' + args[0] + ' hung'}")
                time.sleep(0.2)
            _, err = command.communicate()
        if command.returncode != 0:
            raise SoakError(f"{what}: `baton {' '.join(args)}` exited {command.returncode}: "
                            f"{err.strip()[-2000:]}{self._pending_lines(err)}")
        failed = self._failed()
        if failed:
            raise SoakError(f"{what}: {failed}")

    def _pending_lines(self, said: str) -> str:
        """The last lines each processor a pending task waits on logged of that task,
        and its last warnings: what a failed wait's reader looks for first."""
        out: list[str] = []
        for task, name in dict.fromkeys(_PENDING.findall(said)):
            lines = self._log(name).splitlines()
            mine = [ln for ln in lines if f"'{task}'" in ln][-_DIGEST_LINES:]
            loud = [ln for ln in lines if " WARNING " in ln or " ERROR " in ln][-_DIGEST_LINES:]
            out += [f"-- {name}'s last lines on task {task!r}:", *mine,
                    f"-- {name}'s last warnings and errors:", *loud]
        return "".join(f"\n{ln[:_DIGEST_WIDTH]}" for ln in out)

    def _failed(self) -> str:
        """Which daemon exited on its own with an error, if one did."""
        for name, proc in list(self.cluster.procs.items()):
            if proc.poll() not in (None, 0):
                return (f"{name} exited {proc.returncode}; see {self.workdir / name}.log: "
                        + self._log(name).strip().splitlines()[-1][-500:])
        return ""

    def _wait_balanced(self, what: str, processors: list[str] | None = None) -> None:
        extra = ["--processors", ",".join(processors)] if processors else []
        self._baton(what, "wait", "--until", "balanced", *extra, "--timeout",
                    str(_OP_TIMEOUT_S))

    def settle(self) -> None:
        """Balanced, and a fresh status poll saying so."""
        self._wait_balanced("the end")
        wait_until("a balanced status", lambda: self.shape()[0], 60, 0.2)

    def _scale_out(self) -> None:
        self._processor("p3")
        self._wait_balanced("scale_out", ["p3"])

    def _processor_kill(self) -> None:
        proc = self.cluster.procs.pop("p3")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self._processor("p3")
        self._wait_balanced("processor_kill", ["p3"])

    def _drain(self) -> None:
        self._baton("drain", "drain", "--processor", "p3", "--wait", "--timeout",
                    str(_OP_TIMEOUT_S))
        code = self.cluster.procs.pop("p3").wait(60)
        if code != 0:
            raise SoakError(f"drain: p3 exited {code}; see {self.workdir}/p3.log")
        self._wait_balanced("drain")

    def _expand_split(self) -> None:
        assert self.traffic is not None
        grown = self.partitions * 2
        self.traffic.hold()         # no record for the old count once the barrier is set
        try:
            self._baton("expand", "expand", "--topic", "events", "--partitions", str(grown),
                        "--timeout", str(_OP_TIMEOUT_S))
            self.traffic.producer.list_topics("events", timeout=10)   # the new partitions
            self.partitions = grown
        finally:
            self.traffic.release()
        self._baton("split", "split", "--timeout", str(_OP_TIMEOUT_S))
        self._wait_balanced("expand_split")

    def _failover(self) -> None:
        leader = next((i for i, url in enumerate(self.urls) if _leading(url, self._token)),
                      None)
        if leader is None:
            raise SoakError("failover: no coordinator leads")
        standby = 1 - leader
        killed = self.cluster.procs.pop(f"c{leader}")
        killed.kill()
        killed.wait()
        wait_until(f"c{standby} leading", lambda: _leading(self.urls[standby], self._token),
                   _OP_TIMEOUT_S, 0.1)
        before = self._log(f"c{leader}").count(_STANDBY)
        self._coordinator(leader)
        self._standing_by(leader, before)
        self._wait_balanced("failover")

    def _broker_restart(self) -> None:
        if self.broker.restart is None:
            raise SoakError("broker_restart: this broker cannot be restarted")
        self.broker.restart()
        self._wait_balanced("broker_restart")
