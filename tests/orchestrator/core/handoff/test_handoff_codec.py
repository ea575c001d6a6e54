"""A persisted handoff read back (orchestrator/core/handoff/codec.py): a bad or missing
field is named."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.core.handoff import (
    Handoff,
    LocalHandoffError,
)
from tests.orchestrator.core.handoff.handoff_support import (
    ACTIVATING,
    PLANNED,
    at,
)


@pytest.mark.parametrize("key,value", [
    ("phase", "handing"), ("since", "soon"), ("since", True), ("lag", True), ("lag", 1.5),
    ("source", 3), ("final_offsets", {"events:0": "1"}), ("final_offsets", {"e": 1}),
    ("source_declared_dead", 1), ("target", None)])
def test_bad_record_names_the_field(key: str, value: Any) -> None:
    record = {**at(ACTIVATING).to_dict(), key: value}
    with pytest.raises(LocalHandoffError, match=f"field '{key}'"):
        Handoff.from_dict(record)


def test_missing_field_is_named() -> None:
    record = at(PLANNED).to_dict()
    del record["target"]
    with pytest.raises(LocalHandoffError, match="'target'.*missing"):
        Handoff.from_dict(record)
