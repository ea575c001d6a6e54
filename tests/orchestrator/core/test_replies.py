"""The heartbeat reply (orchestrator/core/replies.py): the job model only when the
processor's is stale."""

from __future__ import annotations

from tests.orchestrator.core.coordinator_harness import (
    FakeProcessor,
    Harness,
)


def test_the_model_is_sent_only_to_a_processor_whose_generation_is_stale() -> None:
    """A heartbeat naming the current generation gets no model back (the reply stays
    small at scale); one naming none (an older processor) or an older one gets it
    whole."""
    h = Harness()
    p1 = FakeProcessor(h, "p1")
    full = p1.register()
    assert full.tasks and not full.same_model
    current = h.core.heartbeat(p1.request().model_copy(update={"generation": full.generation}))
    assert current.same_model and not current.tasks and not current.barriers
    assert sorted(current.assignment.active) == sorted(full.assignment.active)
    stale = h.core.heartbeat(p1.request().model_copy(update={"generation": 0}))
    assert not stale.same_model and stale.tasks == full.tasks
    legacy = p1.beat()                                  # sends no generation at all
    assert not legacy.same_model and legacy.tasks == full.tasks
