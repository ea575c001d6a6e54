"""How many records a round's active batch takes: as many as the job processes in a
tenth of a second at its recent cost a record, within [`_LEAST`, a full batch] (pure).

A consume() of a full batch (5,000 records) amortises Python's per-call cost for a job
that takes microseconds a record. For one that takes a millisecond (a model, a lookup),
5,000 records hold the processor's loop for seconds, and with it the first commit of a
task just activated (the handoff pause), the releases the coordinator waits for, and
every other task's turn. The budget is the default `commit_interval_ms`: a round no
longer than the interval at which its work is committed anyway. The cost is a moving
average over the rounds, so one slow record does not shrink the batches for long.
"""

from __future__ import annotations

__all__ = ["BatchSize"]

_BUDGET_S = 0.1
_LEAST = 50
_WEIGHT = 0.3               # of the newest round in the moving average


class BatchSize:
    """The active batch's size, from the cost of the rounds so far.

    Args:
        batch: a full batch, the most any round takes.
    """

    def __init__(self, batch: int) -> None:
        self.batch = batch
        self._cost_s = 0.0          # seconds a record (0: nothing measured yet)

    def bite(self) -> int:
        """The records the next round may take."""
        if self._cost_s <= 0:
            return self.batch
        return max(_LEAST, int(min(float(self.batch), _BUDGET_S / self._cost_s)))

    def observe(self, records: int, seconds: float) -> None:
        """A round processed `records` in `seconds` (nothing read: nothing learnt)."""
        if records <= 0:
            return
        cost = max(0.0, seconds) / records
        self._cost_s = cost if self._cost_s <= 0 else \
            self._cost_s + _WEIGHT * (cost - self._cost_s)

    def share(self, took: int, bite: int) -> int:
        """`took` records of a round allowed `bite`, counted against a full batch: the
        bite taken whole is a full batch's time (what a replay beside it may still
        take is reckoned from this: processor/runtime/replay_round.py)."""
        return min(self.batch, took * self.batch // max(1, bite))
