"""Input the broker no longer holds: a replay from the input never builds a suffix.

A replica rebuilds a task's state by replaying the input through process(), from its
start S to the owner's committed offset T1 (processor/replica.py). S is, per partition,
the store's checkpoint (T2) when the store has one, else the partition's first retained
offset at the moment the replica starts (a brand-new job starts there too,
orchestrator/kafka/offsets.py). The replica *needs* [S, T1): every record in it went into
the owner's state. When the broker's first offset on the partition (its low watermark
L, moved by retention or DeleteRecords) is above S while S < T1, the records [S, L) are
gone, and a replay from L would build a state the owner never had (a suffix of its
history). That is refused, loudly, wherever a replay would start or go on:

- at the replica's start, from its store's checkpoint (`check_retained`);
- while it runs: the replay consumers have `auto.offset.reset = error`, so a fetch below
  L is an error message, not a silent jump to L (`OffsetOutOfRange`, raised from the
  replica's loop and turned into `InputTrimmedError` by the runtime);
- on the Spark path, by the reader (processor/spark/reader.py) before it reads a range.

The task then fails (reported as failed, never caught up; counted in
`baton_catchup_gap_errors_total`, alert BatonInputTrimmed). The way out is a source
that still holds the state: `[catch_up] source = "changelog"`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

__all__ = ["InputTrimmedError", "OffsetOutOfRange", "check_retained", "trimmed_message"]


def trimmed_message(partition: str, needed: int, first: int, task: str = "") -> str:
    """The error a replay from the input gives when `partition` starts past `needed`."""
    who = f"task {task!r}: " if task else ""
    return (f"{who}input partition {partition} no longer holds offset {needed}: its first "
            f"offset still there is {first} (retention or DeleteRecords removed "
            f"[{needed}, {first})), and the task's state includes those records. Replaying "
            f"from {first} would build the state from a suffix of its input, so the replay "
            "stops here. Switch the job to the changelog source ([catch_up] source = "
            "\"changelog\"), which rebuilds the state from the task's changelog, or give "
            "the input a longer retention.")


class InputTrimmedError(Exception):
    """A replay from the input needs records the broker no longer holds."""

    def __init__(self, partition: str, needed: int, first: int, task: str = "") -> None:
        super().__init__(trimmed_message(partition, needed, first, task))
        self.partition, self.needed, self.first, self.task = partition, needed, first, task


class OffsetOutOfRange(Exception):
    """A replay consumer's fetch of `partition` at `offset` is below (or past) what the
    broker holds (librdkafka's _AUTO_OFFSET_RESET under auto.offset.reset = error)."""

    def __init__(self, partition: str, offset: int, reason: str) -> None:
        super().__init__(f"{partition} offset {offset}: {reason}")
        self.partition, self.offset = partition, offset


def check_retained(task: str, starts: Mapping[str, int], caps: Mapping[str, int],
                   low_watermark: Callable[[str], int]) -> None:
    """Refuse a replay of `task` whose start is no longer on the broker.

    Args:
        task: the task, for the message.
        starts: S per partition, where the replay begins (only those to check: the
            store's checkpoints).
        caps: T1 per partition; a partition with S >= T1 needs nothing and is not looked up.
        low_watermark: the partition's first retained offset (a broker lookup).

    Raises:
        InputTrimmedError: a partition's first offset is above S while S < T1.
    """
    for partition, start in starts.items():
        if start >= caps.get(partition, 0):
            continue
        first = low_watermark(partition)
        if first > start:
            raise InputTrimmedError(partition, start, first, task)
