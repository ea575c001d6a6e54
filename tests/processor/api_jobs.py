"""Jobs of the Job API tests, importable by class path (processors and Spark executors
load `tests.processor.api_jobs:...`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from processor import Context, Emitted, Job, Output, Record, State
from processor.examples import RunningSum

__all__ = ["HangsInP1", "HookedSum", "JsonTotals"]


class HookedSum(Job):
    """A running sum scaled by `params["scale"]`, each output an `Output` carrying the
    input's "src" header and the scale; setup/close calls recorded in `calls`."""

    calls: list[tuple[Any, ...]] = []

    def setup(self, context: Context) -> None:
        self.context = context
        HookedSum.calls.append(("setup", context.processor, context.task, context.role,
                                context.partitions))

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        assert record.key is not None and record.value is not None
        src = dict(record.headers).get("src") or b"-"
        history = state.setdefault(record.key, {"total": 0, "sources": []})
        history["total"] += int(record.value) * int(self.params["scale"])
        history["sources"].append(src.decode())
        yield Output(record.key, str(history["total"]),
                     headers=[("src", src), ("scale", str(self.params["scale"]))])

    def close(self) -> None:
        HookedSum.calls.append(("close", self.context.processor, self.context.task))


class JsonTotals(Job):
    """`key_format = "str"`, `value_format = "json"`: a running total of the values' "n"
    per key as a (key, value) pair, and an `Output` to the "alerts" output (named in
    `params["alerts"]`) once a key's total passes `params["limit"]`."""

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        assert isinstance(record.key, str), record.key
        total = state.get(record.key, 0) + record.value["n"]
        state[record.key] = total
        yield record.key, {"total": total}
        if total > self.params["limit"]:
            yield Output(record.key, {"over": total}, topic=self.params["alerts"])


class HangsInP1(RunningSum):
    """The running sum, whose process() never returns in processor p1 on the key
    "stuck" (a call that hangs on one host); other processors sum it like any key."""

    def setup(self, context: Context) -> None:
        self.hangs = context.processor == "p1"

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        if self.hangs and record.key == b"stuck":
            threading.Event().wait()        # set by no one
        return super().process(record, state)
