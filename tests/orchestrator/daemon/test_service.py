"""The service's cheap heartbeats and long poll, over a real core and a fake clock:
heartbeats take reports in and answer from the decision in force, the loop decides,
a waiting heartbeat is answered as soon as a decision changes its listing."""

from __future__ import annotations

import threading
import time
from typing import Any

from test_api import beat, make_service

from orchestrator.daemon.api import create_app
from orchestrator.daemon.gate import Lease
from orchestrator.wire.protocol import T1_ROLES, HeartbeatRequest, TaskReport


def request(pid: str = "p1", execution: str = "e1", **extra: Any) -> HeartbeatRequest:
    return HeartbeatRequest.model_validate(beat(execution, pid, **extra))


def active(tasks: list[str], generation: int = 1) -> dict[str, Any]:
    return {"generation": generation,
            "tasks": [TaskReport(task=t, role="active").model_dump()
                      for t in tasks]}


def test_a_heartbeat_does_not_decide_the_loop_does() -> None:
    service, _, _ = make_service()
    first = service.heartbeats.register(request())
    assert sorted(first.assignment.active) == ["Partition 0", "Partition 1"]
    service.heartbeats.heartbeat(request(**active(["Partition 0", "Partition 1"])))
    service.guard.wake.clear()
    service.heartbeats.register(request("p2", "e2"))               # a newcomer: decided at once
    reply = service.heartbeats.heartbeat(request(**active(["Partition 0", "Partition 1"])))
    moving = set(first.assignment.active) - set(reply.assignment.active)
    assert reply.assignment.active == first.assignment.active or moving
    picture = service.guard.core.picture
    before = picture.pending_changes()
    service.heartbeats.heartbeat(request("p2", "e2", generation=1))
    assert service.guard.wake.is_set(), "p2's first report is news a decision waits for"
    assert picture.pending_changes() == before, "a heartbeat changed the decision"
    service.decisions.tick()
    assert picture.handoffs or picture.roles.peek("p2").active


def test_quiet_heartbeats_do_not_wake_the_loop() -> None:
    service, _, _ = make_service()
    service.heartbeats.register(request())
    service.heartbeats.heartbeat(request(**active(["Partition 0", "Partition 1"])))
    service.decisions.tick()
    service.guard.wake.clear()
    for _ in range(3):
        service.heartbeats.heartbeat(request(**active(["Partition 0", "Partition 1"])))
    assert not service.guard.wake.is_set()


def wait_in_thread(service: Any, req: HeartbeatRequest) -> tuple[list[Any], threading.Thread]:
    answers: list[Any] = []
    waiter = threading.Thread(target=lambda: answers.append(service.heartbeats.heartbeat(req, 5.0)))
    waiter.start()
    time.sleep(0.3)
    assert not answers, "in line with its listing: it waits"
    return answers, waiter


def reports(role: str, tasks: dict[str, int], generation: int = 1) -> dict[str, Any]:
    return {"generation": generation, "tasks": [
        TaskReport.model_validate({"task": t, "role": role, "lag": 0, "committed"
                                   if role in T1_ROLES else "applied": {f"in:{t[-1]}": at}}
                                  ).model_dump()
        for t, at in tasks.items()]}


def test_a_long_poll_is_answered_when_a_decision_changes_its_listing() -> None:
    service, _, _ = make_service()
    service.heartbeats.register(request())
    both = {"Partition 0": 100, "Partition 1": 100}
    service.heartbeats.heartbeat(request(**reports("active", both)))
    warm = service.heartbeats.register(request("p2", "e2")).assignment.warmup
    assert len(warm) == 1
    answers, waiter = wait_in_thread(service, request(**reports("active", both)))
    started = time.monotonic()
    service.heartbeats.heartbeat(request("p2", "e2", **reports("warmup", {warm[0]: 100})))
    service.decisions.tick()          # caught up: the decision releases it from p1
    waiter.join(5)
    assert answers and time.monotonic() - started < 2.0
    assert answers[0].assignment.active == [t for t in both if t != warm[0]]


def test_a_long_poll_is_answered_when_the_model_changes() -> None:
    service, _, _ = make_service()
    service.heartbeats.register(request())
    both = {"Partition 0": 100, "Partition 1": 100}
    service.heartbeats.heartbeat(request(**reports("active", both)))
    service.decisions.tick()
    answers, waiter = wait_in_thread(service, request(**reports("active", both)))
    service.operations.expand("in", 4)
    waiter.join(5)
    assert answers and answers[0].generation == 2 and answers[0].barriers


