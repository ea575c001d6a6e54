"""Crash recovery and poison records, on a real broker and real RocksDB."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from orchestrator.wire.config import dump_config, parse_config
from orchestrator.wire.protocol import HeartbeatReply, RoleListing
from processor.job import Job, Output, Record, State
from processor.runtime import TaskRuntime
from tests.feeder import Feeder
from tests.oracle_report import oracle_check
from tests.waiting import wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _committed_total(broker: Any, group: str, topic: str, partitions: int) -> int:
    consumer = Consumer(broker.settings(**{"group.id": group, "enable.auto.commit": False}))
    try:
        for attempt in range(3):    # a lookup may time out on a loaded machine: ask again
            try:
                found = consumer.committed(
                    [TopicPartition(topic, p) for p in range(partitions)], 20)
                return sum(max(tp.offset, 0) for tp in found)
            except KafkaException:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")
    finally:
        consumer.close()


def _start(config_file: Path, name: str, partitions: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests/processor/run_active.py"),
                             str(config_file), name, str(partitions)],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_sigkill_mid_stream_then_restart(broker, job_config, tmp_path) -> None:
    raw = job_config(partitions=3)
    config_file = tmp_path / "job.toml"
    config_file.write_text(dump_config(raw))
    config = parse_config(raw, config_file)
    topic, group = config.job.inputs[0], f"baton.{config.job.name}"
    feeder = Feeder(broker, topic, keys=30, rate=4000).start()
    proc = _start(config_file, "p1", 3)
    try:
        seen = 0
        for _ in range(3):   # kill it three times at moments the stream is flowing
            # outputs committed by this incarnation: before each crash, after each restart
            wait_for(lambda p=proc, s=seen: _committed_total(broker, group, topic, 3) > s
                     and p.poll() is None, 60, "progress of this incarnation")
            time.sleep(0.3 + 0.4 * (uuid.uuid4().int % 100) / 100)
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            seen = _committed_total(broker, group, topic, 3)   # all the dead one committed
            proc = _start(config_file, "p1", 3)
        wait_for(lambda: _committed_total(broker, group, topic, 3) > seen, 60,
                 "progress after the last restart")
        sent = feeder.stop()
        wait_for(lambda: _committed_total(broker, group, topic, 3) >= sent, 120,
                 "all input committed")
    finally:
        feeder.stop()
        proc.kill()
        proc.wait(30)
    result = oracle_check(broker, config)
    assert result.records_in == sent
    assert result.ok, result


class Fragile(Job):
    """Running sum that raises on the value b"boom"."""

    def process(self, record: Record, state: State) -> Iterator[Output]:
        previous = state.get(record.key, 0)
        state[record.key] = previous + 1000      # a write that must be rolled back
        if record.value == b"boom":
            raise ValueError("poison record")
        state[record.key] = previous + int(record.value or b"0")
        yield record.key, str(state[record.key])


@pytest.fixture
def poisoned(broker, job_config):
    def make(on_error: str, kafka: dict[str, Any] | None = None) -> tuple[Any, TaskRuntime]:
        raw = job_config(partitions=1, processor={"on_error": on_error}, kafka=kafka or {})
        config = parse_config(raw)
        topic = config.job.inputs[0]
        producer = broker.producer()
        for i in range(30):
            value = b"boom" if i == 10 else b"1"
            producer.produce(topic, key=b"k", value=value)
        producer.flush(30)
        runtime = TaskRuntime(config, "p1", job=Fragile())
        runtime.apply(HeartbeatReply(alive=True, tasks={"Partition 0": [f"{topic}:0"]},
                                     assignment=RoleListing(active=["Partition 0"])))
        return config, runtime
    return make


def _values(broker: Any, topic: str) -> list[bytes]:
    return [m.value() for m in broker.read_all(topic)]


def test_on_error_fail_stops_at_committed_offsets(broker, poisoned) -> None:
    config, runtime = poisoned("fail")
    try:
        wait_for(lambda: "Partition 0" in runtime.failed, 60, "the task to fail",
                 lambda: runtime.poll(0.05))
        reason = runtime.failed["Partition 0"]
        assert f"{config.job.inputs[0]}:0 offset 10" in reason and "poison" in reason
        report = [r for r in runtime.reports() if r.task == "Partition 0"][0]
        assert report.role == "failed"
    finally:
        runtime.close(commit=True)
    values = _values(broker, config.job.output)
    # whatever was committed before the poison record stays; nothing at or past it
    assert values == [str(i).encode() for i in range(1, len(values) + 1)]
    assert len(values) <= 10
    group = f"baton.{config.job.name}"
    assert _committed_total(broker, group, config.job.inputs[0], 1) == len(values)


def test_failed_reason_reported_without_secrets(broker, poisoned) -> None:
    """The reason goes to the coordinator (and `baton status`): secret values masked."""
    _, runtime = poisoned("fail", kafka={"sasl.password": "poison"})   # plaintext ignores it
    try:
        wait_for(lambda: "Partition 0" in runtime.failed, 60, "the task to fail",
                 lambda: runtime.poll(0.05))
        report = [r for r in runtime.reports() if r.task == "Partition 0"][0]
        assert report.error is not None and "[redacted] record" in report.error
        assert "poison" not in report.error
    finally:
        runtime.close(commit=True)


def test_on_error_skip_skips_only_the_poison_record(broker, poisoned) -> None:
    config, runtime = poisoned("skip")
    try:
        wait_for(lambda: sum(a.committed[f"{config.job.inputs[0]}:0"]
                             for a in runtime.active.values()) >= 30, 60, "all 30 records",
                 lambda: runtime.poll(0.05))
    finally:
        runtime.close(commit=True)
    assert _values(broker, config.job.output) == [str(i).encode() for i in range(1, 30)]


def test_on_error_dlq_writes_the_record_and_the_error(broker, poisoned) -> None:
    config, runtime = poisoned("dlq")
    dlq = f"baton.{config.job.name}.dlq"   # created by the runtime at start
    try:
        wait_for(lambda: sum(a.committed[f"{config.job.inputs[0]}:0"]
                             for a in runtime.active.values()) >= 30, 60, "all 30 records",
                 lambda: runtime.poll(0.05))
    finally:
        runtime.close(commit=True)
    assert _values(broker, config.job.output) == [str(i).encode() for i in range(1, 30)]
    dead = broker.read_all(dlq)
    assert [m.value() for m in dead] == [b"boom"]
    headers = dict(dead[0].headers())
    assert b"poison record" in headers["baton.error"]
    assert headers["baton.source"] == f"{config.job.inputs[0]}:0 offset 10".encode()
