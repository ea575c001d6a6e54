"""Failed tasks reach the coordinator core and are acted on (orchestrator/core/failures.py):
a failed warmup or activation ends its handoff, a failed active task is re-placed on
another processor, each (task, processor) pair is retried after a backoff a bounded
number of times, and a task failed everywhere stays failed and says so. Fake clock,
fake processors (tests/orchestrator/core/test_coordinator.py's harness)."""

from __future__ import annotations

import pytest

from orchestrator.core.failures import FORGET_AFTER
from orchestrator.core.views import pending, status
from tests.orchestrator.core.test_coordinator import (
    ALL,
    FakeProcessor,
    Harness,
    at,
    catch_up_and_release,
    owners,
    start_two,
)


def _failed(h: Harness, task: str) -> list[dict[str, object]]:
    entry = next(t for t in status(h.core.picture)["tasks"] if t["name"] == task)
    failed: list[dict[str, object]] = entry["failed"]
    return failed


def test_a_failed_warmup_cancels_the_handoff_and_is_retried_after_the_backoff() -> None:
    h = Harness()
    p1, p2 = start_two(h)
    task = sorted(h.core.picture.handoffs)[0]
    p2.failing[task] = "cannot open store: lock held"
    p2.beat()   # the warmups are listed; this one fails at once
    p2.beat()   # reports it failed
    assert task not in h.core.picture.handoffs
    cancelled = h.core.picture.handoff_book.history[-1]
    assert (cancelled.task, cancelled.phase.value) == (task, "cancelled")
    assert "lock held" in cancelled.reason
    assert owners(h)[task] == "p1" and task in p1.listed()   # kept where it is
    assert [(f["processor"], f["error"], f["attempts"]) for f in _failed(h, task)] == [
        ("p2", "cannot open store: lock held", 1)]
    assert h.metric("baton_handoffs_total", outcome="cancelled") == 1
    assert h.metric("baton_tasks_failed") == 0           # it still runs on p1
    assert h.stream["failures"][task]["p2"]["attempts"] == 1
    for _ in range(7):   # within the 30 s backoff p2 is not given it again
        h.clock.advance(4.0)
        p1.beat()
        p2.beat()
        assert task not in p2.listed() and task not in set(p2.reply.assignment.warmup)  # type: ignore[union-attr]
        assert task not in h.core.picture.handoffs
    # re-placed: p2 warms up another task of p1's instead, so the scale-out goes on
    assert {x.target for x in h.core.picture.handoffs.values()} == {"p2"}
    assert len(h.core.picture.handoffs) == 2
    p2.failing.clear()
    p2.positions = at(1000, *ALL)
    for _ in range(8):
        h.clock.advance(1.0)
        p2.beat()
        p1.beat()
    mine = [t for t, pid in owners(h).items() if pid == "p2"]
    assert len(mine) == 2 and task not in mine and owners(h)[task] == "p1"


def test_a_failed_activation_returns_the_task_to_its_source(
        caplog: pytest.LogCaptureFixture) -> None:
    h = Harness()
    p1, p2 = start_two(h)
    moving = catch_up_and_release(h, p1, p2)
    p1.beat()
    p1.beat()          # released and acknowledged: activating
    p2.failing[moving[0]] = "init_transactions timed out"
    p2.beat()          # listed active; the activation fails
    p2.beat()          # reports it failed
    assert moving[0] not in h.core.picture.handoffs
    ended = next(x for x in h.core.picture.handoff_book.history if x.task == moving[0])
    assert ended.phase.value == "cancelled" and "init_transactions timed out" in ended.reason
    assert h.core.picture.alive("p2-exec-1")         # only the task failed, not the processor
    assert owners(h)[moving[0]] == "p1"
    p1.beat()
    assert moving[0] in p1.active()
    assert "still listed active" not in caplog.text


def start_balanced(h: Harness) -> tuple[FakeProcessor, FakeProcessor]:
    p1, p2 = FakeProcessor(h, "p1"), FakeProcessor(h, "p2")
    p1.positions = p2.positions = at(0, *ALL)
    p1.register()
    p2.register()
    for _ in range(4):
        p1.beat()
        p2.beat()
    return p1, p2


