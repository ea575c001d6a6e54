"""catch_up.source = "changelog" in the task runtime, on a real broker and real RocksDB.

The job is IdentifiedSum (a random id per key, drawn once): replaying its input gives
keys new ids, so one id per key across a move proves the state was copied from the
changelog, not rebuilt. The harness sends the replies a coordinator would, with the
changelog mapping of the job model.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client import CollectorRegistry

from metrics import ProcessorMetrics
from orchestrator.wire.changelog import changelog_partition, changelog_topic
from orchestrator.wire.config import parse_config
from orchestrator.wire.partitions import format_partition
from orchestrator.wire.protocol import HeartbeatReply, RoleListing
from processor.changelog_replica import ChangelogReplica
from processor.runtime import TaskRuntime
from store import TaskStore, changelog_offset_record, encode_changelog, task_store_path
from store.options import MEMTABLE_BLOOM_RATIO
from tests.feeder import Feeder
from tests.oracle_report import identified_check
from tests.rocksdb_options import memtable_bloom_ratio
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

JOB = "processor.examples:IdentifiedSum"


def _config(job_config: Any, broker: Any, partitions: int) -> dict[str, Any]:
    raw = job_config(partitions=partitions, catch_up={"source": "changelog"})
    raw["job"]["class"] = JOB
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = changelog_topic(raw["job"]["name"])
    admin.create_topics([NewTopic(topic, partitions, 1, config={"cleanup.policy": "compact"})]
                        )[topic].result(30)
    return raw


def _model(topic: str, partitions: int) -> dict[str, list[str]]:
    return {f"Partition {p}": [format_partition(topic, p)] for p in range(partitions)}


def _reply(model: dict[str, list[str]], active: list[str] = (), warmup: list[str] = ()
           ) -> HeartbeatReply:
    return HeartbeatReply(alive=True, tasks=model,
                          changelog={t: n for n, t in enumerate(model)},
                          assignment=RoleListing(active=list(active), warmup=list(warmup)))


def _runtime(raw: dict[str, Any], tmp_path: Path, name: str, **extra: Any) -> TaskRuntime:
    raw = {**raw, "processor": {**raw["processor"], "state_dir": str(tmp_path / name)}}
    return TaskRuntime(parse_config(raw), name, **extra)


def _consumed(runtimes: list[TaskRuntime], total: int) -> bool:
    return sum(sum(a.committed.values()) for r in runtimes for a in r.active.values()) >= total


def test_warmup_applies_the_changelog_and_the_handoff_keeps_every_id(
        broker, job_config, tmp_path) -> None:
    raw = _config(job_config, broker, 2)
    config = parse_config(raw)
    model = _model(config.job.inputs[0], 2)
    registry = CollectorRegistry()
    old = _runtime(raw, tmp_path, "p1")
    new = _runtime(raw, tmp_path, "p2", metrics=ProcessorMetrics(registry, "j", "p2"))
    feeder = Feeder(broker, config.job.inputs[0], keys=20, rate=2000).start()

    def both() -> None:
        old.poll(0.05)
        new.poll(0.05)

    try:
        old.apply(_reply(model, active=list(model)))
        wait_for(lambda: sum(a.records_total for a in old.active.values()) > 2000, 60,
                 "the first owner to process records", lambda: old.poll(0.05))
        new.apply(_reply(model, warmup=["Partition 0"]))
        warmup = new.replicas["Partition 0"]
        assert isinstance(warmup, ChangelogReplica)
        assert warmup.partitions == [changelog_partition(config.job.name, 0)]
        wait_for(lambda: warmup.applied_total > 0 and warmup.lag() < 50, 60,
                 "the warmup to follow the changelog", both)
        report = next(r for r in new.reports() if r.task == "Partition 0")
        assert report.role == "warmup" and report.lag is not None
        # lookups (the warmup's end, committed offsets) go to a consumer that reads
        # nothing: on the replay consumer they waited behind its fetched backlog
        assert new.consumers.lookups.consumer.assignment() == []
        assert [f"{tp.topic}:{tp.partition}" for tp in new.consumers.replays.replay.assignment()] \
            == warmup.partitions
        assert set(report.applied) == {format_partition(config.job.inputs[0], 0)}
        applied = registry.get_sample_value("baton_catchup_records_total", {
            "job": "j", "processor": "p2", "task": "Partition 0", "path": "consumer",
            "source": "changelog"})
        assert applied and applied >= warmup.applied_total > 0
        # an apply never reads the store: its memtable keeps no Bloom filter until the
        # task goes active
        assert memtable_bloom_ratio(warmup.store.path) == 0
        old.driver.release("Partition 0")
        old.apply(_reply(model, active=["Partition 1"]))
        new.apply(_reply(model, active=["Partition 0"]))
        wait_for(lambda: "Partition 0" in new.active, 60, "activation", both)
        assert memtable_bloom_ratio(warmup.store.path) == MEMTABLE_BLOOM_RATIO
        wait_for(lambda: new.active["Partition 0"].records_total > 1000, 60,
                 "the new owner to process", both)
        sent = feeder.stop()
        wait_for(lambda: _consumed([old, new], sent), 120, "all input consumed", both)
    finally:
        feeder.stop()
        old.close(commit=True)
        new.close(commit=True)
    result = identified_check(broker, config)
    assert result.sums.records_in == sent
    assert result.ok, result


def test_an_aborted_transactions_changelog_is_never_applied(broker, job_config,
                                                           tmp_path) -> None:
    """A zombie owner writes changelog records (a poisoned id) into a transaction the
    new owner's fence aborts: the new owner never applies them."""
    raw = _config(job_config, broker, 1)
    config = parse_config(raw)
    model = _model(config.job.inputs[0], 1)
    producer = broker.producer()
    for i in range(300):
        producer.produce(config.job.inputs[0], key=f"k{i % 5}".encode(), value=b"1")
    producer.flush(30)
    zombie, new = _runtime(raw, tmp_path, "p1"), _runtime(raw, tmp_path, "p2")
    try:
        zombie.apply(_reply(model, active=["Partition 0"]))
        wait_for(lambda: _consumed([zombie], 300), 60, "the first owner",
                 lambda: zombie.poll(0.05))
        active = zombie.active["Partition 0"]
        assert active.changelog is not None and active.changelog.position is not None
        # an open transaction with a poisoned changelog, delivered but never committed
        active.producer.begin_transaction()
        target = active.changelog.target
        for key, value in [encode_changelog(b"k0", ["POISON", 10**6]),
                           changelog_offset_record(format_partition(config.job.inputs[0], 0),
                                                   10**6)]:
            active.producer.produce(target.topic, value, key, target.number)
        active.producer.flush(30)
        new.apply(_reply(model, active=["Partition 0"]))     # fences the zombie
        wait_for(lambda: "Partition 0" in new.active, 60, "activation", lambda: new.poll(0.05))
        for i in range(100):
            producer.produce(config.job.inputs[0], key=f"k{i % 5}".encode(), value=b"1")
        producer.flush(30)
        wait_for(lambda: _consumed([new], 400), 60, "the new owner", lambda: new.poll(0.05))
        assert new.active["Partition 0"].store.state[b"k0"][1] == 80
    finally:
        zombie.close(commit=False)
        new.close(commit=True)
    result = identified_check(broker, config)
    assert result.ok, result
    outputs = [m.value() for m in broker.read_all(config.job.output)]
    assert len(outputs) == 400 and not any(b"POISON" in v for v in outputs)


