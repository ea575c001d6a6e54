"""An active task across a restart of its broker, at the two moments that matter.

A broker may come back from a restart without a transaction that was open: Apache
Kafka keeps it, the embedded broker aborts what it holds of it and then acknowledges the
rest. Either way the output must stay exactly once: a transaction during which the
producer lost its brokers is redone (restart before the commit), and a commit the
broker came back without is found by reading the committed offsets back (restart in
the middle of the commit). Each test restarts the module's own broker at that moment.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message

from orchestrator.wire.config import parse_config
from processor.runtime import TaskRuntime
from processor.transaction import TXN_TIMEOUT_S
from tests.brokers import Broker
from tests.oracle_report import oracle_check
from tests.processor.runtime.runtime_support import (
    assignment_reply,
    consumed_to,
    feed_keys,
    new_runtime,
    task_model,
)
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.smoke]

TASK = "Partition 0"


@pytest.fixture
def broker(restartable_broker: Broker) -> Broker:
    return restartable_broker


def _active(broker: Broker, job_config: Callable[..., dict[str, Any]], tmp_path: Path,
            **processor: Any) -> tuple[Any, TaskRuntime]:
    # a restart slowed by a loaded machine must not outlast the open transaction: past
    # transaction.timeout.ms (Baton's 10 s) the broker aborts it on its return and fences
    # the producer, and the task takes the fenced path, not the one tested here
    raw = job_config(partitions=1, kafka={"transaction.timeout.ms": 60_000},
                     processor=processor)
    config = parse_config(raw)
    runtime = new_runtime(raw, tmp_path, "p1")
    runtime.apply(assignment_reply(task_model(config.job.inputs[0], 1), active=[TASK]))
    feed_keys(broker, config.job.inputs[0], 0, 300)
    wait_for(lambda: consumed_to([runtime], 300), 60, "the first records",
             lambda: runtime.poll(0.05))
    return config, runtime


def _finish(broker: Broker, config: Any, runtime: TaskRuntime, total: int) -> None:
    try:
        wait_for(lambda: consumed_to([runtime], total), 90, f"all {total} records committed",
                 lambda: runtime.poll(0.05))
    finally:
        runtime.close(commit=True)
    result = oracle_check(broker, config)
    assert result.records_in == total
    assert result.ok, result


@contextlib.contextmanager
def _closed_on_failure(runtime: TaskRuntime) -> Iterator[None]:
    """Close the runtime when the test fails before `_finish` does: its clients would
    otherwise keep dialling the stopped broker's port, which a later test's server may
    have been given (a Spark iterator's, whose authentication they then failed)."""
    try:
        yield
    except BaseException:
        runtime.close(commit=False)
        raise


def _records(messages: list[Message]) -> list[Message]:
    """A batch as the runtime hands it to a task: without the consumer's events (the
    ends of partitions the idle back-off listens for)."""
    return [m for m in messages if m.error() is None]


def test_restart_before_the_commit_redoes_the_transaction(broker, job_config, tmp_path,
                                                           caplog) -> None:
    config, runtime = _active(broker, job_config, tmp_path)
    with _closed_on_failure(runtime):
        active = runtime.active[TASK]
        feed_keys(broker, config.job.inputs[0], 300, 200)
        wait_for(lambda: active.transaction.processed > 0, 30, "an open transaction",
                 lambda: active.process(_records(runtime.active_consumer.consume(500, 0.1))))
        broker.local.restart()
        with caplog.at_level(logging.WARNING, logger="baton.processor.runtime"):
            runtime.active_round.run(TASK, runtime.commits.commit)
        # Which way the transaction is redone is librdkafka's timing: mostly the producer
        # tells of the lost brokers and the transaction is aborted and redone with it; but
        # a request the restart stranded in the producer's queue (librdkafka issue 5511)
        # times out instead, and the task starts again from T1 with a new producer.
        # Either way nothing of it was committed, and `_finish`'s oracle checks the redo.
        stranded = "_TIMED_OUT" in caplog.text and "with a new producer" in caplog.text
        assert "lost its brokers" in caplog.text or stranded, caplog.text
        assert active.committed == active.pending      # rewound to T1, nothing committed
    _finish(broker, config, runtime, 500)


def test_a_commit_past_its_timeout_is_given_up_and_the_task_goes_on(broker, job_config,
                                                                    tmp_path, caplog) -> None:
    """A commit whose client calls do not return (the broker frozen under them; what
    librdkafka does past its own timeouts when a group's coordinator is lost) holds the
    loop for commit_timeout_ms, not for the calls' timeouts: the task starts again with a
    new producer, and once the broker is back the output is exactly once, whatever the
    stuck commit's thread then does."""
    config, runtime = _active(broker, job_config, tmp_path, commit_timeout_ms=2000)
    with _closed_on_failure(runtime):
        active = runtime.active[TASK]
        feed_keys(broker, config.job.inputs[0], 300, 200)
        wait_for(lambda: active.transaction.processed > 0, 30, "an open transaction",
                 lambda: active.process(_records(runtime.active_consumer.consume(500, 0.1))))
        assert broker.local is not None and broker.local.pid is not None
        os.kill(broker.local.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with caplog.at_level(logging.WARNING, logger="baton.processor.runtime"):
                runtime.active_round.run(TASK, runtime.commits.commit)
            waited = time.monotonic() - started
        finally:
            os.kill(broker.local.pid, signal.SIGCONT)
        assert "did not return within 2 s" in caplog.text, caplog.text
        assert waited < TXN_TIMEOUT_S - 2, f"the loop waited {waited:.1f} s on the commit"
        assert TASK not in runtime.active      # fencing again, with a new producer
    _finish(broker, config, runtime, 500)


def test_restart_inside_the_commit_is_detected(broker, job_config, tmp_path, caplog) -> None:
    # the test restarts the broker inside the commit, so the commit's time holds the
    # broker's restart: on a loaded machine that outlasts the 30 s default of
    # commit_timeout_ms, and the task takes the hung-commit path (tested above) instead
    config, runtime = _active(broker, job_config, tmp_path, commit_timeout_ms=55_000)
    with _closed_on_failure(runtime):
        _restart_inside_the_commit(broker, config, runtime, caplog)
    _finish(broker, config, runtime, 500)


def _restart_inside_the_commit(broker: Broker, config: Any, runtime: TaskRuntime,
                               caplog: pytest.LogCaptureFixture) -> None:
    active = runtime.active[TASK]
    before = dict(active.committed)
    producer = active.transaction.producer
    commit_transaction = producer.commit_transaction

    def restart_then_commit(timeout: float) -> None:  # outputs, offsets sent; EndTxn not yet
        producer.commit_transaction = commit_transaction   # a retry commits at once
        broker.local.restart()
        commit_transaction(timeout)

    producer.commit_transaction = restart_then_commit
    feed_keys(broker, config.job.inputs[0], 300, 200)
    wait_for(lambda: active.transaction.processed > 0, 30, "an open transaction",
             lambda: active.process(_records(runtime.active_consumer.consume(500, 0.1))))
    with caplog.at_level(logging.WARNING, logger="baton.processor.runtime"):
        runtime.active_round.run(TASK, runtime.commits.commit)
    if broker.embedded is not None:
        # the embedded broker came back without the transaction: the task restarts from
        # the offsets the broker holds, with a new producer
        assert "do not hold its last commit" in caplog.text
        assert active.committed == before
        assert runtime.active.get(TASK) is not active and TASK not in runtime.failed
    else:
        # Apache Kafka keeps the transaction across the restart: the commit the producer
        # retried went through, the task carries on with the same producer
        assert "do not hold its last commit" not in caplog.text
        assert active.committed != before
        assert runtime.active.get(TASK) is active and TASK not in runtime.failed
