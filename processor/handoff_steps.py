"""Where a new owner's share of a handoff pause goes: its steps, from its own clock.

An activation stamps when it began and the end of each step (`ActiveTask.stamps`, in
clock.monotonic() seconds, keyed "began" and by step):

| step | from | to |
|---|---|---|
| fence | the activation began (activate seen) | `init_transactions` returned |
| t1 | fenced | the committed offsets (T1) read, stable |
| replay | T1 read | the silent replay T2 -> T1 done, the task active |
| first_read | active | its first records fetched |
| first_commit | first records fetched | its first transaction committed |

The old owner's share (release seen -> final commit acknowledged) is its `releasing`
step; what lies between the two processors (the coordinator's replies) is the
coordinator's `releasing` and `activating` phases (docs/performance.md, "Where a
handoff's pause goes").
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["ACTIVATION_STEPS", "step_ms"]

# the steps in order; each stamp is the end of its step, and a step begins where the one
# before it ended ("began" for the first)
ACTIVATION_STEPS: tuple[str, ...] = ("fence", "t1", "replay", "first_read", "first_commit")


def step_ms(stamps: Mapping[str, float]) -> dict[str, float]:
    """Each step's duration in milliseconds, of the steps both of whose stamps exist."""
    out: dict[str, float] = {}
    for before, step in zip(("began", *ACTIVATION_STEPS[:-1]), ACTIVATION_STEPS, strict=True):
        if before in stamps and step in stamps:
            out[step] = round((stamps[step] - stamps[before]) * 1000, 1)
    return out
