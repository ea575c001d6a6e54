"""Side effects after commit: work a job asks for that must not run on a replay.

`process()` runs on every record of every replay as well (a warmup, a standby's
apply, the activation's replay to T1, a Spark fold), whose outputs are thrown away.
Work outside the task (a call to a service, an email, a row in a database) is asked
for with `context.after_commit(fn)`; the `TaskHost` behind the context decides:

- on the active owner, `fn` joins the open transaction's effects (`AfterCommit`): a
  record whose `process()` raised drops the effects it asked for with its state
  writes; an aborted transaction drops all of its own (its records are processed
  again from the committed offsets and ask again); after a commit they run, in the
  order asked, on the processor's loop (`run_effects`), never on a commit thread;
- while the task replays (`replaying`), `fn` is dropped.

A function cannot be persisted: a processor that dies between the commit and the
call loses the effects of that commit (at most once). Work that must happen at least
once goes to a topic in the same transaction (an outbox) and is done by its reader
(docs/jobs.md, "Side effects"). An effect that raises is logged and counted; the
transaction is committed, so the task goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from metrics import JobMetrics
from orchestrator.wire.clock import Clock
from processor.job import Effect

__all__ = ["SLOW_EFFECT_S", "AfterCommit", "TaskHost", "run_effects"]

log = logging.getLogger("baton.processor.effects")

# an effect longer than this is logged: the processor's loop (every task on it, the
# handoffs it takes part in) waits for it; longer work belongs on a thread of the job's
SLOW_EFFECT_S = 1.0


class AfterCommit:
    """The effects asked for in one active task's open transaction, marked per record
    as the store marks its writes (`begin_record`, `rollback_record`)."""

    def __init__(self) -> None:
        self._open: list[Effect] = []
        self._mark = 0

    def __len__(self) -> int:
        return len(self._open)

    def add(self, fn: Effect) -> None:
        self._open.append(fn)

    def begin_record(self) -> None:
        """What follows belongs to the next record (or batch of records)."""
        self._mark = len(self._open)

    def rollback_record(self) -> None:
        """The record's `process()` raised: drop what it asked for."""
        del self._open[self._mark:]

    def drop(self) -> None:
        """The transaction aborted: drop every effect it carried."""
        self._open.clear()
        self._mark = 0

    def take(self) -> list[Effect]:
        """The transaction committed: its effects, in the order asked; none left open."""
        taken, self._open, self._mark = self._open, [], 0
        return taken


class TaskHost:
    """What a task's `Context` reads: `replaying` and where `after_commit` goes follow
    the task's role (`effects` is the active task's `AfterCommit`, None while it
    replays); `metrics` is the job's instruments with the task's labels."""

    def __init__(self, metrics: JobMetrics, effects: AfterCommit | None = None) -> None:
        self.effects = effects
        self._metrics = metrics

    @property
    def replaying(self) -> bool:
        return self.effects is None

    def after_commit(self, fn: Effect) -> None:
        """Raises: TypeError: `fn` is not callable (found at the call, not after the
        commit, when the record is long gone)."""
        if not callable(fn):
            raise TypeError(f"after_commit() takes a function of no arguments, got "
                            f"{type(fn).__name__}: {fn!r}")
        if self.effects is not None:
            self.effects.add(fn)

    @property
    def metrics(self) -> JobMetrics:
        return self._metrics


def run_effects(task: str, effects: Sequence[Effect], on_error: Callable[[str], None],
                clock: Clock) -> None:
    """Run a committed transaction's effects in order; one that raises is logged and
    told to `on_error(task)`, and the next one runs; one slower than `SLOW_EFFECT_S`
    is logged."""
    for fn in effects:
        started = clock.monotonic()
        try:
            fn()
        except Exception:  # noqa: BLE001 - user code after a commit: never fails the task
            on_error(task)
            log.exception("task %r: an after_commit effect raised (its transaction is "
                          "committed; the effect is not retried)", task)
        took = clock.monotonic() - started
        if took > SLOW_EFFECT_S:
            log.warning("task %r: an after_commit effect took %.1f s on the processor's "
                        "loop, which every task waits for; hand long work to a thread or "
                        "queue of the job's own (docs/jobs.md, \"Side effects\")", task, took)
