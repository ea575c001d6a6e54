"""`baton audit`: recompute a deterministic job's output from its input and compare.

Theory of operation: the input is read with the bulk path's reader (read_committed) and
replayed through the job's `process()`, keeping the outputs this time, each tagged with
its input position. With one input topic, each partition is replayed in offset order on
its own state, exactly as the processor owning that partition's task does (one Spark
task per partition). With several input topics a key's state spans partitions, so the
records are shuffled by key and each key is folded in (input order, offset) order, as
the bulk path's shuffle plan does. The output topic is read with the same reader, so
aborted outputs do not count. Expected and actual records are then shuffled together by
output key, and each key's two sequences are compared on the executors: equal, or
counts of missing, duplicated and wrong values and the first index where they diverge.
Only totals and a few examples travel back to the driver.

Audit a quiesced job: outputs of input records still in flight count as missing.
An output key fed by several input partitions has no single correct interleaving; its
expected sequence follows the input order of `job.inputs` and partition numbers, so
such a key can report a reordering that is not a fault.
"""

from __future__ import annotations

import functools
import heapq
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from orchestrator.wire.config import Config
from processor.job import Job, Record
from processor.outputs import output_fields
from processor.spark import (
    Chunk,
    FoldState,
    SparkError,
    key_partition,
    load_job,
    plan_chunks,
    read_range,
    spark_failure,
    without_markers,
)
from processor.spark.code import JobCodeError, ship_job_code
from processor.spark.plans import group_chunks

__all__ = ["AuditError", "AuditReport", "KeyDiff", "audit", "compare_sequences"]

# Differing keys shown in full; the counts cover every key.
MAX_EXAMPLES = 10
# Records per audit reduce task (a task holds its keys' sequences in memory).
RECORDS_PER_REDUCE = 1_000_000
# How long to wait for a watermark answer from the broker.
METADATA_TIMEOUT_S = 30.0

_EXPECTED, _ACTUAL = 0, 1


class AuditError(SparkError):
    """The audit could not run (input not retained, broker or Spark failure)."""


@dataclass(frozen=True)
class KeyDiff:
    """How one key's actual output sequence differs from the expected one."""

    key: str
    expected: int
    actual: int
    missing: int
    duplicated: int
    wrong: int
    first_divergence: int
    expected_value: str | None
    actual_value: str | None


@dataclass
class AuditReport:
    """Totals over every key, plus up to MAX_EXAMPLES differing keys."""

    keys: int = 0
    expected: int = 0
    actual: int = 0
    missing: int = 0
    duplicated: int = 0
    wrong: int = 0
    reordered: int = 0  # keys with the right values in the wrong order
    differing: int = 0  # keys whose sequences differ at all
    examples: list[KeyDiff] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.differing == 0

    def to_json(self) -> dict[str, Any]:
        """The `--json` object."""
        out = {name: getattr(self, name) for name in (
            "keys", "expected", "actual", "missing", "duplicated", "wrong", "reordered",
            "differing")}
        return {**out, "ok": self.ok, "examples": [asdict(e) for e in self.examples]}


def compare_sequences(expected: list[bytes | None], actual: list[bytes | None]
                      ) -> tuple[int, int, int, int]:
    """(missing, duplicated, wrong, first divergence) of two value sequences.

    missing: expected values absent from `actual` (counted with multiplicity);
    duplicated: extra copies of expected values; wrong: values never expected;
    first divergence: the first index where they differ (-1 when equal).
    """
    if expected == actual:
        return 0, 0, 0, -1
    want, got = Counter(expected), Counter(actual)
    extra = got - want
    missing = sum((want - got).values())
    duplicated = sum(n for value, n in extra.items() if value in want)
    wrong = sum(n for value, n in extra.items() if value not in want)
    first = next((i for i, (e, a) in enumerate(zip(expected, actual, strict=False)) if e != a),
                 min(len(expected), len(actual)))
    return missing, duplicated, wrong, first


