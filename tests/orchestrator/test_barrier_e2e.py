"""The expansion barrier behind transaction markers.

The input is written by a transactional producer (as when it is the output of an
exactly-once job upstream), so a parent partition's last entry before the barrier is
a commit marker: its committed position can stay one below the barrier's offset
forever. After the expansion only keys of the new partitions arrive, so nothing more
reaches the parents. Every record must still be processed, in order per key.
"""

from __future__ import annotations

import pytest

from orchestrator.wire.partitioners import home_partition
from tests.feeder import Feeder
from tests.orchestrator.test_e2e import Job, finish
from tests.orchestrator.test_split_e2e import FAST_METADATA, expand_under_pause
from tests.waiting import wait_for

pytestmark = pytest.mark.integration


def _keys(count: int, homes: range, partitions: int) -> list[bytes]:
    keys = (f"k{i}".encode() for i in range(100_000))
    return [k for k in keys if home_partition("consistent_random", k, partitions) in homes
            ][:count]


@pytest.mark.parametrize("transactional", [True, False], ids=["transactional", "plain"])
def test_children_start_after_markers(job, broker, unique, transactional: bool) -> None:
    j: Job = job()
    j.start_coordinator()
    j.start_processor("p1")
    wait_for(lambda: j.balanced(), 60, "p1 holding every task")
    topic = j.config.job.inputs[0]
    feeder = Feeder(broker, topic, keys=40, rate=500.0,
                    transactional_id=unique("upstream") if transactional else None,
                    **FAST_METADATA).start()
    wait_for(lambda: feeder.sent > 1500, 30, "traffic on 4 partitions")
    feeder.use_keys(_keys(24, range(4, 8), 8))     # from now on only child-partition keys
    expand_under_pause(j, feeder, 8)
    wait_for(lambda: feeder.sent > 3500, 30, "traffic on the child partitions")
    finish(j, feeder, broker)


def test_idle_parents_with_a_marker_last(job, broker, unique) -> None:
    """The parents were fully consumed before the expansion and get nothing after it."""
    j: Job = job()
    j.start_coordinator()
    j.start_processor("p1")
    wait_for(lambda: j.balanced(), 60, "p1 holding every task")
    topic = j.config.job.inputs[0]
    feeder = Feeder(broker, topic, keys=40, rate=500.0, transactional_id=unique("up"),
                    **FAST_METADATA).start()
    wait_for(lambda: feeder.sent > 1000, 30, "some traffic")
    feeder.pause()
    sent = feeder.sent
    wait_for(lambda: j.all_consumed(sent), 60, "the backlog consumed")
    feeder.use_keys(_keys(8, range(4, 8), 8))
    expand_under_pause(j, feeder, 8)        # resumes: child partitions only from here
    wait_for(lambda: feeder.sent >= sent + 300, 30, "child records")
    finish(j, feeder, broker)
