"""The coordinator stream on a real broker: persist/reload, tombstones, fencing."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from orchestrator.kafka.stream import CoordinatorStream, FencedError, StreamError, stream_topic
from orchestrator.kafka.topics import TopicAdmin

pytestmark = pytest.mark.integration


@pytest.fixture
def open_stream(broker, unique: Callable[[str], str]):
    job = unique("job")
    admin = TopicAdmin(broker.settings(), f"baton.{job}")
    admin.ensure_compacted(stream_topic(job))
    admin.close()
    opened: list[CoordinatorStream] = []

    def make() -> tuple[CoordinatorStream, dict]:
        stream = CoordinatorStream(broker.settings(), job)
        opened.append(stream)
        return stream, stream.open()

    yield make
    for stream in opened:
        stream.close()


def test_empty_stream_loads_empty(open_stream) -> None:
    _, state = open_stream()
    assert state == {}


def test_persist_and_reload_last_value_wins(open_stream) -> None:
    first, _ = open_stream()
    first.write({"model": {"generation": 1}, "processor/p1": {"execution_id": "a"}})
    first.write({"model": {"generation": 2}, "handoff/Partition 0": {"phase": "releasing"}})
    first.write({"processor/p1": None})
    first.close()
    _, state = open_stream()
    assert state == {"model": {"generation": 2},
                     "handoff/Partition 0": {"phase": "releasing"}}


def test_a_write_that_fails_outside_kafka_leaves_no_transaction_open(open_stream) -> None:
    """A value that cannot be encoded fails the write after its transaction began; the
    next writes go through (before, librdkafka refused every one of them: "Operation
    not valid in state InTransaction"), and nothing of the failed one is visible."""
    stream, _ = open_stream()
    stream.write({"model": {"generation": 1}})
    with pytest.raises(TypeError):
        stream.write({"processor/p1": {"execution_id": "a"}, "model": {"bad": object()}})
    stream.write({"model": {"generation": 2}})
    stream.close()
    _, state = open_stream()
    assert state == {"model": {"generation": 2}}


def test_a_marker_refused_at_once_leaves_no_transaction_open(open_stream, broker,
                                                            unique) -> None:
    """produce() of a marker to a partition the producer's metadata does not hold yet
    (just added by an expansion) fails inside the transaction; it is aborted, so the
    stream's next write goes through, and the state written with the markers is not."""
    topic = broker.create_topic(unique("events"), 1)
    stream, _ = open_stream()
    # a first marker: the producer now holds the topic's metadata (one partition)
    assert set(stream.write_markers({f"{topic}:0": [f"{topic}:1"]}, {topic: 2},
                                    lambda offsets: {"model": {"generation": 1}})) \
        == {f"{topic}:0"}
    with pytest.raises(StreamError, match="Unknown partition"):
        stream.write_markers({f"{topic}:5": [f"{topic}:9"]}, {topic: 10},
                             lambda offsets: {"model": {"generation": 7}})
    stream.write({"model": {"generation": 2}})
    stream.close()
    _, state = open_stream()
    assert state == {"model": {"generation": 2}}


def test_a_marker_on_a_partition_just_added_is_written_at_a_later_attempt(
        open_stream, broker, unique) -> None:
    """An attempt that meets the producer's metadata of before the growth fails as a
    whole ("Unknown partition", nothing written); the producer learns the partition in
    the background, and a later attempt (the daemon's next turn) writes the marker."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    topic = broker.create_topic(unique("events"), 1)
    stream, _ = open_stream()
    stream.write_markers({f"{topic}:0": [f"{topic}:1"]}, {topic: 2},
                         lambda offsets: {"model": {"generation": 1}})
    admin = AdminClient(broker.settings())
    for future in admin.create_partitions([NewPartitions(topic, 2)]).values():
        future.result(30)
    written: dict[str, int] = {}
    deadline = time.monotonic() + 30        # a loaded machine's metadata refresh
    while not written and time.monotonic() < deadline:
        try:
            written = stream.write_markers({f"{topic}:1": [f"{topic}:3"]}, {topic: 4},
                                           lambda offsets: {"model": {"generation": 2}})
        except StreamError as exc:
            assert "Unknown partition" in str(exc)
            time.sleep(0.5)
    assert set(written) == {f"{topic}:1"}
    stream.close()
    _, state = open_stream()
    assert state == {"model": {"generation": 2}}


def test_second_coordinator_fences_the_first(open_stream) -> None:
    first, _ = open_stream()
    first.write({"model": {"generation": 1}})
    second, state = open_stream()
    assert state == {"model": {"generation": 1}}
    with pytest.raises(FencedError, match="another coordinator took over"):
        first.write({"model": {"generation": 99}})
    second.write({"model": {"generation": 2}})
    _, state = open_stream()
    assert state == {"model": {"generation": 2}}


def test_admin_counts_and_offsets(broker, unique) -> None:
    topic = broker.create_topic(unique("in"), 2)
    producer = broker.producer()
    for _ in range(5):
        producer.produce(topic, key=b"k", value=b"1", partition=1)
    producer.flush(10)
    admin = TopicAdmin(broker.settings(), unique("group"))
    try:
        assert admin.partition_counts([topic]) == {topic: 2}
        marks = admin.watermarks([f"{topic}:0", f"{topic}:1"])
        assert (marks[f"{topic}:0"].high, marks[f"{topic}:1"].high) == (0, 5)
        assert admin.committed([f"{topic}:1"]) == {}
        admin.create_partitions(topic, 4)
        assert admin.partition_counts([topic]) == {topic: 4}
    finally:
        admin.close()


def test_admin_sees_partitions_added_after_it_started(broker, unique) -> None:
    topic = broker.create_topic(unique("grow"), 1)
    admin = TopicAdmin(broker.settings(), unique("group"))
    try:
        assert admin.watermarks([f"{topic}:0"])[f"{topic}:0"].high == 0
        admin.create_partitions(topic, 2)
        assert admin.watermarks([f"{topic}:1"])[f"{topic}:1"].high == 0
    finally:
        admin.close()


def test_an_abort_cut_short_by_a_broker_restart_is_finished_by_the_next_write(
        restartable_broker, unique: Callable[[str], str]) -> None:
    """An abort that timed out while the broker was away goes on inside librdkafka, which
    refuses every other transactional call until abort_transaction is called again: the
    next write must finish it, or the coordinator never writes its stream again."""
    import time

    from confluent_kafka import KafkaException

    from orchestrator.kafka.stream import StreamError

    broker = restartable_broker
    job = unique("job")
    admin = TopicAdmin(broker.settings(), f"baton.{job}")
    admin.ensure_compacted(stream_topic(job))
    admin.close()
    stream = CoordinatorStream(broker.settings(), job)
    try:
        stream.open()
        stream.write({"model": {"generation": 1}})
        producer = stream._producer
        assert producer is not None
        producer.begin_transaction()
        producer.produce(stream.topic, key=b"half", value=b"{}")
        producer.flush(10)
        broker.local.stop()
        with pytest.raises(KafkaException):
            stream._abort(producer)             # times out: the broker is away
        broker.local.start()
        deadline = time.monotonic() + 90
        while True:                             # the coordinator's loop retries so
            try:
                stream.write({"model": {"generation": 2}})
                break
            except StreamError as exc:
                assert time.monotonic() < deadline, exc
                time.sleep(1)
    finally:
        stream.close()
    reader = CoordinatorStream(broker.settings(), job)
    try:
        assert reader.open() == {"model": {"generation": 2}}
    finally:
        reader.close()


def test_a_tail_waits_for_a_stream_its_broker_does_not_know_yet(broker, unique) -> None:
    """A broker of a cluster learns a topic another broker created a moment later, and
    answers UNKNOWN_PARTITION meanwhile: the tail of a coordinator starting then asks
    again until its deadline instead of failing the start (here: the topic is created
    a second after the tail first asks)."""
    import threading

    from orchestrator.kafka.stream import StreamTail

    job = unique("job")
    admin = TopicAdmin(broker.settings(), f"baton.{job}")
    later = threading.Timer(1.0, lambda: admin.ensure_compacted(stream_topic(job)))
    tail = StreamTail(broker.settings(), job)
    later.start()
    try:
        tail.catch_up(30)
        assert tail.at_end and tail.leader() is None
    finally:
        later.join()
        admin.close()
        tail.close()
