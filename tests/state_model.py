"""A dict model of a job's state, for property tests of the stores that hold it
(TaskStore, the Spark fold's FoldState): random steps a job with dict habits takes."""

from __future__ import annotations

import copy
from typing import Any

import hypothesis.strategies as st

__all__ = ["STEPS", "apply_step"]

KEYS = st.sampled_from(["a", "b", b"a", b"c"])
SCALARS = st.one_of(st.integers(-(2**70), 2**70), st.text(max_size=3), st.booleans(),
                    st.none())
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=2), inner, max_size=3)),
    max_leaves=6)

# one step of a job: (operation, key, argument)
STEPS = st.lists(st.one_of(
    st.tuples(st.just("set"), KEYS, VALUES),
    st.tuples(st.just("del"), KEYS, st.none()),
    st.tuples(st.just("pop"), KEYS, st.none()),
    st.tuples(st.just("append"), KEYS, SCALARS),          # setdefault(k, []).append(x)
    st.tuples(st.just("count"), KEYS, st.text(max_size=2)),  # setdefault(k, {})[x] += 1
    st.tuples(st.just("alias"), KEYS, SCALARS),           # v = []; s[k] = v; v.append(x)
    st.tuples(st.just("read"), KEYS, st.none()),
    st.tuples(st.just("record"), st.none(), st.booleans()),   # a record boundary: fails?
    st.tuples(st.just("commit"), st.none(), st.booleans()),   # commits? else aborts
), max_size=40)


def apply_step(state: Any, op: str, key: Any, arg: Any) -> Any:
    """One operation on a mapping (the store or the model); what a job would read."""
    if op == "set":
        state[key] = copy.deepcopy(arg)
    elif op == "del" and key in state:
        del state[key]
    elif op == "pop":
        return state.pop(key, "missing")
    elif op == "append":
        target = state.setdefault(key, [])
        if isinstance(target, list):
            target.append(arg)
    elif op == "count":
        target = state.setdefault(key, {})
        if isinstance(target, dict):
            known = target.get(arg)
            target[arg] = known + 1 if isinstance(known, int) else 1
    elif op == "alias":
        fresh: list[Any] = []
        state[key] = fresh
        fresh.append(arg)
    return state.get(key)


