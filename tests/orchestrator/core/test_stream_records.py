"""The coordinator's state as stream records: which changes are writes."""

from __future__ import annotations

from tests.orchestrator.core.coordinator_harness import ALL, Harness, at, start_two


def test_a_warmups_lag_alone_is_not_a_write_and_a_transition_carries_the_latest() -> None:
    h = Harness()
    _, p2 = start_two(h)
    p2.beat()
    p2.positions = at(200, *ALL)
    p2.beat()
    moving = sorted(h.core.picture.handoffs)
    assert moving and all(h.stream[f"handoff/{t}"]["phase"] == "catching_up" for t in moving)

    p2.positions = at(300, *ALL)            # still 700 records behind: no transition
    p2.h.core.heartbeat(p2.request())
    changes = h.core.picture.pending_changes()
    assert not [k for k in changes if k.startswith("handoff/")], changes
    assert {h.core.picture.handoffs[t].lag for t in moving} == {700}, "the core still knows it"
    h.sync()

    p2.positions = at(950, *ALL)            # caught up: releasing, written with its lag
    p2.beat()
    for task in moving:
        record = h.stream[f"handoff/{task}"]
        assert (record["phase"], record["lag"]) == ("releasing", 50)
