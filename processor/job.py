"""The pinned Job API: what a user subclasses, the record it receives, what it yields.

`process()` is called once per input record with the task's state mapping (backed by
the task store's transaction overlay) and yields `(key, value)` pairs, or `Output`s
(headers, a timestamp, another declared output topic), for the output topic. For the
`input` catch-up source it must be deterministic: warmups replay the same records
through it to rebuild the same state.

One `Job` instance serves one task on one processor: it is made by `new_job`, which
sets `params` (the `[job.params]` table) and calls `setup(context)`; the same instance
serves the task's replays (warmup, standby, the activation's replay to T1) and its
active life, and the runtime calls `close()` when the task leaves (released, dropped,
stopped, or the processor stops), so a job may open a client or load a model in
`setup` and let it go in `close`.

The context's `replaying` and `after_commit` follow the task's current role through a
`Host` the runtime keeps per task (processor/effects.py): `process()` runs on every
replay too, whose outputs are thrown away, so work outside the task (a call to a
service, an email) goes through `after_commit`, which runs it on the active owner once
the record's transaction has committed, and never on a replay.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, Protocol

from metrics import JobMetrics, JobMetricSet
from processor.timers import Timer, Timers
from store import State

__all__ = ["Context", "Effect", "Emitted", "Headers", "Host", "Job", "JobLoadError", "KeyValue",
           "Output", "Record", "Role", "State", "add_job_path", "load_job", "new_job"]

# the task's state: a MutableMapping, with entries that expire in stream time and
# prefix scans (store/state.py, docs/jobs.md "State")
# Kafka headers as confluent-kafka gives them: (name, value) pairs, names may repeat
Headers = Sequence[tuple[str, bytes | None]]
KeyValue = tuple[bytes | str | None, bytes | str | None]
# where the job runs: a live task, a replay of its input (no output), a Spark fold,
# or processor.testing
Role = Literal["active", "warmup", "standby", "activating", "bulk", "testing"]
_NO_PARAMS: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Record:
    """One input record, as the job sees it (`headers`: () when it has none)."""

    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int
    timestamp: int
    headers: Headers = ()


@dataclass(frozen=True, slots=True)
class Output:
    """One output record, when a `(key, value)` pair is not enough.

    Args:
        key, value: bytes, or str (UTF-8 encoded), or None.
        headers: (name, value) pairs, value bytes or str; none by default.
        timestamp: milliseconds since the epoch; None (the default): the input
            record's timestamp, as for a `(key, value)` pair.
        topic: None (the default): the job's `output`; else one of `[job] outputs`.
    """

    key: bytes | str | None
    value: bytes | str | None
    headers: Sequence[tuple[str, bytes | str | None]] | None = None
    timestamp: int | None = None
    topic: str | None = None


Emitted = Output | KeyValue
# work a job asks to be done once the record's transaction has committed
Effect = Callable[[], object]


class Host(Protocol):
    """Where a job instance runs now, as its `Context` reads it (processor/effects.py):
    the runtime's per-task host follows the task from replay to active."""

    @property
    def replaying(self) -> bool:
        """True while records are processed only to rebuild state."""

    def after_commit(self, fn: Effect) -> None:
        """Run `fn()` once the current record's transaction has committed (active
        owner only); dropped while replaying."""

    @property
    def metrics(self) -> JobMetrics:
        """The job's instruments on this processor, labelled with the task."""


class _ReplayHost:
    """The host of a run that only ever replays (a Spark fold, `baton audit`, a Context
    made without a host): `after_commit` drops; metrics go to a registry nobody serves."""

    replaying = True

    def __init__(self) -> None:
        self.metrics = JobMetricSet.unserved().task("")

    def after_commit(self, fn: Effect) -> None:
        pass


_REPLAY_HOST = _ReplayHost()


def _replay_host() -> Host:
    return _REPLAY_HOST


