"""Commits the brokers do not hold: an activation whose committed offsets never settle,
and an active task whose last commit an abort took back (Apache Kafka only).

After a broker's controlled shutdown Apache Kafka can record a transaction as committed
while it skipped its markers (processor/transaction.py, `resettle`): the transaction's
offset commit then stays pending, and a stable lookup of the group's offsets (T1) never
answers. Before, such a task never went active: every activation failed on "Failed to
get committed offsets: Local: Timed out". Here an offset commit that never ends is made
on purpose, by a transaction of another producer left open (it ends only when the
broker times it out, long after the test): the task goes active from the settled
offsets, not from the pending ones, and the output stays exactly once.
"""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from orchestrator.wire.config import parse_config
from processor.runtime.stores import TaskStores
from tests.oracle_report import oracle_check
from tests.processor.runtime.runtime_support import (
    assignment_reply,
    consumed_to,
    feed_keys,
    new_runtime,
    task_model,
)
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

TASK = "Partition 0"


def test_an_offset_commit_that_never_settles_does_not_hold_an_activation(
        broker, job_config, tmp_path, caplog) -> None:
    raw = job_config(partitions=1)
    config = parse_config(raw)
    topic = config.job.inputs[0]
    feed_keys(broker, topic, 0, 300)
    group = Consumer(broker.settings(**{"group.id": f"baton.{config.job.name}"}))
    stuck = Producer(broker.settings(**{"transactional.id": f"stuck-{uuid.uuid4()}",
                                        "transaction.timeout.ms": 600_000}))
    try:
        stuck.init_transactions(30)
        stuck.begin_transaction()
        stuck.send_offsets_to_transaction([TopicPartition(topic, 0, 1_000_000)],
                                          group.consumer_group_metadata(), 30)
        runtime = new_runtime(raw, tmp_path, "p1")
        started = time.monotonic()
        with caplog.at_level(logging.ERROR, logger="baton.processor.runtime"):
            runtime.apply(assignment_reply(task_model(topic, 1), active=[TASK]))
            wait_for(lambda: TASK in runtime.active, 90, "the task to go active",
                     lambda: runtime.poll(0.05))
        assert time.monotonic() - started < 60
        # from the settled offsets (none: the start), not the pending 1,000,000 (the
        # oracle below would find the 300 records lost)
        assert f"committing the settled offsets {{'{topic}:0': 0}}" in caplog.text
        feed_keys(broker, topic, 300, 200)
        try:
            wait_for(lambda: consumed_to([runtime], 500), 90, "all 500 records committed",
                     lambda: runtime.poll(0.05))
        finally:
            runtime.close(commit=True)
    finally:
        stuck.abort_transaction(30)
        group.close()
    result = oracle_check(broker, config)
    assert result.records_in == 500
    assert result.ok, result


def test_a_store_that_applied_a_void_commit_is_moved_aside_and_replaced(
        job_config, tmp_path) -> None:
    raw = job_config(partitions=1)
    raw = {**raw, "processor": {**raw["processor"], "state_dir": str(tmp_path / "state")}}
    stores = TaskStores(parse_config(raw), "p1")
    store = stores.open(TASK)
    store.state.put("k", "v")
    store.commit({"events:0": 42})
    fresh = stores.replace(TASK, store, "it had applied a void commit")
    try:
        assert fresh.applied_offsets() == {}
        assert fresh.state.get("k") is None
        aside = [p for p in Path(fresh.path).parent.iterdir() if "+void-" in p.name]
        assert len(aside) == 1
    finally:
        fresh.close()
        stores.close()


def test_a_last_commit_an_abort_took_back_is_redone_from_a_rebuilt_store(
        broker, job_config, tmp_path, caplog) -> None:
    """A commit Kafka ended without its markers (a controlled shutdown) is taken back by
    the next abort's markers: its outputs and its offsets, while the store applied it.
    The task must not go on from past it: it restarts from the offsets the brokers hold,
    on a rebuilt store. Here the group's offsets are set back by hand instead (the records
    of that commit stay readable), so the proof is that they come out a second time,
    with the same sums: without the check the task rewound to its own T1 and went on,
    and a real void commit's records were lost."""
    raw = job_config(partitions=1)
    config = parse_config(raw)
    topic, group = config.job.inputs[0], f"baton.{config.job.name}"
    runtime = new_runtime(raw, tmp_path, "p1")
    try:
        runtime.apply(assignment_reply(task_model(topic, 1), active=[TASK]))
        feed_keys(broker, topic, 0, 300)
        wait_for(lambda: consumed_to([runtime], 300), 90, "300 records committed",
                 lambda: runtime.poll(0.05))
        active = runtime.active[TASK]
        admin = AdminClient(broker.settings())
        for future in admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
                group, [TopicPartition(topic, 0, 100)])]).values():
            future.result(30)
        producer = active.transaction.producer
        commit_transaction = producer.commit_transaction
        refusals = [1, 2]       # the commit and its one retry: the next commits go through

        def abortable(timeout: float) -> None:
            if not refusals:
                commit_transaction(timeout)
                return
            refusals.pop()
            raise KafkaException(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                            "a broker loading its state", retriable=True,
                                            txn_requires_abort=True))

        producer.commit_transaction = abortable
        feed_keys(broker, topic, 300, 50)
        with caplog.at_level(logging.WARNING, logger="baton.processor.runtime"):
            wait_for(lambda: runtime.active.get(TASK) not in (None, active), 90,
                     "the task active again", lambda: runtime.poll(0.05))
        assert "do not hold its last commit" in caplog.text
        assert runtime.active[TASK].committed == {f"{topic}:0": 100}
        state = tmp_path / "p1"
        assert [p for p in state.rglob("*+void-*")], list(state.rglob("*"))
        wait_for(lambda: consumed_to([runtime], 350), 90, "all 350 records committed",
                 lambda: runtime.poll(0.05))
    finally:
        runtime.close(commit=True)
    result = oracle_check(broker, config)
    assert (result.records_in, result.lost, result.wrong) == (350, 0, 0), result
    assert result.duplicated == 200, result     # offsets 100-299, each out again
