"""A processor's consumers: grouping a replay batch by task (runs are taken whole only
when that is safe), and the bounds on what each consumer fetches ahead of its polls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.wire.clock import SystemClock
from orchestrator.wire.config import load_config
from processor.runtime.batches import by_task, ends_of, replay_by_task
from processor.runtime.consumers import FETCH_BOUNDS

OWNERS = {"a:0": "t0", "a:1": "t1", "b:0": "t2"}


def _msg(topic: str, partition: int, offset: int) -> Message:
    return Message(topic=topic, partition=partition, offset=offset, key=b"k", value=b"v")


def _seen(grouped: dict[str, list[Message]]) -> dict[str, list[tuple[str, int, int]]]:
    return {task: [(m.topic(), m.partition(), m.offset()) for m in msgs]
            for task, msgs in grouped.items()}


def test_runs_of_one_partition_go_to_its_task() -> None:
    batch = [_msg("a", 0, 1), _msg("a", 0, 2), _msg("a", 1, 7), _msg("a", 0, 3)]
    assert _seen(by_task(batch, OWNERS.get, lambda m: None)) == {
        "t0": [("a", 0, 1), ("a", 0, 2), ("a", 0, 3)], "t1": [("a", 1, 7)]}


def test_one_partition_number_of_two_topics_is_told_apart() -> None:
    batch = [_msg("a", 0, 1), _msg("b", 0, 50), _msg("a", 0, 2)]
    assert _seen(by_task(batch, OWNERS.get, lambda m: None)) == {
        "t0": [("a", 0, 1), ("a", 0, 2)], "t2": [("b", 0, 50)]}


def test_errors_are_reported_and_left_out() -> None:
    errors: list[Message] = []
    error = Message(topic="a", partition=0, error=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    batch = [_msg("a", 0, 1), error, _msg("a", 0, 2), _msg("c", 0, 9)]   # c:0 has no task
    assert _seen(by_task(batch, OWNERS.get, errors.append)) == {
        "t0": [("a", 0, 1), ("a", 0, 2)]}
    assert errors == [error]


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 1),
                          st.booleans())))
def test_same_as_one_record_at_a_time(records: list[tuple[str, int, bool]]) -> None:
    batch = [Message(topic=t, partition=p, offset=i,
                     error=KafkaError(KafkaError._TRANSPORT) if bad else None)
             for i, (t, p, bad) in enumerate(records)]
    expected: dict[str, list[tuple[str, int, int]]] = {}
    for t, p, bad in records:
        task = OWNERS.get(f"{t}:{p}")
        if not bad and task is not None:
            expected.setdefault(task, [])
    for i, (t, p, bad) in enumerate(records):
        task = OWNERS.get(f"{t}:{p}")
        if not bad and task is not None:
            expected[task].append((t, p, i))
    errors: list[Message] = []
    assert _seen(by_task(batch, OWNERS.get, errors.append)) == expected
    assert len(errors) == sum(bad for _, _, bad in records)


REPLAY = {"cl:0": "t0", "cl:1": "t1", "cl:3": "t3"}       # one topic: numbers name partitions


@given(st.lists(st.tuples(st.sampled_from([0, 1, 2, 3]), st.integers(1, 5)), max_size=12))
def test_replay_grouping_by_number_equals_by_task(runs: list[tuple[int, int]]) -> None:
    batch = [_msg("cl", p, i) for i, (p, size) in enumerate(runs) for _ in range(size)]
    assert _seen(replay_by_task(batch, REPLAY, lambda m: None)) == \
        _seen(by_task(batch, REPLAY.get, lambda m: None))


def test_replay_grouping_tells_topics_apart_when_numbers_are_shared() -> None:
    batch = [_msg("a", 0, 1), _msg("b", 0, 50), _msg("a", 0, 2)]
    assert _seen(replay_by_task(batch, OWNERS, lambda m: None)) == {
        "t0": [("a", 0, 1), ("a", 0, 2)], "t2": [("b", 0, 50)]}


def test_replay_grouping_leaves_a_partitions_error_to_its_replica() -> None:
    errors: list[Message] = []
    of_partition = Message(topic="cl", partition=0, error=KafkaError(KafkaError._TRANSPORT))
    of_consumer = Message(topic=None, partition=-1, error=KafkaError(KafkaError._TRANSPORT))
    batch = [_msg("cl", 0, 1), of_partition, _msg("cl", 0, 2), of_consumer]
    grouped = replay_by_task(batch, REPLAY, errors.append)
    assert grouped["t0"] == batch[:3]               # the replica skips and logs it
    assert errors == [of_consumer]


def _end(topic: str, partition: int, offset: int) -> Message:
    return Message(topic=topic, partition=partition, offset=offset,
                   error=KafkaError(KafkaError._PARTITION_EOF))


def test_a_partitions_end_event_is_left_out_of_its_run() -> None:
    errors: list[Message] = []
    batch = [_msg("a", 0, 1), _msg("a", 0, 2), _end("a", 0, 3), _end("a", 1, 7)]
    assert _seen(by_task(batch, OWNERS.get, errors.append)) == {
        "t0": [("a", 0, 1), ("a", 0, 2)]}
    assert errors == []


def test_ends_of_a_batch() -> None:
    batch = [_msg("a", 0, 1), _end("a", 0, 2), _msg("b", 0, 5), _end("a", 1, 7)]
    assert ends_of(batch) == ({"a:0", "b:0"}, {"a:0", "a:1"})
    assert ends_of([_end("a", 1, 7)]) == (set(), {"a:1"})
    assert ends_of([]) == (set(), set())


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 1),
                          st.sampled_from(["record", "end", "error"]))))
def test_end_events_change_no_grouping(records: list[tuple[str, int, str]]) -> None:
    """A batch with end events groups as the batch without them."""
    def message(i: int, t: str, p: int, kind: str) -> Message:
        if kind == "end":
            return _end(t, p, i)
        return Message(topic=t, partition=p, offset=i,
                       error=KafkaError(KafkaError._TRANSPORT) if kind == "error" else None)
    batch = [message(i, *r) for i, r in enumerate(records)]
    without = [m for m, (_, _, kind) in zip(batch, records, strict=True) if kind != "end"]
    assert _seen(by_task(batch, OWNERS.get, lambda m: None)) == \
        _seen(by_task(without, OWNERS.get, lambda m: None))


# ---- what the consumers fetch ahead -------------------------------------------------------


def _built_consumers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                     kafka: str) -> list[dict[str, Any]]:
    """The settings each of a processor's consumers is made with, for a [kafka] table."""
    from processor.runtime import consumers

    path = tmp_path / "job.toml"
    path.write_text('[job]\nname = "sums"\nclass = "processor.examples:RunningSum"\n'
                    'inputs = ["events"]\noutput = "sums"\n'
                    f'[kafka]\nbootstrap_servers = "127.0.0.1:9092"\n{kafka}\n')
    built: list[dict[str, Any]] = []
    monkeypatch.setattr(consumers, "Consumer", lambda settings: built.append(settings))
    consumers.Consumers(load_config(path), "baton.sums", SystemClock())
    return built


def test_every_consumer_fetches_within_bounds(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    built = _built_consumers(tmp_path, monkeypatch, "")
    assert len(built) == 4                      # active, replay, activation, lookup
    for settings in built:
        assert {k: settings[k] for k in FETCH_BOUNDS} == {
            "fetch.max.bytes": 4 << 20, "max.partition.fetch.bytes": 256 << 10,
            "queued.max.messages.kbytes": 4096, "queued.min.messages": 5000}


def test_kafka_table_sets_the_fetch_bounds(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    built = _built_consumers(tmp_path, monkeypatch, '"fetch.max.bytes" = 52428800\n'
                                                    '"queued.min.messages" = 1')
    for settings in built:
        assert settings["fetch.max.bytes"] == 52428800
        assert settings["queued.min.messages"] == 1
        assert settings["max.partition.fetch.bytes"] == 256 << 10