def test_a_long_poll_without_news_ends_at_its_bound_and_out_of_line_never_waits() -> None:
    service, _, _ = make_service()
    service.heartbeats.register(request())
    service.heartbeats.heartbeat(request(**active(["Partition 0", "Partition 1"])))
    service.decisions.tick()
    started = time.monotonic()
    service.heartbeats.heartbeat(request(**active(["Partition 0", "Partition 1"])), wait_s=0.3)
    assert 0.25 <= time.monotonic() - started < 2.0
    started = time.monotonic()
    reply = service.heartbeats.heartbeat(request(**active(["Partition 0"])), wait_s=5.0)
    assert time.monotonic() - started < 1.0, "a listed task it does not run: answer at once"
    assert sorted(reply.assignment.active) == ["Partition 0", "Partition 1"]
    started = time.monotonic()
    service.heartbeats.heartbeat(request(**active(["Partition 0", "Partition 1"], generation=0)),
                      wait_s=5.0)
    assert time.monotonic() - started < 1.0, "a stale model: answer at once"


def test_a_scrape_does_not_wait_for_the_core_lock() -> None:
    from fastapi.testclient import TestClient
    from test_api import credentials

    service, registry, _ = make_service()
    client = TestClient(create_app(service, credentials(), registry))
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with service.guard.lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(5)
    try:
        started = time.monotonic()
        assert client.get("/metrics").status_code == 200
        assert time.monotonic() - started < 2.0
    finally:
        release.set()
        holder.join()