def test_a_crashed_owner_whose_store_lags_applies_the_changelog(broker, job_config,
                                                              tmp_path) -> None:
    """The owner dies; its restart finds a store a few transactions behind (here: one
    kept from earlier) and catches up from the changelog before processing."""
    raw = _config(job_config, broker, 1)
    config = parse_config(raw)
    topic = config.job.inputs[0]
    model = _model(topic, 1)
    producer = broker.producer()

    def feed(count: int) -> None:
        for i in range(count):
            producer.produce(topic, key=f"k{i % 7}".encode(), value=b"2")
        producer.flush(30)

    feed(200)
    first = _runtime(raw, tmp_path, "p1")
    path = task_store_path(tmp_path / "p1", config.job.name, "Partition 0", "p1")
    try:
        first.apply(_reply(model, active=["Partition 0"]))
        wait_for(lambda: _consumed([first], 200), 60, "the owner", lambda: first.poll(0.05))
        first.close(commit=True)
        saved = tmp_path / "saved-store"
        with TaskStore(path) as store:
            store.db.checkpoint(saved)         # the store as it was 200 records in
        second = _runtime(raw, tmp_path, "p1")
        second.apply(_reply(model, active=["Partition 0"]))
        feed(300)
        wait_for(lambda: _consumed([second], 500), 60, "more", lambda: second.poll(0.05))
        second.close(commit=False)          # a crash: nothing more committed
    finally:
        first.close(commit=False)
    import shutil

    shutil.rmtree(path)
    shutil.copytree(saved, path)            # the restart finds a store 300 records behind
    third = _runtime(raw, tmp_path, "p1")
    try:
        third.apply(_reply(model, active=["Partition 0"]))
        feed(100)
        wait_for(lambda: _consumed([third], 600), 60, "the restarted owner",
                 lambda: third.poll(0.05))
        state = dict(third.active["Partition 0"].store.state.items())
    finally:
        third.close(commit=True)
    result = identified_check(broker, config)
    assert result.ok, result
    assert sum(total for _, total in state.values()) == 1200
    assert uuid.UUID(hex=next(iter(state.values()))[0])


