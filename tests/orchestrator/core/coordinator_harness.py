"""The coordinator core's test harness: the core on a fake clock, with fake processors
speaking the wire protocol.

A pair (well, group) harness after h11's ConnectionPair: the core plus fake processors
that apply each reply the way the real runtime does (level-triggered), and a "stream"
dict that receives the core's pending changes after every call, as the daemon writes
them. Interleavings are explicit calls, never sleeps.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from metrics import CoordinatorMetrics
from orchestrator.core.assignment import AssignmentConfig
from orchestrator.core.coordinator import Coordinator, CoreConfig
from orchestrator.core.handoff import HandoffConfig
from orchestrator.core.model import JobModel
from orchestrator.wire.protocol import T1_ROLES, HeartbeatReply, HeartbeatRequest, TaskReport
from tests.clocks import FakeClock

TOPIC = "in"


ACCEPTABLE = 100


def config(**overrides: Any) -> CoreConfig:
    base: dict[str, Any] = {
        "job": "j", "processor_timeout_s": 5.0,
        "assignment": AssignmentConfig(acceptable_lag=ACCEPTABLE, max_warmups=2),
        "handoff": HandoffConfig(ACCEPTABLE, release_timeout_s=3.0, activate_timeout_s=6.0)}
    base.update(overrides)
    return CoreConfig(**base)


class Harness:
    """A core, its persisted records, and a clock; `sync()` writes like the daemon."""

    def __init__(self, partitions: int = 4, **overrides: Any) -> None:
        self.clock = FakeClock()
        self.registry = CollectorRegistry()
        self.config = config(**overrides)
        self.core = Coordinator(self.config, self.clock, JobModel.first([(TOPIC, partitions)],
                                                                        "partition"),
                                CoordinatorMetrics(self.registry, "j",
                                                   acceptable_lag=ACCEPTABLE))
        self.stream: dict[str, Any] = {}
        self.sync()

    def sync(self) -> None:
        changes = self.core.picture.pending_changes()
        for key, value in changes.items():
            if value is None:
                self.stream.pop(key, None)
            else:
                self.stream[key] = value
        self.core.picture.confirm(changes)
        check_one_active_owner(self.core)

    def restart(self, wall_goes_on: bool = False) -> None:
        """A new coordinator process: new clock, state only from the stream. With
        `wall_goes_on` its wall clock reads on from the old one's (another host's
        clock, in step), else it starts again from the fake epoch."""
        self.clock = (FakeClock(start=1000.0, wall_start=self.clock.time()) if wall_goes_on
                      else FakeClock(start=1000.0))
        self.registry = CollectorRegistry()
        core = Coordinator.restore(self.config, self.clock, dict(self.stream),
                                   CoordinatorMetrics(self.registry, "j",
                                                      acceptable_lag=ACCEPTABLE))
        assert core is not None
        self.core = core
        self.sync()

    def tick(self, seconds: float = 0.0) -> None:
        self.clock.advance(seconds)
        self.core.tick()
        self.sync()

    def metric(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, {"job": "j", **labels})
        return 0.0 if value is None else value


def check_one_active_owner(core: Coordinator) -> None:
    """The safety invariant: no task listed active on two live processors."""
    for task in core.picture.model.tasks:
        owners = [pid for pid, roles in core.picture.roles
                  if task in roles.active and core.picture.processors.get(pid) is not None
                  and core.picture.processors.get(pid).valid]  # type: ignore[union-attr]
        assert len(owners) <= 1, f"{task} active on {owners}"


class FakeProcessor:
    """Applies replies like processor/runtime/ does; positions are set by the test."""

    def __init__(self, h: Harness, pid: str, execution: str | None = None) -> None:
        self.h, self.pid = h, pid
        self.execution = execution or f"{pid}-exec-1"
        self.roles: dict[str, str] = {}
        self.positions: dict[str, dict[str, int]] = {}
        self.reply: HeartbeatReply | None = None
        self.ignore_release = False  # a stuck owner: never acknowledges a release
        self.activate_as = "active"  # "activating": a new owner stuck replaying
        self.pause_ms: float | None = 12.0  # None: no output yet (a task without traffic)
        self.failing: dict[str, str] = {}  # task -> error: it fails in any role it is given
        self.lags: dict[str, int] = {}  # task -> the lag a replica reports (changelog)
        self.stalled: dict[str, list[str]] = {}  # task -> partitions whose read stalled

    def request(self, leaving: bool = False) -> HeartbeatRequest:
        return HeartbeatRequest(
            processor_id=self.pid, execution_id=self.execution,
            metrics_url=f"http://127.0.0.1:1/{self.pid}", leaving=leaving,
            tasks=[TaskReport(task=t, role=r,  # type: ignore[arg-type]
                              **{"committed" if r in T1_ROLES else "applied":
                                 self.positions.get(t, {})},
                              pause_ms=self.pause_ms if r == "active" else None,
                              lag=self.lags.get(t) if r != "active" else None,
                              error=self.failing.get(t) if r == "failed" else None,
                              stalled=self.stalled.get(t, []))
                   for t, r in self.roles.items()])

    def register(self) -> HeartbeatReply:
        return self._apply(self.h.core.register(self.request()))

    def beat(self) -> HeartbeatReply:
        return self._apply(self.h.core.heartbeat(self.request()))

    def leave(self) -> HeartbeatReply:
        return self._apply(self.h.core.heartbeat(self.request(leaving=True)))

    def _apply(self, reply: HeartbeatReply) -> HeartbeatReply:
        self.h.sync()
        self.reply = reply
        if not reply.alive:
            return reply
        a = reply.assignment
        for task, role in list(self.roles.items()):
            if role == "active" and task not in a.active and not self.ignore_release:
                self.roles[task] = "released"
        for task in a.warmup:
            if self.roles.get(task) != "active":
                self.roles[task] = "warmup"
        for task in a.standby:
            if self.roles.get(task) != "active":
                self.roles[task] = "standby"
        for task in a.active:
            if self.roles.get(task) != "active":
                self.roles[task] = self.activate_as
        for task in self.failing:   # like guard(): the task is failed with its error
            if self.roles.get(task) in ("active", "activating", "warmup", "standby"):
                self.roles[task] = "failed"
        wanted = set(a.active) | set(a.warmup) | set(a.standby)
        for task, role in list(self.roles.items()):
            if task not in wanted and role not in ("released", "active", "activating"):
                del self.roles[task]
        return reply

    def active(self) -> set[str]:
        return {t for t, r in self.roles.items() if r == "active"}

    def listed(self) -> set[str]:
        assert self.reply is not None
        return set(self.reply.assignment.active)


def partitions(task: str) -> list[str]:
    return [f"{TOPIC}:{task.rsplit(' ', 1)[1]}"]


def at(offset: int, *tasks: str) -> dict[str, dict[str, int]]:
    return {t: {p: offset for p in partitions(t)} for t in tasks}


ALL = ["Partition 0", "Partition 1", "Partition 2", "Partition 3"]


def owners(h: Harness) -> dict[str, str | None]:
    return {t: h.core.picture.owner(t) for t in ALL}


def start_two(h: Harness) -> tuple[FakeProcessor, FakeProcessor]:
    """p1 owns all four tasks at offset 1000; p2 joins with nothing."""
    p1 = FakeProcessor(h, "p1")
    p1.register()
    p1.beat()
    p1.positions = at(1000, *ALL)
    p1.beat()
    p2 = FakeProcessor(h, "p2")
    p2.register()
    return p1, p2


def catch_up_and_release(h: Harness, p1: FakeProcessor, p2: FakeProcessor) -> list[str]:
    """Drive both handoffs of `start_two` to releasing."""
    moving = sorted(h.core.picture.handoffs)
    p2.beat()
    p2.positions = at(1000, *moving)
    p2.beat()
    assert {x.phase.value for x in h.core.picture.handoffs.values()} == {"releasing"}
    return moving