def test_a_burst_of_registrations_shares_the_loops_decisions() -> None:
    service, _, written = make_service()
    service.heartbeats.loop_decides = True
    stop = threading.Event()
    ticks = [0]

    def loop() -> None:
        while not stop.is_set():
            service.guard.wake.wait(0.5)
            service.guard.wake.clear()
            time.sleep(0.05)            # a burst arrives while the loop turns
            service.decisions.tick()
            ticks[0] += 1

    ticker = threading.Thread(target=loop)
    ticker.start()
    replies: dict[str, Any] = {}
    unpersisted: list[str] = []

    def register(i: int) -> None:
        replies[f"p{i}"] = service.heartbeats.register(request(f"p{i}", f"e{i}"))
        if f"processor/p{i}" not in written:
            unpersisted.append(f"p{i}")

    threads = [threading.Thread(target=register, args=(i,)) for i in range(20)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    finally:
        stop.set()
        ticker.join(5)
    assert len(replies) == 20 and all(r.alive for r in replies.values())
    assert ticks[0] < 20, "one decision per registration"
    assert not unpersisted, "answered before its registration was written"
    listed = [t for r in replies.values() for t in r.assignment.active]
    assert sorted(listed) == ["Partition 0", "Partition 1"], "answered with a decision"


def hold_lock(service: Any) -> tuple[threading.Event, threading.Thread]:
    """Another thread holds the core's lock (as a long decision does) until released."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with service.guard.deciding():
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(5)
    return release, holder


def test_a_plain_heartbeat_during_a_decision_gets_the_decision_in_force() -> None:
    service, _, _ = make_service()
    service.heartbeats.register(request())
    both = {"Partition 0": 100, "Partition 1": 100}
    before = service.heartbeats.try_heartbeat(request(**reports("active", both)))
    assert before is not None and before.same_model
    release, holder = hold_lock(service)
    try:
        during = service.heartbeats.try_heartbeat(
            request(**reports("active", {"Partition 0": 250})))
        assert during == before, "answered at once with the reply it last got"
        other = service.heartbeats.try_heartbeat(request("p2", "e2"))
        assert other is None, "no reply of its own to repeat: it waits for the lock"
        stale = service.heartbeats.try_heartbeat(request(**reports("active", both, generation=0)))
        assert stale is None, "a stale model is never answered from the cache"
    finally:
        release.set()
        holder.join()
    processors = service.guard.core.picture.processors
    assert processors.get("p1").reports["Partition 0"].committed == {"in:0": 100}
    service.decisions.tick()      # the next holder of the lock takes the waiting report in
    assert processors.get("p1").reports["Partition 0"].committed == {"in:0": 250}
    assert "Partition 1" not in processors.get("p1").reports


def test_a_reply_cached_before_a_decision_is_never_repeated_after_it() -> None:
    service, _, _ = make_service()
    service.heartbeats.register(request())
    both = {"Partition 0": 100, "Partition 1": 100}
    assert service.heartbeats.try_heartbeat(request(**reports("active", both))) is not None
    service.operations.drain("p1")                     # a decision that changes what p1 is told
    release, holder = hold_lock(service)
    try:
        assert service.heartbeats.try_heartbeat(request(**reports("active", both))) is None
    finally:
        release.set()
        holder.join()
    after = service.heartbeats.try_heartbeat(request(**reports("active", both)))
    assert after is not None and after.generation == 1


def test_a_reply_still_in_force_is_not_built_again_and_a_decision_renews_it() -> None:
    service, _, _ = make_service()
    service.heartbeats.register(request())
    both = {"Partition 0": 100, "Partition 1": 100}
    first = service.heartbeats.try_heartbeat(request(**reports("active", both)))
    again = service.heartbeats.try_heartbeat(request(**reports("active", both)))
    assert again is first
    service.heartbeats.register(request("p2", "e2"))           # a decision: p1 loses a task to p2
    service.decisions.tick()
    after = service.heartbeats.try_heartbeat(request(**reports("active", both)))
    assert after is not first and after is not None


def test_barriers_are_settled_after_the_grace_with_their_markers_in_one_write() -> None:
    service, _, written = make_service()     # CoreConfig's default grace: 300 s
    service.operations.expand("in", 4)
    due = service.guard.core.picture.clock.time() + 300.0
    assert written["model"]["unsettled"] == {"in:2": due, "in:3": due}
    calls: list[Any] = []

    def write(due: Any, counts: Any, changes_for: Any, floors: Any) -> dict[str, int]:
        offsets = {parent: 140 + i for i, parent in enumerate(sorted(due))}
        calls.append((dict(due), dict(counts), dict(floors)))
        written.update(changes_for(offsets))
        return offsets

    assert not service.growth.settle_barriers(write)                  # within the grace
    lag_before = service.guard.core.picture.model.waits_for_settlement(["in:2"])
    service.guard.core.picture.clock.advance(300.0)
    assert service.growth.settle_barriers(write)
    assert calls == [({"in:0": ["in:2"], "in:1": ["in:3"]}, {"in": 4},
                      {"in:0": 100, "in:1": 101})]      # the parents' ends at expansion
    assert lag_before and not service.guard.core.picture.model.waits_for_settlement(["in:2"])
    assert written["model"]["barriers"] == {"in:2": {"parent": "in:0", "offset": 140},
                                            "in:3": {"parent": "in:1", "offset": 141}}
    assert "unsettled" not in written["model"]
    assert not service.growth.settle_barriers(write) and len(calls) == 1
    status = service.operations.status()["barriers"]
    assert status["in:2"]["settled"] and not status["in:2"]["reached"]


def test_heartbeats_refused_while_the_loop_waited_on_the_late_write_are_excused() -> None:
    """A broker stall holds a tick's stream write past the lease: the gate refuses the
    heartbeats meanwhile, and the loop, waiting on that write, never sees the lapse."""
    service, _, _ = make_service()
    core = service.guard.core
    clock = core.picture.clock
    written = [clock.monotonic()]
    lease = Lease(clock, lambda: written[0], 3.0)
    service.decisions.lease = lease
    service.heartbeats.register(request())
    service.heartbeats.heartbeat(request(**active(["Partition 0", "Partition 1"])))
    service.decisions.tick()
    timeout = core.picture.config.processor_timeout_s
    clock.advance(timeout - 1)              # the write waits; the last heartbeat was then
    assert not lease(), "the gate refuses p1's heartbeat"
    clock.advance(2)
    written[0] = clock.monotonic()          # the write is through, the lease holds again
    service.decisions.tick()
    assert core.picture.processors.get("p1").valid, "p1 was refused, not silent"
    clock.advance(timeout)                  # and now it is silent, the lease held
    written[0] = clock.monotonic()
    service.decisions.tick()
    assert not core.picture.processors.get("p1").valid
