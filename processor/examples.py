"""Jobs shipped with Baton: the demo's running sum, and jobs the tests use."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from processor.job import Emitted, Job, Output, Record, State

__all__ = ["Discard", "IdentifiedSum", "KeyStats", "PacedSum", "ResettableSum", "RunningSum",
           "StampedSum"]


class Discard(Job):
    """Reads nothing, writes nothing, yields nothing: run by `bench/processor_rates.py`,
    what a task costs per record is the framework's own (its floor, before user code)."""

    def process(self, record: Record, state: State) -> Iterable[Emitted]:
        return ()


class RunningSum(Job):
    """Per key, the sum of the integer values seen so far (the demo's main job)."""

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        if record.key is None or record.value is None:
            raise ValueError(f"RunningSum needs a key and an integer value, got {record!r}")
        total = state.get(record.key, 0) + int(record.value)
        state[record.key] = total
        yield record.key, str(total)

    def process_batch(self, records: Sequence[Record], state: State) -> list[tuple[Emitted]]:
        """process() over consecutive records, reading and writing each key's state
        once: the running totals are kept in a dict meanwhile. The same outputs, the
        same state afterwards; a record without key or integer value raises before the
        state is written (the runtime then goes record by record). A subclass that
        overrides `process` gets the default, `process` per record: the batch must not
        bypass what it changed."""
        if type(self).process is not RunningSum.process:
            return [tuple(out) for out in Job.process_batch(self, records, state)]  # type: ignore[misc]
        totals: dict[Any, int] = {}
        outputs: list[tuple[Emitted]] = []
        append, known, read = outputs.append, totals.get, state.get
        for record in records:
            key, value = record.key, record.value
            if key is None or value is None:
                raise ValueError(f"RunningSum needs a key and an integer value, got {record!r}")
            total = known(key)
            total = (read(key, 0) if total is None else total) + int(value)
            totals[key] = total
            append(((key, str(total)),))
        for key, total in totals.items():
            state[key] = total
        return outputs


class StampedSum(RunningSum):
    """RunningSum whose outputs carry the time they were computed instead of the input's
    timestamp: the demo and the benches measure a handoff's pause as the largest gap
    between the output timestamps of the moved task's keys (orchestrator/devkit/
    pauses.py, bench/vs_common.py), which input timestamps, evenly spread by a steady
    producer, would hide."""

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        for out in super().process(record, state):
            key, value = out    # type: ignore[misc]    # RunningSum yields pairs only
            yield Output(key, value, timestamp=time.time_ns() // 1_000_000)


class PacedSum(RunningSum):
    """RunningSum that costs a fixed `SECONDS_PER_RECORD` per record: one processor
    serves about 1 / SECONDS_PER_RECORD records/s whatever the machine (2,000), so the
    autoscaling tests load a job past one processor with a modest producer. (A cost
    much higher would hold the main loop for seconds per batch of 5,000 records.) Run it with
    catch_up.source = "changelog": replicas then apply the changelog and never call
    `process()`, so only the active tasks pay the cost and a catch-up stays fast."""

    SECONDS_PER_RECORD = 0.0005

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        time.sleep(self.SECONDS_PER_RECORD)
        return super().process(record, state)


class ResettableSum(Job):
    """RunningSum where a value of 0 forgets the key (its state is deleted): a job whose
    changelog carries deletes (tombstones)."""

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        if record.key is None or record.value is None:
            raise ValueError(f"ResettableSum needs a key and an integer value, got {record!r}")
        if int(record.value) == 0:
            state.pop(record.key, None)
            yield record.key, "0"
            return
        total = state.get(record.key, 0) + int(record.value)
        state[record.key] = total
        yield record.key, str(total)


class IdentifiedSum(Job):
    """Per key, a random id drawn the first time the key is seen, and the running sum;
    outputs "<id>:<sum>".

    Its state is not a function of its input (uuid4): replaying the input gives every
    key a new id, so only catch_up.source = "changelog" moves it to another processor
    intact (processor/oracle.py's `check_identified_sums` checks one id per key).
    """

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        if record.key is None or record.value is None:
            raise ValueError(f"IdentifiedSum needs a key and an integer value, got {record!r}")
        known = state.get(record.key)
        ident, total = (uuid.uuid4().hex, 0) if known is None else known
        total += int(record.value)
        state[record.key] = [ident, total]
        yield record.key, f"{ident}:{total}"


class KeyStats(Job):
    """Per key, the count and the sum of the integer values seen so far, as one dict:
    `bench/processor_rates.py --job processor.examples:KeyStats` measures the state's
    path for lists and dicts with it (a read, a change, an assignment per record)."""

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        if record.key is None or record.value is None:
            raise ValueError(f"KeyStats needs a key and an integer value, got {record!r}")
        stats = state.get(record.key) or {"n": 0, "sum": 0}
        stats["n"] += 1
        stats["sum"] += int(record.value)
        state[record.key] = stats
        yield record.key, f"{stats['n']}:{stats['sum']}"
