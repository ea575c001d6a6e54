"""processor.testing: the harness runs a job as the active task does, on a real task
store, so what a job author's unit test sees is what production does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from processor import Context, Emitted, Job, Output, Record, State
from processor.outputs import OutputError
from processor.testing import JobHarness, run_job


class Tally(Job):
    """Dict habits on the state: setdefault, nested values changed in place."""

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        assert record.value is not None
        state.setdefault("seen", []).append(record.value.decode())
        per_key = state.setdefault("per_key", {})
        per_key[record.key.decode() if record.key else "-"] = len(state["seen"])
        yield record.key, str(len(state["seen"]))


class Routed(Job):
    """Outputs with headers, a timestamp, another topic; params and the hooks."""

    events: list[Any] = []

    def setup(self, context: Context) -> None:
        Routed.events.append(("setup", context.task, context.partitions, context.role,
                              dict(self.params)))

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        scale = int(self.params["scale"])
        assert record.value is not None
        value = int(record.value) * scale
        yield Output(record.key, str(value), headers=[("h", "1")], timestamp=99)
        yield Output(None, str(value), topic="audit")
        yield record.key, record.headers[0][1] if record.headers else b"none"

    def close(self) -> None:
        Routed.events.append(("close",))


def test_mutations_persist_whatever_the_commit_boundaries() -> None:
    pairs = [("a", "1"), ("b", "2"), ("a", "3"), ("c", "4"), ("a", "5")]
    runs = [run_job(Tally, pairs, commit_every=n) for n in (1, 2, 5)]
    assert runs[0].state == {"seen": ["1", "2", "3", "4", "5"],
                             "per_key": {"a": 5, "b": 2, "c": 4}}
    assert runs[0].state == runs[1].state == runs[2].state
    assert [o.value for o in runs[0].outputs] == [b"1", b"2", b"3", b"4", b"5"]


def test_outputs_params_headers_and_hooks() -> None:
    Routed.events = []
    record = Record(b"k", b"2", "in", 3, 7, 1234, [("src", b"x")])
    run = run_job(Routed, [record], params={"scale": 5}, outputs=["audit"],
                  partitions=["in:3"])
    assert run.outputs == [
        Output(b"k", b"10", [("h", b"1")], 99, "output"),
        Output(None, b"10", None, 1234, "audit"),
        Output(b"k", b"x", None, 1234, "output")]
    assert Routed.events == [("setup", "Partition 0", ("in:3",), "testing", {"scale": 5}),
                             ("close",)]


def test_an_output_to_an_undeclared_topic_is_refused() -> None:
    with pytest.raises(OutputError, match="'audit'"):
        run_job(Routed, [("k", "1")], params={"scale": 1})


def test_a_failed_record_is_undone_and_an_abort_drops_the_open_transaction() -> None:
    class Fragile(Job):
        def process(self, record: Record, state: State) -> Iterator[Emitted]:
            state.setdefault("log", []).append(record.offset)
            if record.value == b"bad":
                raise ValueError("bad record")
            yield from ()

    with JobHarness(Fragile, on_error="skip", commit_every=10) as harness:
        harness.send(("k", "ok"))
        harness.send(("k", "bad"))
        assert harness.state == {"log": [0]}
        harness.commit()
        harness.send(("k", "ok"))
        harness.abort()
        assert harness.state == {"log": [0]}
        run = harness.close()
    assert [r.offset for r, _ in run.failed] == [1] and run.state == {"log": [0]}


def test_the_readme_example() -> None:
    from processor.examples import KeyStats

    run = run_job(KeyStats, [("a", "1"), ("b", "5"), ("a", "2")], commit_every=2)
    assert [o.value for o in run.outputs] == [b"1:1", b"1:5", b"2:3"]
    assert run.state == {b"a": {"n": 2, "sum": 3}, b"b": {"n": 1, "sum": 5}}
    with JobHarness(KeyStats, params={}, on_error="skip") as harness:
        assert harness.send(("a", "x")) == [] and harness.state == {}


def test_a_pair_may_be_a_list_and_anything_else_is_refused() -> None:
    class Pairs(Job):
        def process(self, record: Record, state: State) -> Iterator[Any]:
            yield [record.key, record.value]
            if record.value == b"bad":
                yield record.key, record.value, "three"

    assert [(o.key, o.value) for o in run_job(Pairs, [("k", "v")]).outputs] == [(b"k", b"v")]
    with pytest.raises(OutputError, match="yield"):
        run_job(Pairs, [("k", "bad")])
