"""The Spark fold's state against the dict model the task store is held to (pure: no
Spark): a job sees the same state on the bulk path as on the consumer path."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings

from processor.spark import FoldState
from store import decode_value
from tests.state_model import STEPS, apply_step


@settings(max_examples=200, deadline=None)
@given(steps=STEPS)
def test_the_fold_state_behaves_like_a_dict(steps: list[Any]) -> None:
    state, model = FoldState(), {}
    record_start: dict[Any, Any] = {}
    state.begin()
    for op, key, arg in steps:
        if op in ("record", "commit"):       # a fold has no commits: records only
            if arg:
                state.rollback()
                model = copy.deepcopy(record_start)
            state.begin()
            record_start = copy.deepcopy(model)
        else:
            assert apply_step(state, op, key, arg) == apply_step(model, op, key, arg)
    assert {k: decode_value(v) for k, v in state.settle().items()} == model


def test_a_tuple_reads_back_as_a_list_and_a_read_dict_changes_in_place() -> None:
    state = FoldState()
    state["t"] = (1, 2)
    state.setdefault("d", {})["n"] = 1
    state["d"]["n"] += 1
    assert state["t"] == [1, 2] and state.settle() == {"t": b"[1,2]", "d": b'{"n":2}'}