def test_a_failed_active_task_is_re_placed_up_to_the_bound_then_stays_failed() -> None:
    h = Harness(failure_backoff_s=10.0, max_task_attempts=2)
    p1, p2 = start_balanced(h)
    task = next(t for t in ALL if owners(h)[t] == "p1")
    p1.failing[task] = p2.failing[task] = "process() raised ValueError: poison"
    p1.beat()          # fails while processing
    p1.beat()          # reports it failed: p1 loses it, p2 gets it at once
    assert task not in p1.listed()
    assert owners(h)[task] == "p2"
    p2.beat()          # activates, fails
    p2.beat()          # reports it failed: both excluded for the backoff
    assert owners(h)[task] is None
    assert h.core.picture.failed_tasks() == [task]
    assert h.metric("baton_tasks_failed") == 1
    assert any("poison" in reason and task in reason for reason in pending(h.core.picture))
    for _ in range(15):   # backoffs run out, each pair is retried once more, then no more
        h.clock.advance(4.0)
        p1.beat()
        p2.beat()
    assert owners(h)[task] is None
    assert [(f["processor"], f["attempts"], f["exhausted"]) for f in _failed(h, task)] == [
        ("p1", 2, True), ("p2", 2, True)]
    doc = status(h.core.picture)
    assert any("failed on every processor" in e and "poison" in e for e in doc["errors"])
    assert not doc["balanced"]
    assert h.metric("baton_tasks_failed") == 1
    for _ in range(3):
        h.clock.advance(4.0)
        p1.beat()
        p2.beat()
    assert owners(h)[task] is None and task not in p1.listed() | p2.listed()
    h.restart()           # the bound survives a coordinator restart
    assert h.core.picture.failures.exhausted(task, ["p1", "p2"])
    fixed = FakeProcessor(h, "p1", execution="p1-exec-2")   # a new execution retries
    fixed.positions = at(0, *ALL)
    fixed.register()
    p2.beat()             # (a restarted coordinator places once every processor reported)
    fixed.beat()
    assert owners(h)[task] == "p1"


def test_failures_that_come_now_and_then_never_add_up_to_the_bound() -> None:
    """A broker away for longer than transaction.timeout.ms fences, at its return, the
    producers whose transactions it aborts: their tasks fail now and then over a long
    run. A pair quiet for FORGET_AFTER backoffs past its exclusion is forgotten, so such
    failures never exclude a processor for good (here the bound is 2 attempts)."""
    h = Harness(failure_backoff_s=10.0, max_task_attempts=2)
    p1, p2 = start_balanced(h)
    processors = {"p1": p1, "p2": p2}
    task = next(t for t in ALL if owners(h)[t] == "p1")
    for _ in range(3):
        owner = processors[owners(h)[task]]
        owner.failing[task] = "producer fenced: its transaction timed out"
        owner.beat()          # fails while processing
        owner.beat()          # reports it failed: placed on the other processor
        owner.failing.clear()
        assert [(f["processor"], f["attempts"]) for f in _failed(h, task)] == [
            (owner.pid, 1)]
        quiet = 10.0 * (1 + FORGET_AFTER)
        for _ in range(int(quiet) + 2):
            h.clock.advance(1.0)
            p1.beat()
            p2.beat()
        assert _failed(h, task) == [] and "failures" not in h.stream
        assert owners(h)[task] in processors


def test_a_pair_excluded_for_good_is_never_forgotten() -> None:
    h = Harness(failure_backoff_s=10.0, max_task_attempts=1)
    p1, p2 = start_balanced(h)
    task = next(t for t in ALL if owners(h)[t] == "p1")
    p1.failing[task] = "process() raised ValueError: poison"
    p1.beat()
    p1.beat()
    for _ in range(int(10.0 * (1 + FORGET_AFTER)) + 2):
        h.clock.advance(1.0)
        p1.beat()
        p2.beat()
    assert [(f["processor"], f["exhausted"]) for f in _failed(h, task)] == [("p1", True)]
    assert owners(h)[task] == "p2" and task not in p1.listed()