def audit(spark: Any, config: Config, *, max_examples: int = MAX_EXAMPLES) -> AuditReport:
    """Compare the job's output topic with the output recomputed from its inputs.

    Raises:
        ValueError: the job class cannot be imported (the caller names `job.class`).
        AuditError: an input is not retained from offset 0, or Spark/Kafka failed.
    """
    load_job(config.job.class_, config.job_path)
    if (config.job.key_format, config.job.value_format) != ("bytes", "bytes"):
        raise AuditError(f"{config.path}: job.key_format / job.value_format: the audit "
                         f"replays the job on raw bytes; a job with formats other than "
                         f"bytes cannot be audited")
    try:
        ship_job_code(spark.sparkContext, config.job_path)
    except JobCodeError as exc:
        raise AuditError(str(exc)) from None
    settings = config.kafka_settings()
    inputs = _ranges(settings, config.job.inputs)
    trimmed = [f"{name} starts at {lo}" for name, (lo, _) in inputs.items() if lo > 0]
    if trimmed:
        raise AuditError(f"cannot recompute the output of job {config.job.name}: input "
                         f"retention dropped records ({', '.join(trimmed)})")
    outputs = _ranges(settings, [config.job.output])
    try:
        return _run(spark.sparkContext, config.job.class_, settings, inputs, outputs,
                    max_examples)
    except Exception as exc:  # noqa: BLE001 - py4j/pyspark raise many types for a job
        raise AuditError(f"audit of job {config.job.name} failed: {spark_failure(exc)}"
                         ) from exc


