"""The state mapping against a dict model (hypothesis): whatever a job does with dict
habits (setdefault, nested values changed in place, deletes, pops), inside transactions
that commit or abort and records that roll back, the store holds what a dict would."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings

from store import TaskStore, decode_key, decode_value
from tests.state_model import STEPS, apply_step


def _whole(store: TaskStore) -> dict[Any, Any]:
    """The store's whole state as a commit would write it, without reading it as a job
    (a job's read makes a value live; this leaves the overlay as it is)."""
    return {decode_key(k): decode_value(v) for k, v in store.snapshot()}


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_the_store_behaves_like_a_dict(tmp_path: Path, steps: list[Any]) -> None:
    path = tmp_path / f"db-{len(list(tmp_path.iterdir()))}"
    with TaskStore(path) as store:
        committed: dict[Any, Any] = {}       # the model's last commit
        record_start: dict[Any, Any] = {}    # the model when the open record began
        model: dict[Any, Any] = {}
        store.begin_record()
        for op, key, arg in steps:
            if op == "record":
                if arg:                      # process() raised: its writes are undone
                    store.rollback_record()
                    model = copy.deepcopy(record_start)
                store.begin_record()
                record_start = copy.deepcopy(model)
            elif op == "commit":
                if arg:
                    store.commit({"t:0": 1})
                    committed = copy.deepcopy(model)
                else:
                    store.abort()
                    model = copy.deepcopy(committed)
                store.begin_record()
                record_start = copy.deepcopy(model)
            else:
                assert apply_step(store.state, op, key, arg) == apply_step(model, op, key, arg)
            assert _whole(store) == model
        assert dict(store.state.items()) == model
        store.commit({"t:0": 1})
    with TaskStore(path) as reopened:
        assert dict(reopened.state.items()) == model
