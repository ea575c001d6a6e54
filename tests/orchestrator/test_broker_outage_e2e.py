"""The broker away for longer than `coordinator.processor_timeout_ms` under traffic: the
coordinator cannot renew its lease, so it answers 503 and hears no heartbeat; that
silence is its own, so no processor may be declared lost or dead for it: both stay up
and registered. (What the outage does to the data is the fault suite's to check, with
the oracle: tests/test_faults.py, TestBrokerRestart.)

It stops the broker, so `./run test` runs it on a broker of its own, after the
embedded broker's pass and beside the fault suite's lanes.

After a restart, Apache Kafka can hold a group's committed offsets unstable for minutes
(a read_committed lookup times out meanwhile); a warmup that starts then does not wait
for them (processor/runtime/catch_up.py, `_start_caps`), so the processors' loops keep
answering their releases in time.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from orchestrator.wire.client import CoordinatorUnreachable
from tests.brokers import Broker
from tests.orchestrator.test_e2e import Job, start_two
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

OUTAGE_S = 12.0             # three times the tests' processor_timeout_ms (4 s)


def answers(j: Job) -> bool:
    try:
        j.status()
    except CoordinatorUnreachable:
        return False
    return True


@pytest.fixture
def broker(restartable_broker: Broker) -> Broker:
    return restartable_broker


def test_no_processor_is_lost_for_the_coordinators_own_deafness(
        job: Callable[..., Job], broker: Broker) -> None:
    # a processor's loop may wait out a restarted broker's lookups for many seconds (it
    # loads its groups first), so the release timeout, not the subject here, is long
    j = job(coordinator={"release_timeout_ms": 60000})
    assert j.config.coordinator.processor_timeout_ms * 3 <= OUTAGE_S * 1000
    feeder = start_two(j, broker)
    wait_for(lambda: feeder.sent > 1000, 30, "some traffic")
    assert broker.local is not None
    broker.local.stop()
    time.sleep(OUTAGE_S)
    broker.local.start()
    wait_for(lambda: answers(j), 120, "the coordinator answering again")
    time.sleep(2 * j.config.coordinator.processor_timeout_ms / 1000)
    j.check_running()
    status = j.status()
    alive = {p["id"] for p in status["processors"] if p["alive"]}
    assert alive == {"p1", "p2"}, status["processors"]
    assert j.coordinator is not None
    assert "silent for" not in j.coordinator.log()
    assert "declared dead" not in j.coordinator.log()
    feeder.stop()
