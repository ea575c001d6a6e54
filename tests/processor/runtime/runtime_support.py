"""A small harness for the task runtime's tests: it calls the runtime's API and sends
the same level-triggered replies as the coordinator (tests/processor/runtime/ and the
end-to-end tests that drive a runtime without daemons share it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from orchestrator.wire.config import parse_config
from orchestrator.wire.partitions import format_partition
from orchestrator.wire.protocol import HeartbeatReply, RoleListing
from processor.runtime import TaskRuntime
from tests.brokers import Broker

__all__ = ["assignment_reply", "consumed_to", "feed_keys", "new_runtime", "producer_closed",
           "task_model"]


def assignment_reply(model: dict[str, list[str]], active: list[str] = (),
                     warmup: list[str] = ()) -> HeartbeatReply:
    """The coordinator's reply giving `active` and `warmup` tasks of `model`."""
    return HeartbeatReply(alive=True, tasks=model,
                          assignment=RoleListing(active=list(active), warmup=list(warmup)))


def task_model(topic: str, partitions: int) -> dict[str, list[str]]:
    """The `partition` grouping's tasks of one input topic."""
    return {f"Partition {p}": [format_partition(topic, p)] for p in range(partitions)}


def new_runtime(raw: dict[str, Any], tmp_path: Path, name: str, **extra: Any) -> TaskRuntime:
    """Processor `name`'s runtime of the job in `raw`, with a state dir of its own."""
    raw = {**raw, "processor": {**raw["processor"], "state_dir": str(tmp_path / name)}}
    return TaskRuntime(parse_config(raw), name, **extra)


def consumed_to(runtimes: list[TaskRuntime], total: int) -> bool:
    """Whether the runtimes' active tasks have committed `total` records between them."""
    done = sum(sum(a.committed.values()) for r in runtimes for a in r.active.values())
    return done >= total


def feed_keys(broker: Broker, topic: str, start: int, count: int) -> None:
    """Records `start` to `start + count` of a steady input over 7 keys, acknowledged."""
    producer = broker.producer(**{"enable.idempotence": True})
    for i in range(start, start + count):
        producer.produce(topic, key=f"k{i % 7}".encode(), value=str(i % 9 + 1).encode())
    assert producer.flush(30) == 0


def producer_closed(producer: Producer) -> bool:
    """Whether `producer`'s client was closed: a closed producer refuses every call."""
    try:
        producer.poll(0)
    except RuntimeError:
        return True
    return False
