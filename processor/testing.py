"""Run a job over records in memory, with the task store's exact semantics.

A unit test of a job with a plain dict for its state passes where the store differs
(JSON values: tuples read back as lists, no sets; str and bytes keys distinct; the
transaction overlay; a failed record's writes undone; entries that expire by the
records' timestamps). `JobHarness` runs the job on the real task store
(`store.TaskStore`, RocksDB in a temporary directory), through the same steps the active
task takes: `new_job` (params, `setup`), the state's clock set to each record's
timestamp, `process`, `rollback_record` when it raises, outputs encoded as the producer
gets them (`processor/outputs.py`), a commit every `commit_every` records, `close` at
the end. `send_batch` (and `run_job`, a transaction's records at a time) hands records
to the job as the runtime hands it a poll batch: each run of one partition's records
through `process_batch` at once, and when that raises (or gives not one result per
record) the run undone and processed again record by record.
What the job hands to `context.after_commit` runs at each commit, in order, and is
dropped with a record that raised or an `abort()`; `replaying=True` runs the job as a
replay does (`context.replaying` true, `after_commit` dropped). `context.metrics` is
on `harness.registry` (assert with `registry.get_sample_value`).

    from processor.testing import run_job

    run = run_job(MyJob, [("a", "1"), ("a", "2")], params={"factor": 2})
    assert [o.value for o in run.outputs] == [b"2", b"6"]
    assert run.state == {b"a": 6}
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from types import TracebackType
from typing import Any, Literal

from prometheus_client import CollectorRegistry

from metrics import JobMetricSet
from processor.effects import AfterCommit, TaskHost
from processor.formats import Format, with_formats
from processor.job import Context, Job, Output, Record, new_job
from processor.outputs import encode_output, output_fields
from processor.timed_job import TimedJob, with_timers
from processor.timers import RESERVED, TimerError, Timers, pending_timers
from store import Key, TaskStore

__all__ = ["JobHarness", "Run", "run_job"]

OnError = Literal["fail", "skip"]
# what run_job and send take: a Record, or (key, value), str encoded as UTF-8
Input = Record | tuple[bytes | str | None, bytes | str | None]

_INPUT = "input"           # the input topic records given as pairs are on
_OUTPUT = "output"         # the job's `output` topic, unless given
_PARTITION = attrgetter("topic", "partition")


@dataclass
class Run:
    """What a job did: its outputs (key and value as bytes, as produced; topic and
    timestamp resolved), its committed state, the records it raised on, how many
    after_commit effects ran and what those that raised raised."""

    outputs: list[Output] = field(default_factory=list)
    state: dict[Key, Any] = field(default_factory=dict)
    failed: list[tuple[Record, Exception]] = field(default_factory=list)
    effects: int = 0
    effect_errors: list[Exception] = field(default_factory=list)


class JobHarness:
    """One task of a job on a real task store, fed record by record.

    Args:
        job: the Job subclass (instantiated with `params`, then `setup`) or an instance
            (used as it is: its `setup` is not called).
        params: the `[job.params]` table.
        outputs: the topics an `Output` may name besides `output`.
        on_error: "fail" re-raises what process() raised (after undoing the record's
            writes); "skip" records it in `failed` and goes on.
        commit_every: records per transaction (the daemon commits a poll batch at a time;
            a job whose result depends on it has a bug this exposes).
        key_format, value_format: `[job] key_format` / `value_format`
            (processor/formats.py): records decoded, outputs encoded as the daemon does.
        replaying: run the job as a replay does: `context.replaying` true,
            `after_commit` dropped.
    """

    def __init__(self, job: type[Job] | Job, *, params: Mapping[str, Any] | None = None,
                 output: str = _OUTPUT, outputs: Iterable[str] = (),
                 on_error: OnError = "fail", commit_every: int = 1,
                 task: str = "Partition 0", partitions: Iterable[str] = (f"{_INPUT}:0",),
                 key_format: Format = "bytes", value_format: Format = "bytes",
                 replaying: bool = False) -> None:
        if commit_every < 1:
            raise ValueError(f"commit_every must be >= 1, got {commit_every}")
        self._dir = tempfile.TemporaryDirectory(prefix="baton-testing-")
        self.store = TaskStore(self._dir.name)
        self.registry = CollectorRegistry()
        self.effects = AfterCommit()
        host = TaskHost(JobMetricSet(self.registry, "testing", "testing").task(task),
                        None if replaying else self.effects)
        context = Context("testing", task, tuple(partitions), "testing", "testing",
                          dict(params or {}), host, Timers(wall=True))
        made = new_job(job, context) if isinstance(job, type) else job
        self.job = with_timers(with_formats(made, key_format, value_format),
                               context.timers)
        self.output = output
        self._topics = frozenset({output, *outputs})
        self.on_error: OnError = on_error
        self.commit_every = commit_every
        self.run = Run()
        self._pending = 0
        self._offsets: dict[str, int] = {}
        self._closed = False

    def send(self, item: Input) -> list[Output]:
        """Process one record; its outputs (empty if it raised under "skip").

        Raises:
            Exception: what process() raised, under on_error "fail".
            processor.outputs.OutputError: an output of the wrong shape or topic.
        """
        record = item if isinstance(item, Record) else self._record(item)
        produced = self._process(record)
        if self._pending >= self.commit_every:
            self.commit()
        return produced

    def send_batch(self, items: Iterable[Input]) -> list[list[Output]]:
        """Process records as the runtime processes a poll batch; the outputs of each.

        Each run of consecutive records of one partition goes through the job's
        `process_batch` at once (a run with a record without key, which the runtime
        looks at alone, record by record). If `process_batch` raises or gives not one
        result per record, the run's state writes and effects are undone and its
        records go through `process()` one by one, so `on_error` meets the failing
        record alone. The transaction commits at the end of the batch when
        `commit_every` records or more are pending.

        Raises:
            Exception: what process() raised, under on_error "fail".
            processor.outputs.OutputError: an output of the wrong shape or topic.
        """
        records = list(self._numbered(items))
        produced: list[list[Output]] = []
        for _, run in itertools.groupby(records, _PARTITION):
            produced.extend(self._process_run(list(run)))
        if self._pending >= self.commit_every:
            self.commit()
        return produced

    def _numbered(self, items: Iterable[Input]) -> Iterator[Record]:
        """`items` as records: each pair takes the next offset of "input:0", as `send`
        gives it, though none is processed yet."""
        following = self._offsets.get(f"{_INPUT}:0", 0)
        for item in items:
            if not isinstance(item, Record):
                item = self._record(item, following)
            if (item.topic, item.partition) == (_INPUT, 0):
                following = item.offset + 1
            yield item

    def _process_run(self, run: Sequence[Record]) -> list[list[Output]]:
        """One partition's consecutive records through process_batch (see send_batch)."""
        if any(record.key is None for record in run):
            return [self._process(record) for record in run]
        store = self.store
        store.begin_record()
        self.effects.begin_record()
        try:
            results = list(map(list, self.job.process_batch(run, store.state)))
            if len(results) != len(run):
                raise ValueError(f"process_batch() gave {len(results)} results for "
                                 f"{len(run)} records")
        except Exception:  # noqa: BLE001 - user code: redone one record at a time
            store.rollback_record()
            self.effects.rollback_record()
            return [self._process(record) for record in run]
        produced = []
        for record, yielded in zip(run, results, strict=True):
            produced.append(self._done(record, yielded))
        return produced

    def _process(self, record: Record) -> list[Output]:
        """process() over one record, its writes undone if it raises (on_error)."""
        store = self.store
        store.begin_record()
        self.effects.begin_record()
        store.state.now = record.timestamp
        try:
            yielded = list(self.job.process(record, store.state))
        except Exception as exc:
            store.rollback_record()
            self.effects.rollback_record()
            if self.on_error == "fail" or isinstance(exc, TimerError):  # no record to skip
                raise
            self.run.failed.append((record, exc))
            yielded = []
        return self._done(record, yielded)

    def _done(self, record: Record, yielded: Iterable[object]) -> list[Output]:
        """A processed record's outputs, kept in `run`; its offset is pending."""
        produced = [self._output(out, record) for out in yielded]
        self.run.outputs.extend(produced)
        self._offsets[f"{record.topic}:{record.partition}"] = record.offset + 1
        self._pending += 1
        return produced

    def fire_wall_timers(self, now_ms: int) -> list[Output]:
        """Fire the wall-clock timers due at `now_ms` (ms since the epoch), as the active
        owner does when its clock reaches them: each in the open transaction, its
        outputs stamped `now_ms` unless they say otherwise; their outputs.

        Raises:
            processor.timers.TimerError: on_timer() raised (the processor stops the task).
        """
        if not isinstance(self.job, TimedJob):
            return []
        produced: list[Output] = []
        while True:
            self.store.begin_record()
            self.effects.begin_record()
            fired = self.job.fire_wall(now_ms, self.store.state)
            if fired is None:
                break
            timer, outputs = fired
            stamp = Record(None, None, "", -1, -1, now_ms)
            made = [self._output(out, stamp) for out in outputs]
            self.run.outputs.extend(made)
            produced.extend(made)
            self._pending += 1
        return produced

    def timers(self) -> list[tuple[str, int, Any, str]]:
        """The timers set and not fired yet: (partition, or "wall", time, raw key, name),
        earliest first per partition."""
        return pending_timers(self.store.state.iter_items(remove=False))

    def commit(self) -> None:
        """Commit the open transaction (state and offsets in one write), then run its
        after_commit effects."""
        self.store.commit(self._offsets)
        self._pending = 0
        for fn in self.effects.take():
            self.run.effects += 1
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - kept, as the processor logs it
                self.run.effect_errors.append(exc)

    def abort(self) -> None:
        """Drop the open transaction's state writes and effects (its outputs stay in
        `run`)."""
        self.store.abort()
        self.effects.drop()
        self._pending = 0

    @property
    def state(self) -> dict[Key, Any]:
        """The state, open transaction included, as a job would read it back at the last
        record's time (entries expired by then left out; looking deletes nothing), but
        for its timers (`timers()`)."""
        return {k: v for k, v in self.store.state.iter_items(remove=False)
                if not (isinstance(k, bytes) and k.startswith(RESERVED))}

    def close(self) -> Run:
        """Commit, call the job's `close`, keep the state in `run`, drop the store."""
        if not self._closed:
            self._closed = True
            try:
                self.commit()
                self.run.state = self.state
                self.job.close()
            finally:
                self.store.close()
                self._dir.cleanup()
        return self.run

    def __enter__(self) -> JobHarness:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _record(self, pair: tuple[bytes | str | None, bytes | str | None],
                offset: int | None = None) -> Record:
        key, value = pair
        if offset is None:
            offset = self._offsets.get(f"{_INPUT}:0", 0)
        return Record(encode_output(key), encode_output(value), _INPUT, 0, offset, offset + 1)

    def _output(self, out: object, record: Record) -> Output:
        topic, key, value, headers, when = output_fields(out, self.output, self._topics)
        return Output(key, value, headers, record.timestamp if when is None else when, topic)


def run_job(job: type[Job] | Job, records: Iterable[Input], **options: Any) -> Run:
    """Run `job` over `records` on a fresh task store (see `JobHarness` for `options`),
    a transaction (`commit_every` records) at a time through `send_batch`, as the
    runtime hands the job a poll batch; pairs become records of topic "input",
    partition 0, offsets 0, 1, ... and timestamps 1, 2, ...

    Raises:
        Exception: what process() raised, under on_error "fail" (the default).
    """
    with JobHarness(job, **options) as harness:
        batches = iter(records)
        while batch := list(itertools.islice(batches, harness.commit_every)):
            harness.send_batch(batch)
        return harness.close()
