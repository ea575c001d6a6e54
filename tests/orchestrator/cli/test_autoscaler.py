"""The autoscaler's loop (orchestrator/cli/autoscale.py) against a coordinator faked at
the HTTP seam (httpx's MockTransport) and a launcher that records what it is asked:
decisions reported when made and when they end, the decision in flight kept across a
restart, a start that never registers stopped again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.cli.autoscale import Autoscaler
from orchestrator.core.scaling import Bounds, ScaleIn, ScaleOut, Wait
from orchestrator.wire.client import CoordinatorClient
from orchestrator.wire.http import httpx


class FakeCoordinator:
    def __init__(self) -> None:
        self.processors: dict[str, dict[str, Any]] = {}
        self.recommended = 1
        self.posts: list[tuple[str, dict[str, Any]]] = []

    def add(self, pid: str, active: int = 1) -> None:
        self.processors[pid] = {"id": pid, "alive": True, "draining": False,
                                "active": [f"Partition {i}" for i in range(active)]}

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/status":
            return httpx.Response(200, json={
                "processors": list(self.processors.values()), "handoffs": [],
                "balanced": True, "tasks": [], "recommended_processors": self.recommended,
                "autoscale": {"reason": "because", "demand": 10.0, "inputs": {"busy": 0.5}}})
        body = json.loads(request.content)
        self.posts.append((request.url.path, body))
        if request.url.path == "/drain":
            self.processors[body["processor"]]["draining"] = True
        if request.url.path == "/forget":
            self.processors.pop(body["processor"], None)
        return httpx.Response(200, json={})

    def decisions(self) -> list[tuple[str, str]]:
        return [(b["direction"], b["outcome"]) for p, b in self.posts
                if p == "/autoscale/decisions"]


class FakeLauncher:
    def __init__(self) -> None:
        self.running: dict[str, bool] = {}
        self.stopped: list[str] = []

    def start(self, processor: str) -> None:
        self.running[processor] = True

    def stop(self, processor: str) -> None:
        self.stopped.append(processor)
        self.running.pop(processor, None)

    def started(self) -> dict[str, bool]:
        return dict(self.running)


def scaler(fake: FakeCoordinator, launcher: FakeLauncher, where: Path,
           start_timeout_s: float = 60.0) -> Autoscaler:
    client = CoordinatorClient("http://coordinator", "t",
                               transport=httpx.MockTransport(fake.handle))
    return Autoscaler(client, launcher, where, Bounds(1, 0), "auto-", start_timeout_s)


def test_a_scale_out_is_reported_when_made_and_when_they_registered(tmp_path: Path) -> None:
    fake, launcher = FakeCoordinator(), FakeLauncher()
    fake.add("p1", 4)
    fake.recommended = 3
    s = scaler(fake, launcher, tmp_path)
    assert s.poll() == ScaleOut(("auto-1", "auto-2"), 1, 3, "because")
    assert set(launcher.running) == {"auto-1", "auto-2"}
    assert fake.decisions() == [("up", "started")]
    assert (tmp_path / "decision.json").exists()
    assert isinstance(s.poll(), Wait)               # not registered yet
    fake.add("auto-1", 0)
    fake.add("auto-2", 0)
    s.poll()
    assert fake.decisions() == [("up", "started"), ("up", "done")]
    assert not (tmp_path / "decision.json").exists()


def test_a_drain_in_flight_survives_a_restart_and_ends_once(tmp_path: Path) -> None:
    fake, launcher = FakeCoordinator(), FakeLauncher()
    fake.add("p1", 3)
    fake.add("auto-1", 1)
    launcher.running["auto-1"] = True
    s = scaler(fake, launcher, tmp_path)
    assert s.poll() == ScaleIn(("auto-1",), 2, 1, "because")
    assert ("/drain", {"processor": "auto-1"}) in fake.posts
    # the autoscaler restarts while auto-1 drains: the new one waits, then ends it
    again = scaler(fake, launcher, tmp_path)
    assert isinstance(again.poll(), Wait)
    launcher.running["auto-1"] = False              # its drain ended: it exited 0
    fake.processors["auto-1"]["alive"] = False
    again.poll()                                    # tidied: forgotten, stopped
    assert launcher.stopped == ["auto-1"] and "auto-1" not in fake.processors
    again.poll()
    assert fake.decisions() == [("down", "started"), ("down", "done")]
    assert fake.posts.count(("/drain", {"processor": "auto-1"})) == 1


def test_a_start_that_never_registers_is_stopped_and_fails(tmp_path: Path) -> None:
    fake, launcher = FakeCoordinator(), FakeLauncher()
    fake.add("p1", 4)
    fake.recommended = 2
    s = scaler(fake, launcher, tmp_path, start_timeout_s=0.0)
    s.poll()
    s.poll()                                        # past the start timeout: stopped
    assert launcher.stopped == ["auto-1"]
    s.poll()
    assert fake.decisions() == [("up", "started"), ("up", "failed")]

