"""When a consumer is cut off from the brokers while the rest of the processor is not,
and is replaced.

A librdkafka client can lose every broker connection in a broker restart and never make
a new one: in a 16-minute soak on Apache Kafka 4.4 (librdkafka 2.16), one processor's
active consumer answered "all broker connections are down" for the last ten minutes
while its other clients, and the other processor, read and wrote through the same
broker. Re-bootstrap (`metadata.recovery.strategy`) did not bring it back. Its tasks
read nothing and said nothing; every one the coordinator placed there was released
at the offset it had started from.

So a consumer that fetches partitions and found nothing for `PROBE_EVERY_S` is asked
for the input's metadata (`list_topics`, within `PROBE_TIMEOUT_S`): an idle but
connected consumer answers in milliseconds. When it does not, the processor's lookup
consumer is asked the same; when that one answers, the watched consumer alone is cut
off. Cut off for `CUT_OFF_S` in a row, it is replaced by a new consumer, assigned where
each task or replica goes on. The active consumer is watched so, and the replays' two
(a warmup's consumer cut off would hold a scale-out for good, an activation's a
handoff's pause until the coordinator's timeout). While the brokers are away, nothing
answers either consumer, and nothing is replaced.

The decisions are pure functions over `FetchWatch`; the probes and the replacement's
close are processor/runtime/consumer_watch.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CUT_OFF_S", "PROBE_EVERY_S", "PROBE_TIMEOUT_S", "FetchWatch", "after_poll",
           "after_probe"]

# a consumer with partitions and no record for this long is asked whether it is
# connected, and again this often while it stays quiet (a healthy one costs a metadata
# request to the broker every 10 s while its input is idle)
PROBE_EVERY_S = 10.0
# one probe's bound: the main loop waits this long on a consumer that is cut off (and as
# long again on the lookup consumer while the brokers are away)
PROBE_TIMEOUT_S = 0.5
# replaced once its probes have failed, with the lookup consumer's answering, this long
CUT_OFF_S = 30.0


@dataclass(frozen=True)
class FetchWatch:
    """A consumer's quiet spell: since when its polls found nothing with
    partitions assigned (None: the last one found records, or it had none), when it was
    last probed, and since when its probes found it cut off (None: not cut off)."""

    quiet_since: float | None = None
    probed_at: float | None = None
    cut_off_since: float | None = None


def after_poll(watch: FetchWatch, now: float, found: bool, assigned: bool,
               probe_every_s: float = PROBE_EVERY_S) -> tuple[FetchWatch, bool]:
    """The watch after a poll that found records or not, and whether to probe the
    consumer now: it has partitions `assigned`, and found nothing for `probe_every_s`
    since its spell began or since its last probe."""
    if found or not assigned:
        return FetchWatch(), False
    since = now if watch.quiet_since is None else watch.quiet_since
    last = since if watch.probed_at is None else watch.probed_at
    if now - last < probe_every_s:
        return FetchWatch(since, watch.probed_at, watch.cut_off_since), False
    return FetchWatch(since, now, watch.cut_off_since), True


def after_probe(watch: FetchWatch, now: float, answered: bool, others_answered: bool,
                cut_off_s: float = CUT_OFF_S) -> tuple[FetchWatch, bool]:
    """The watch after a probe, and whether to replace the consumer now: it did not
    answer while the lookup consumer did (`others_answered`), at every probe for
    `cut_off_s`. A probe it answers, or one nobody answers (the brokers are away),
    ends the count."""
    if answered or not others_answered:
        return FetchWatch(watch.quiet_since, watch.probed_at, None), False
    since = now if watch.cut_off_since is None else watch.cut_off_since
    if now - since < cut_off_s:
        return FetchWatch(watch.quiet_since, watch.probed_at, since), False
    return FetchWatch(), True
