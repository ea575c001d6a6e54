"""A job with side effects after commit, for the tests that count them across
processes (processors and Spark executors load `tests.processor.effect_jobs:EffectSum`)."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from processor import Context, Emitted, Record, State
from processor.examples import RunningSum

__all__ = ["BLOCK", "POISON", "EffectSum", "Ledger", "read_ledger"]

BLOCK = b"block"        # the key whose effect begins and never returns (a hung call)
POISON = b"poison"      # the key whose process() raises after asking for its effect


class EffectSum(RunningSum):
    """The running sum; each record asks for an effect after its commit.

    In `params["effects_dir"]`, per processor (per executor process on Spark):
    `<name>.seen` has a line per process() call, `R <where>` while replaying and
    `L <where>` live; `<name>.effects` a line `done <where>` per effect run, where
    `<where>` is "topic:partition@offset". The effect of a record keyed `BLOCK` writes
    `begun <where>` and never returns; process() raises on a record keyed `POISON`, after
asking for its effect. Effects run are counted on the job's own metric
    `effectsum_effects_total{kind="done"}`.
    """

    def setup(self, context: Context) -> None:
        self.context = context
        name = context.processor if context.processor != "spark" else f"spark-{os.getpid()}"
        where = Path(self.params["effects_dir"])
        # line-buffered: each line is one write(2), whole in the file at a SIGKILL
        self._seen: IO[str] = (where / f"{name}.seen").open("a", buffering=1)
        self._done: IO[str] = (where / f"{name}.effects").open("a", buffering=1)
        self._counted = context.metrics.counter("effectsum_effects_total",
                                                "Effects the test job ran.", ["kind"])

    def process(self, record: Record, state: State) -> Iterable[Emitted]:
        where = f"{record.topic}:{record.partition}@{record.offset}"
        self._seen.write(f"{'R' if self.context.replaying else 'L'} {where}\n")
        self.context.after_commit(functools.partial(self._effect, record.key, where))
        if record.key == POISON:
            raise ValueError(f"poison at {where}")
        return super().process(record, state)

    def _effect(self, key: bytes | None, where: str) -> None:
        if key == BLOCK:
            self._done.write(f"begun {where}\n")
            threading.Event().wait()        # set by no one
        self._done.write(f"done {where}\n")
        self._counted.labels(kind="done").inc()

    def close(self) -> None:
        self._seen.close()
        self._done.close()


class Ledger:
    """What the files of one name say: records seen replaying and live, effects begun
    and done (each a list, repeats kept)."""

    def __init__(self, lines: dict[str, list[str]]) -> None:
        self.replayed = lines.get("R", [])
        self.live = lines.get("L", [])
        self.begun = lines.get("begun", [])
        self.done = lines.get("done", [])


def read_ledger(directory: Path, name: str) -> Ledger:
    """The ledger of processor (or executor) `name` in `directory`."""
    lines: dict[str, list[str]] = {}
    for suffix in ("seen", "effects"):
        path = directory / f"{name}.{suffix}"
        if path.exists():
            for line in path.read_text().splitlines():
                kind, _, where = line.partition(" ")
                lines.setdefault(kind, []).append(where)
    return Ledger(lines)