@dataclass(frozen=True, slots=True)
class Context:
    """What `Job.setup` is told: where this instance runs (keep it: `replaying`,
    `after_commit` and `metrics` are for `process()`).

    `role` is the role the instance was set up in; `replaying` follows the task's
    role as it changes (a warmup's instance goes on to serve the active task). A
    Context made without a host is a replay's: `after_commit` drops its function.
    """

    job: str                       # the job's name (`[job] name`)
    task: str                      # e.g. "Partition 3"
    partitions: tuple[str, ...]    # the task's input partitions, "topic:N"
    processor: str                 # the processor id (e.g. "p1")
    role: Role
    params: Mapping[str, Any] = field(default_factory=lambda: _NO_PARAMS)
    host: Host = field(default_factory=_replay_host, repr=False, compare=False)
    # what process() and on_timer() set timers through, for the key being processed
    # (processor/timers.py; docs/jobs.md, "Timers")
    timers: Timers = field(default_factory=Timers, repr=False, compare=False)

    @property
    def replaying(self) -> bool:
        """True while records are processed only to rebuild state (a warmup, a
        standby's apply, the activation's replay to T1, a Spark fold, `baton audit`);
        False on the active owner, whose records commit with their outputs."""
        return self.host.replaying

    def after_commit(self, fn: Effect) -> None:
        """Call `fn()` once the transaction carrying the current record has committed,
        on the active owner only, on the processor's loop; never during a replay
        (dropped there), nor for a record whose transaction aborts (its record is
        processed again and asks again). At most once per call: a processor that
        dies between the commit and the call loses it (docs/jobs.md, "Side effects").
        An `fn` that raises is logged and counted; the task goes on.
        """
        self.host.after_commit(fn)

    @property
    def metrics(self) -> JobMetrics:
        """The job's counters, gauges and histograms on this processor's registry,
        labelled with the job, processor and task (docs/jobs.md, "Metrics")."""
        return self.host.metrics


class Job:
    """Base class of a stateful job; override `process`, optionally `setup`/`close`,
    and `on_timer` to be called back by the timers `context.timers` sets."""

    # the `[job.params]` table (read-only), set before `setup` is called
    params: Mapping[str, Any] = _NO_PARAMS

    def setup(self, context: Context) -> None:
        """Called once, before the first record of this instance's task and role."""

    def process(self, record: Record, state: State) -> Iterable[Emitted]:
        """Update `state` from `record` and yield `(key, value)` pairs or `Output`s."""
        raise NotImplementedError(f"{type(self).__name__} must implement process()")

    def process_batch(self, records: Sequence[Record], state: State
                      ) -> Iterable[Iterable[Emitted]]:
        """What `process()` yields for each of `records`, in their order: one iterable
        of outputs per record. `records` are consecutive records of one partition.

        The default calls `process()` per record, the state's clock (`state.now`, by
        which entries with a TTL expire) set to each record's timestamp as it is
        reached. A job that can do a batch's work at once (one state read and one
        write per key rather than per record) overrides it, faithfully: the same state
        afterwards and the same outputs per record as `process()` record by record
        (one that uses TTLs takes its records through `state.following(records)`, so
        that `state.now` is each one's timestamp in turn). Should it raise, the
        runtime undoes the batch's state changes and runs the batch through
        `process()` record by record, so the record that fails meets `[job] on_error`
        alone; an active task does the same with a result that is not one iterable per
        record.
        """
        following = getattr(state, "following", None)    # a unit test's dict has none
        return map(self.process, records if following is None else following(records),
                   repeat(state))

    def on_timer(self, timer: Timer, state: State) -> Iterable[Emitted]:
        """A timer set through `context.timers` is due (`timer.key`: the key it was set
        for, as process() sees keys): update `state` and yield outputs, as `process()`
        does. Stream-time timers fire on every path that runs `process()`, before the
        record that moved the clock past them, and their outputs go with that record;
        wall-clock timers fire on the active owner only (docs/jobs.md, "Timers")."""
        return ()

    def close(self) -> None:
        """Called once when the task leaves this role here (its state is not touched)."""


class JobLoadError(ValueError):
    """`job.class` names nothing importable, or not a `Job` subclass (callers name the key)."""


def add_job_path(path: Sequence[str | Path]) -> None:
    """Put `[job] path`'s directories first on sys.path (each once), so the job's own
    package is found before anything of the same name installed in the environment."""
    for entry in reversed([str(p) for p in path]):
        if entry in sys.path:
            sys.path.remove(entry)
        sys.path.insert(0, entry)


def load_job(class_path: str, path: Sequence[str | Path] = ()) -> type[Job]:
    """Import ``"module:Class"``, a `Job` subclass (the daemon, Spark executors, audit).

    Args:
        class_path: `[job] class`.
        path: `[job] path`, resolved: directories searched first (see `add_job_path`).

    Raises:
        JobLoadError: not importable, or not a Job subclass.
    """
    add_job_path(path)
    module_name, _, name = class_path.partition(":")
    try:
        job_class = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise JobLoadError(f"cannot import job class {class_path!r}: {exc}") from None
    if not (isinstance(job_class, type) and issubclass(job_class, Job)):
        raise JobLoadError(f"{class_path!r} is not a processor.Job subclass")
    return job_class


def new_job(job_class: type[Job], context: Context) -> Job:
    """An instance of `job_class` for one task and role: `params` set, `setup` called."""
    job = job_class()
    job.params = MappingProxyType(dict(context.params))
    job.setup(context)
    return job
