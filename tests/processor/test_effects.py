"""Side effects after commit and `context.replaying`, without a broker: the harness
runs effects at each commit and drops them with a failed record, an abort or a
replay; a task's one job instance follows its role (`TaskJobs`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest

from orchestrator.wire.config import parse_config
from processor import Context, Emitted, Job, Record, State
from processor.effects import AfterCommit
from processor.runtime.jobs import TaskJobs
from processor.testing import JobHarness

_TASK = "Partition 0"


class Notifies(Job):
    """Asks for an effect per record (appending the key to `sent`); raises on "bad"
    after asking; an effect of key "broken" raises."""

    sent: list[str] = []
    contexts: list[Context] = []

    def setup(self, context: Context) -> None:
        self.context = context
        Notifies.contexts.append(context)

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        key = (record.key or b"").decode()
        self.context.after_commit(lambda: self._send(key))
        if key == "bad":
            raise ValueError("bad record")
        yield key, "seen"

    @staticmethod
    def _send(key: str) -> None:
        if key == "broken":
            raise ConnectionError("the service is down")
        Notifies.sent.append(key)


def setup_function() -> None:
    Notifies.sent, Notifies.contexts = [], []


def test_effects_run_at_the_commit_in_order() -> None:
    with JobHarness(Notifies, commit_every=3) as harness:
        harness.send(("a", "1"))
        harness.send(("b", "1"))
        assert Notifies.sent == []                  # not before the commit
        assert not Notifies.contexts[0].replaying
        harness.send(("c", "1"))
        assert Notifies.sent == ["a", "b", "c"]
    assert harness.run.effects == 3


def test_a_failed_record_and_an_abort_drop_their_effects() -> None:
    with JobHarness(Notifies, commit_every=10, on_error="skip") as harness:
        harness.send(("a", "1"))
        harness.send(("bad", "1"))                  # raised after asking: dropped
        harness.commit()
        harness.send(("b", "1"))
        harness.abort()                             # its transaction aborted: dropped
        harness.send(("c", "1"))
    assert Notifies.sent == ["a", "c"]
    assert [str(e) for _, e in harness.run.failed] == ["bad record"]


def test_an_effect_that_raises_is_kept_and_the_next_runs() -> None:
    with JobHarness(Notifies, commit_every=3) as harness:
        for key in ("a", "broken", "b"):
            harness.send((key, "1"))
    assert Notifies.sent == ["a", "b"]
    assert [type(e) for e in harness.run.effect_errors] == [ConnectionError]


def test_a_replay_runs_no_effect() -> None:
    with JobHarness(Notifies, replaying=True) as harness:
        harness.send(("a", "1"))
    assert Notifies.sent == [] and harness.run.effects == 0
    assert Notifies.contexts[0].replaying


def test_after_commit_refuses_what_it_cannot_call() -> None:
    class Wrong(Job):
        def setup(self, context: Context) -> None:
            self.context = context

        def process(self, record: Record, state: State) -> Iterator[Emitted]:
            self.context.after_commit("send it")    # type: ignore[arg-type]
            yield from ()

    with JobHarness(Wrong) as harness, pytest.raises(TypeError, match="send it"):
        harness.send(("a", "1"))


def test_a_context_without_a_host_is_a_replays() -> None:
    context = Context("job", _TASK, ("events:0",), "spark", "bulk")
    context.after_commit(lambda: Notifies.sent.append("never"))
    assert context.replaying and Notifies.sent == []


def _config() -> Any:
    return parse_config({
        "job": {"name": "notify", "class": "tests.processor.test_effects:Notifies",
                "inputs": ["events"], "output": "out"},
        "kafka": {"bootstrap_servers": "127.0.0.1:9"}})


def test_one_instance_follows_the_task_from_replay_to_active_and_back() -> None:
    jobs = TaskJobs(_config(), "p1")
    warm = jobs.get(_TASK, "warmup", ["events:0"])
    context = cast(Notifies, warm).context    # its class as the runtime imported it
    assert context.role == "warmup" and context.replaying
    context.after_commit(lambda: None)             # a warmup's: dropped
    effects = AfterCommit()
    assert jobs.get(_TASK, "active", ["events:0"], effects) is warm
    assert not context.replaying
    context.after_commit(lambda: None)
    assert len(effects) == 1
    assert jobs.get(_TASK, "activating", ["events:0"]) is warm   # failed, replays again
    context.after_commit(lambda: None)
    assert context.replaying and len(effects) == 1
    assert context.role == "warmup"                 # the role it was set up in
    jobs.close_all()
