"""Producing what an active task's job yields, inside the task's open transaction.

`Emitter.emit` takes a batch: the records and, aligned with them, what the job
yielded for each (`Job.process_batch`), and produces every output with its record's
timestamp. `(key, value)` pairs of bytes or str (nearly every job's) take an inlined
path; an `Output` is checked and encoded by processor/outputs.py. A record that
process() failed on goes to the dead-letter topic through `produce` too, and a record
misrouted past an expansion barrier to its child partition through `forward`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from orchestrator.kafka.retry import kafka_error
from orchestrator.wire.barrier import FORWARDED_HEADER
from orchestrator.wire.partitions import split_partition
from processor.job import Emitted, Record
from processor.outputs import OutputError, encode_output, output_fields

__all__ = ["Emitter", "OnBadOutput"]

# who hears of a record whose outputs did not check (none of them produced)
OnBadOutput = Callable[[Record, Exception], None]

# local queue full: how long to let deliveries drain before producing again
_FULL_QUEUE_WAIT_S = 0.05
# a forward to a partition the producer's metadata lacks refreshes it at most this often
_FORWARD_METADATA_TRIES = 3
_METADATA_TIMEOUT_S = 10.0


class Emitter:
    """Produces one active task's outputs to its producer (the task owns the
    transaction around them).

    Raises (from every method): OutputError for an Output to an undeclared topic or
    something that is no output at all; KafkaException from the producer.
    """

    def __init__(self, producer: Producer, output_topic: str,
                 outputs: Sequence[str] = ()) -> None:
        self.producer = producer
        self.output_topic = output_topic
        # where an Output may go: `output` and `[job] outputs`
        self.output_topics = frozenset({output_topic, *outputs})

    def emit(self, records: Sequence[Record], results: Sequence[Sequence[Emitted]],
             on_bad: OnBadOutput) -> None:
        """Produce `results[i]`, the outputs of `records[i]`, for every record; they
        carry its timestamp (0, "now", when it has none).

        A record whose outputs from its first `Output` on do not check is handed to
        `on_bad` with none of them produced when that `Output` was its first output.

        Raises:
            OutputError: a record's outputs did not check after some of its plain
                pairs were produced.
        """
        produce, output_topic = self.producer.produce, self.output_topic
        for record, outputs in zip(records, results, strict=True):
            if not outputs:
                continue
            timestamp = record.timestamp
            if timestamp < 0:
                timestamp = 0
            for index, out in enumerate(outputs):
                if out.__class__ is not tuple:              # an Output (processor/outputs.py)
                    self._produce_outputs(record, outputs, index, timestamp, on_bad)
                    break
                key, value = out
                # encode_output, inlined for the exact types jobs yield (utf-8)
                if key.__class__ is str:
                    key = key.encode()
                elif key is not None and key.__class__ is not bytes:
                    key = encode_output(key)
                if value.__class__ is str:
                    value = value.encode()
                elif value is not None and value.__class__ is not bytes:
                    value = encode_output(value)
                # positional: the C extension parses them cheaper than keywords, and
                # this runs per record (docs/performance.md, "Measurements behind the
                # code"); confluent-kafka's order is
                # (topic, value, key, partition, on_delivery, callback, timestamp)
                try:
                    produce(output_topic, value, key, -1, None, None, timestamp)
                except BufferError:
                    self.produce(output_topic, key, value, timestamp=timestamp)

    def emit_one(self, record: Record, outputs: Sequence[Emitted],
                 on_bad: OnBadOutput) -> None:
        """Produce the outputs of one record."""
        self.emit((record,), (outputs,), on_bad)

    def _produce_outputs(self, record: Record, outputs: Sequence[Emitted], start: int,
                         timestamp: int, on_bad: OnBadOutput) -> None:
        """Produce a record's outputs from `start`, its first that is not a `(key,
        value)` tuple: each `Output` to its own topic, with its headers and timestamp
        where given. All are checked before any is produced."""
        try:
            fields = [output_fields(out, self.output_topic, self.output_topics)
                      for out in outputs[start:]]
        except OutputError as exc:
            if start:
                raise
            on_bad(record, exc)
            return
        for topic, key, value, headers, when in fields:
            self.produce(topic, key, value, headers, timestamp if when is None else when)

    def produce(self, topic: str, key: bytes | None, value: bytes | None,
                headers: Sequence[tuple[str, bytes | None]] | None = None,
                timestamp: int = 0) -> None:
        """One record, waiting for room in the local queue while it is full."""
        produce: Callable[..., None] = self.producer.produce
        while True:
            try:
                produce(topic, key=key, value=value, headers=headers, timestamp=timestamp)
                return
            except BufferError:
                self.producer.poll(_FULL_QUEUE_WAIT_S)

    def forward(self, msg: Message, origin: str, child: str) -> None:
        """`msg` unchanged to the partition `child`, marked as forwarded from `origin`
        ("topic:N@offset", see orchestrator/wire/barrier.py)."""
        topic, number = split_partition(child)
        kind, timestamp = msg.timestamp()
        headers = [*(msg.headers() or ()), (FORWARDED_HEADER, origin.encode())]
        refreshed = 0
        while True:
            try:
                self.producer.produce(topic, value=msg.value(), key=msg.key(), partition=number,
                                      timestamp=timestamp if kind else 0, headers=headers)
                return
            except BufferError:     # a full local queue drains: wait, it is no failure
                self.producer.poll(_FULL_QUEUE_WAIT_S)
            except KafkaException as exc:
                # the producer was made before the expansion: its metadata lacks the new
                # partitions until it is refreshed (librdkafka answers at once, locally)
                err = kafka_error(exc)
                if err is None or err.code() != KafkaError._UNKNOWN_PARTITION \
                        or refreshed == _FORWARD_METADATA_TRIES:
                    raise
                refreshed += 1
                self.producer.list_topics(topic, _METADATA_TIMEOUT_S)