def _ranges(settings: Mapping[str, Any], topics: list[str]) -> dict[str, tuple[int, int]]:
    """{"topic:N": (log start, last stable offset)} of every partition of `topics`."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({**settings, "group.id": "baton.audit",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        out = {}
        for topic in topics:
            meta = consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S).topics[topic]
            if meta.error is not None or not meta.partitions:
                raise AuditError(f"topic {topic}: {meta.error or 'no partitions'}")
            for p in sorted(meta.partitions):
                out[f"{topic}:{p}"] = consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=METADATA_TIMEOUT_S, cached=False)
        return out
    except KafkaException as exc:
        raise AuditError(f"cannot read offsets of {', '.join(topics)}: {exc}") from exc
    finally:
        consumer.close()


def _run(sc: Any, job_class_path: str, settings: Mapping[str, Any],
         inputs: dict[str, tuple[int, int]], outputs: dict[str, tuple[int, int]],
         max_examples: int) -> AuditReport:
    in_chunks, out_chunks = plan_chunks(inputs), plan_chunks(outputs)
    total = sum(hi - lo for lo, hi in [*inputs.values(), *outputs.values()])
    reduces = max(sc.defaultParallelism, -(-total // RECORDS_PER_REDUCE))
    read = sc.parallelize(in_chunks, max(len(in_chunks), 1))
    if len({c.topic for c in in_chunks}) <= 1:
        expected = read.mapPartitions(functools.partial(_replayed_outputs, job_class_path,
                                                        dict(settings)))
    else:
        by_order = {c.order: c for c in in_chunks}
        expected = (read.mapPartitions(functools.partial(group_chunks, dict(settings), "input",
                                                         None, None))
                    .partitionBy(reduces, key_partition)
                    .mapPartitions(functools.partial(_folded_outputs, job_class_path, by_order)))
    actual = (sc.parallelize(out_chunks, max(len(out_chunks), 1))
              .mapPartitions(functools.partial(_actual_outputs, dict(settings))))
    summaries = (expected.union(actual).partitionBy(reduces, key_partition)
                 .mapPartitions(functools.partial(_compare_partition, max_examples))
                 .collect())
    return _merge(summaries, max_examples)


def _tagged(job: Job, record: Record, state: FoldState, order: int
            ) -> Iterator[tuple[Any, Any]]:
    """The outputs of one record as (output key, (tag, input position, value)).

    A record whose process() raises has no output and its state writes are undone, as
    an owner with on_error skip or dlq handles it (with fail, the owner stops there and
    the audit reports every later output missing).
    """
    state.begin()
    state.now = record.timestamp
    try:
        outputs = list(job.process(record, state) or ())
    except Exception:  # noqa: BLE001 - user code, see the docstring
        state.rollback()
        return
    for i, out in enumerate(outputs):
        topic, out_key, out_value, _, _ = output_fields(out, _OUTPUT, _ANY_TOPIC)
        if topic == _OUTPUT:        # the audit compares the job's `output` topic only
            yield out_key, (_EXPECTED, (order, record.offset, i), out_value)


class _AnyTopic:
    """Every topic: the audit follows outputs wherever the job sent them."""

    def __contains__(self, topic: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


_OUTPUT = "\x00output"     # stands for the job's output topic (no topic is named so)
_ANY_TOPIC = _AnyTopic()


def _replayed_outputs(job_class_path: str, settings: Mapping[str, Any],
                      chunks: Iterable[Chunk]) -> Iterator[tuple[Any, Any]]:
    """One input topic: replay each partition in offset order on its own state."""
    job = load_job(job_class_path)()
    for chunk in chunks:
        state = FoldState()
        for msg in without_markers(read_range(settings, chunk.topic, chunk.partition,
                                              chunk.start, chunk.end), "", refuse=False):
            record = Record(msg.key(), msg.value(), chunk.topic, chunk.partition,
                            msg.offset(), msg.timestamp()[1], msg.headers() or ())
            yield from _tagged(job, record, state, chunk.order)


def _folded_outputs(job_class_path: str, chunks: Mapping[int, Chunk],
                    pieces: Iterable[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
    """Several input topics: fold each key in (input order, offset) order."""
    groups: dict[Any, list[Any]] = {}
    for key, piece in pieces:
        groups.setdefault(key, []).append(piece)
    job = load_job(job_class_path)()
    for key, found in groups.items():
        state = FoldState()
        for order, _, rows in sorted(found, key=lambda piece: (piece[0], piece[1])):
            chunk = chunks[order]
            for offset, value, timestamp, headers in rows:
                record = Record(key, value, chunk.topic, chunk.partition, offset, timestamp,
                                headers)
                yield from _tagged(job, record, state, order)


def _actual_outputs(settings: Mapping[str, Any], chunks: Iterable[Chunk]
                    ) -> Iterator[tuple[Any, Any]]:
    for chunk in chunks:
        for msg in read_range(settings, chunk.topic, chunk.partition, chunk.start, chunk.end):
            yield msg.key(), (_ACTUAL, (chunk.order, msg.offset(), 0), msg.value())


def _compare_partition(max_examples: int, tagged: Iterable[tuple[Any, Any]]
                       ) -> Iterator[AuditReport]:
    """One reduce task's totals and its first differing keys (by key)."""
    sides: dict[Any, tuple[list[Any], list[Any]]] = {}
    for key, (tag, position, value) in tagged:
        sides.setdefault(key, ([], []))[tag].append((position, value))
    report = AuditReport(keys=len(sides))
    diffs: list[KeyDiff] = []
    for key, (want, got) in sides.items():
        expected = [value for _, value in sorted(want, key=lambda item: item[0])]
        actual = [value for _, value in sorted(got, key=lambda item: item[0])]
        report.expected += len(expected)
        report.actual += len(actual)
        missing, duplicated, wrong, first = compare_sequences(expected, actual)
        if first < 0:
            continue
        report.differing += 1
        report.missing, report.duplicated = report.missing + missing, report.duplicated + duplicated
        report.wrong += wrong
        report.reordered += not (missing or duplicated or wrong)
        diffs.append(KeyDiff(_text(key), len(expected), len(actual), missing, duplicated,
                             wrong, first, _at(expected, first), _at(actual, first)))
    report.examples = heapq.nsmallest(max_examples, diffs, key=lambda d: d.key)
    yield report


def _merge(parts: list[AuditReport], max_examples: int) -> AuditReport:
    total = AuditReport()
    for part in parts:
        for name in ("keys", "expected", "actual", "missing", "duplicated", "wrong",
                     "reordered", "differing"):
            setattr(total, name, getattr(total, name) + getattr(part, name))
    total.examples = heapq.nsmallest(
        max_examples, (e for part in parts for e in part.examples), key=lambda d: d.key)
    return total


def _text(value: bytes | None) -> str:
    return "<null>" if value is None else value.decode("utf-8", "backslashreplace")


def _at(values: list[bytes | None], index: int) -> str | None:
    return _text(values[index]) if index < len(values) else None
