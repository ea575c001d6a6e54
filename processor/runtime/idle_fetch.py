"""When an idle input consumer stops fetching for a while: `processor.idle_fetch_backoff_ms`.

Apache Kafka parks a fetch that finds nothing for up to fetch.wait.max.ms, so an idle
consumer costs it and the client almost nothing. A broker that answers an empty fetch at
once (the embedded noida-db) gets the next one at once: librdkafka has no back-off for
an empty answer, and every idle processor spins, ~0.3-0.5 of a core in the client and
~0.25-0.4 in the broker (bench/idle_consumer.py). With a back-off, an active consumer whose
partitions were all read to their end (a fetch since they were last assigned said so:
a pause while the answer to a fetch that would bring records is on its way would drop
it, again and again) and that has found nothing for that long pauses them for that
long, then fetches again: one fetch per back-off while idle, and a record that arrives
meanwhile waits at most that long. Under traffic nothing changes: a poll that finds
records ends the idle spell.

The decisions are pure functions over `IdleFetch`; `processor/runtime/active_consumer.py`
carries them out, unassigning the partitions for the back-off and assigning each again
where its task goes on (librdkafka's pause and resume would wait ~1 s to fetch again).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["IdleFetch", "after_poll", "before_poll"]


@dataclass(frozen=True)
class IdleFetch:
    """An input consumer's idle spell: since when its polls found nothing (None: the
    last one found records) and until when its partitions are paused (None: fetching)."""

    idle_since: float | None = None
    paused_until: float | None = None

    @property
    def paused(self) -> bool:
        return self.paused_until is not None


def before_poll(state: IdleFetch, now: float) -> tuple[IdleFetch, bool]:
    """The state before a poll, and whether the paused partitions resume now (their
    back-off is over: the poll's fetch finds out whether records came meanwhile)."""
    if state.paused_until is None or now < state.paused_until:
        return state, False
    return IdleFetch(state.idle_since, None), True


def after_poll(state: IdleFetch, now: float, found: int, at_end: bool, backoff_s: float
               ) -> tuple[IdleFetch, bool]:
    """The state after a poll that returned records of `found` partitions, and whether
    the consumer's partitions pause now: every one was read to its end (`at_end`: a
    fetch since they were last assigned said so, so each pause waits for an answer)
    and nothing came for `backoff_s` (0: never)."""
    if found:
        return IdleFetch(), False
    if backoff_s <= 0 or state.paused:
        return state, False
    since = now if state.idle_since is None else state.idle_since
    if not at_end or now - since < backoff_s:
        return IdleFetch(since, None), False
    return IdleFetch(since, now + backoff_s), True