def _reply_roles(model: dict[str, list[str]], **roles: list[str]) -> HeartbeatReply:
    return HeartbeatReply(alive=True, tasks=model,
                          changelog={t: n for n, t in enumerate(model)},
                          assignment=RoleListing(**roles))


def test_a_standby_takes_over_from_a_dead_owner(broker, job_config, tmp_path) -> None:
    """A standby follows the changelog; its owner dies with a transaction open; the
    standby activates (fencing it) and carries on with every key's id."""
    raw = _config(job_config, broker, 1)
    config = parse_config(raw)
    model = _model(config.job.inputs[0], 1)
    owner, standby = _runtime(raw, tmp_path, "p1"), _runtime(raw, tmp_path, "p2")
    feeder = Feeder(broker, config.job.inputs[0], keys=15, rate=1500).start()

    def both() -> None:
        owner.poll(0.05)
        standby.poll(0.05)

    try:
        owner.apply(_reply_roles(model, active=["Partition 0"]))
        standby.apply(_reply_roles(model, standby=["Partition 0"]))
        replica = standby.replicas["Partition 0"]
        assert isinstance(replica, ChangelogReplica) and replica.role == "standby"
        wait_for(lambda: replica.applied_total > 500 and replica.lag() < 50, 60,
                 "the standby to follow", both)
        # the owner processes a batch and writes its changelog records, then dies
        # before the commit: the standby's fence aborts them
        active = owner.active["Partition 0"]
        wait_for(lambda: active.transaction.processed > 0, 30, "a batch in an open transaction",
                 lambda: active.process([m for m in owner.active_consumer.consume(500, 0.2)
                                         if not m.error()]))
        offsets = {p: o for p, o in active.pending.items() if o != active.committed.get(p)}
        assert active.changelog is not None
        assert active.changelog.write(active.producer, active.store, offsets,
                                      active.committed) > 0
        assert active.producer.flush(30) == 0
        owner.close(commit=False)
        standby.apply(_reply_roles(model, active=["Partition 0"]))
        wait_for(lambda: "Partition 0" in standby.active, 60, "the failover",
                 lambda: standby.poll(0.05))
        sent = feeder.stop()
        wait_for(lambda: _consumed([standby], sent), 120, "all input",
                 lambda: standby.poll(0.05))
    finally:
        feeder.stop()
        owner.close(commit=False)
        standby.close(commit=True)
    result = identified_check(broker, config)
    assert result.sums.records_in == sent
    assert result.ok, result


def test_switching_from_input_to_changelog_snapshots_the_store(broker, job_config,
                                                               tmp_path) -> None:
    """A task run on the input source (its ids drawn by process()) switches to the
    changelog: its owner's first transaction writes the whole store, so a warmup
    elsewhere gets every id from the changelog alone."""
    raw = _config(job_config, broker, 1)
    config = parse_config(raw)
    model = _model(config.job.inputs[0], 1)
    on_input = {**raw, "catch_up": {**raw["catch_up"], "source": "input"}}
    producer = broker.producer()

    def feed(count: int) -> None:
        for i in range(count):
            producer.produce(config.job.inputs[0], key=f"k{i % 9}".encode(), value=b"3")
        producer.flush(30)

    feed(300)
    before = _runtime(on_input, tmp_path, "p1")
    try:
        before.apply(_reply(model, active=["Partition 0"]))
        wait_for(lambda: _consumed([before], 300), 60, "the input-source owner",
                 lambda: before.poll(0.05))
    finally:
        before.close(commit=True)
    owner, warmup = _runtime(raw, tmp_path, "p1"), _runtime(raw, tmp_path, "p2")

    def both() -> None:
        owner.poll(0.05)
        warmup.poll(0.05)

    try:
        owner.apply(_reply(model, active=["Partition 0"]))
        wait_for(lambda: "Partition 0" in owner.active, 60, "the owner on the changelog",
                 lambda: owner.poll(0.05))
        assert owner.active["Partition 0"].changelog.snapshot_due
        feed(50)
        wait_for(lambda: _consumed([owner], 350), 60, "its first changelog transaction",
                 lambda: owner.poll(0.05))
        assert not owner.active["Partition 0"].changelog.snapshot_due
        warmup.apply(_reply(model, warmup=["Partition 0"]))
        wait_for(lambda: warmup.replicas["Partition 0"].applied_total >= 9
                 and warmup.replicas["Partition 0"].lag() == 0, 60, "the warmup", both)
        owner.driver.release("Partition 0")
        owner.apply(_reply(model))
        warmup.apply(_reply(model, active=["Partition 0"]))
        wait_for(lambda: "Partition 0" in warmup.active, 60, "the handoff", both)
        feed(90)
        wait_for(lambda: _consumed([warmup], 440), 60, "the new owner", both)
    finally:
        owner.close(commit=True)
        warmup.close(commit=True)
    result = identified_check(broker, config)
    assert result.ok, result
    assert result.sums.records_in == 440
