"""Reconciliation against a fake runtime: a heartbeat reply -> which changes, in order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.wire.protocol import RoleListing
from processor.runtime.reconciliation import reconcile, replica_roles


class _Replica:
    def __init__(self, partitions: list[str], role: str) -> None:
        self.partitions = partitions
        self.role = role


class FakeRuntime:
    """The `Reconcilable` seam, recording every change instead of making it."""

    def __init__(self, model: dict[str, list[str]]) -> None:
        self.model = model
        self.failed: dict[str, str] = {}
        self.active: dict[str, Any] = {}
        self.replicas: dict[str, Any] = {}
        self.fencing: set[str] = set()
        self.log: list[tuple[str, str]] = []
        self.broken: set[str] = set()

    def activating(self, task: str) -> bool:
        return task in self.fencing

    def replay_partitions(self, task: str) -> list[str]:
        return self.partitions_of(task)

    def partitions_of(self, task: str) -> list[str]:
        return list(self.model.get(task, ()))

    def guard(self, task: str, change: Callable[[str], object]) -> None:
        try:
            change(task)
        except OSError as exc:
            self.failed[task] = str(exc)

    def release(self, task: str) -> dict[str, int]:
        self.log.append(("release", task))
        del self.active[task]
        return {}

    def drop(self, task: str) -> None:
        self.log.append(("drop", task))
        del self.replicas[task]

    def start_replica(self, task: str, role: str) -> None:
        if task in self.broken:
            raise OSError("store locked")
        self.log.append((role, task))
        self.replicas[task] = _Replica(self.partitions_of(task), role)

    def activate(self, task: str) -> None:
        self.log.append(("activate", task))
        self.fencing.add(task)

    def grow(self, task: str) -> None:
        self.log.append(("grow", task))


MODEL = {"t0": ["in:0"], "t1": ["in:1"], "t2": ["in:2"]}


def test_replica_roles_list_warmups_and_standbys() -> None:
    assert replica_roles(RoleListing(warmup=["t0"], standby=["t1"])) == {
        "t0": "warmup", "t1": "standby"}


def test_releases_before_drops_before_starts_before_activations() -> None:
    runtime = FakeRuntime(dict(MODEL))
    runtime.active["t0"] = object()
    runtime.replicas["t1"] = _Replica(["in:1"], "warmup")
    reconcile(runtime, RoleListing(active=["t2"], standby=["t0"]))
    assert runtime.log == [("release", "t0"), ("drop", "t1"), ("standby", "t0"),
                           ("activate", "t2")]


def test_a_replica_whose_partitions_changed_is_restarted_and_roles_switch() -> None:
    runtime = FakeRuntime({"t0": ["in:0", "in:3"], "t1": ["in:1"]})
    runtime.replicas["t0"] = _Replica(["in:0"], "warmup")
    runtime.replicas["t1"] = _Replica(["in:1"], "warmup")
    reconcile(runtime, RoleListing(warmup=["t0"], standby=["t1"]))
    assert runtime.log == [("drop", "t0"), ("warmup", "t0")]
    assert runtime.replicas["t1"].role == "standby"


def test_an_activating_replica_stays_and_is_not_activated_twice() -> None:
    runtime = FakeRuntime(dict(MODEL))
    runtime.replicas["t0"] = _Replica(["in:0"], "activating")
    runtime.fencing.add("t0")
    reconcile(runtime, RoleListing(active=["t0"]))
    assert runtime.log == []


def test_a_failed_task_waits_until_the_coordinator_stops_listing_it() -> None:
    runtime = FakeRuntime(dict(MODEL))
    runtime.broken.add("t0")
    reconcile(runtime, RoleListing(warmup=["t0"]))
    assert runtime.failed == {"t0": "store locked"}
    runtime.broken.clear()
    reconcile(runtime, RoleListing(warmup=["t0"]))
    assert runtime.log == []                    # still failed: not retried
    reconcile(runtime, RoleListing())
    assert runtime.failed == {}
    reconcile(runtime, RoleListing(warmup=["t0"]))
    assert runtime.log == [("warmup", "t0")]


def test_tasks_outside_the_model_are_not_started_and_active_ones_grow() -> None:
    runtime = FakeRuntime(dict(MODEL))
    runtime.active["t1"] = object()
    reconcile(runtime, RoleListing(active=["t1", "t9"], warmup=["t8"]))
    assert runtime.log == [("grow", "t1")]


def test_a_failure_is_forgotten_only_once_the_coordinator_has_seen_it() -> None:
    """A task fenced while its release was on its way is listed by neither the reply
    nor, yet, the heartbeat that reply answers: forgotten then, its failure would never
    be reported, and the coordinator would wait for a release that cannot come."""
    runtime = FakeRuntime(dict(MODEL))
    runtime.failed["t0"] = "fenced"
    reconcile(runtime, RoleListing(), seen_failures=frozenset())
    assert runtime.failed == {"t0": "fenced"}          # not reported yet: kept
    reconcile(runtime, RoleListing(), seen_failures=frozenset({"t0"}))
    assert runtime.failed == {}
