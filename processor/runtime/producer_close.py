"""Closing a stopped task's producer: at once, on a thread of its own, never for good.

A task's producer holds a librdkafka client: its threads, sockets and buffers. Left to
reference counting it can live on until the garbage collector's next full pass
(orchestrator/wire/collector.py), since the error that stopped its task may hold it
through a reference cycle; so a task that stops closes its producer explicitly.

`Producer.close()` first aborts the transaction in progress, then flushes, both without
a time limit. With the brokers away, with a producer that forgot its only broker
(`metadata.recovery.strategy = "none"`, see processor/runtime/activation.py), or with a
`send_offsets_to_transaction` stranded by a broker restart (librdkafka issue 5511), it
never returns: its client and the closing thread would stay for the life of the
daemon, one more at every such stop. So the close ends the transaction itself, one
bounded `abort_transaction` after another for `_END_WITHIN_S` (long enough for a
restarting broker to come back), and calls `close()` only once nothing is left for it
to wait on. A producer whose transaction cannot be ended is dropped instead: its client
goes with the last reference to it, since destroying a client waits on no broker.

That last reference is dropped on the closing thread, never elsewhere. A dropped
producer is often still held by a cycle through the error that stopped its task, and
the full collection that frees such a cycle runs on the daemon's main loop
(orchestrator/wire/collector.py); had the producer gone with the cycle, its
`rd_kafka_destroy` would have run there, and a client whose coordinator request a
broker restart stranded can block in it for good: a processor's loop stopped turning
while its heartbeats went on. So the closing thread keeps the producer, asks for a full
collection, waits until it holds the only reference left, and drops it then: a destroy
that blocks holds one idle thread, not the daemon.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import warnings

from confluent_kafka import KafkaError, KafkaException, Producer

from orchestrator.kafka.retry import kafka_error
from orchestrator.wire.collector import want_full_collection

__all__ = ["close_producer"]

log = logging.getLogger(__name__)

_ABORT_S = 2.0          # one attempt to abort the open transaction
_END_WITHIN_S = 60.0    # how long the close keeps trying to end it
_RETRY_S = 0.5          # between two attempts
_FLUSH_S = 5.0          # what close() may still have to deliver once the transaction ended
_HELD_ELSEWHERE_S = 1.0  # how often a dropped producer's thread looks for other holders

# a stopped task's producer is often fenced: close() cannot abort, and says so
warnings.filterwarnings("ignore", message="Producer abort_transaction failed during close",
                        category=RuntimeWarning)


def close_producer(producer: Producer, end_within_s: float = _END_WITHIN_S
                   ) -> threading.Thread:
    """Shut a stopped task's producer down now, on the thread returned, which ends
    within about `end_within_s` (plus `_FLUSH_S`) whatever the brokers do."""
    # handed over in a box the thread empties: the Thread object holds its arguments
    # until it ends, which would keep a dropped producer alive past the collection
    thread = threading.Thread(target=_close_from, args=([producer], end_within_s),
                              name="baton-producer-close", daemon=True)
    thread.start()
    return thread


def _close_from(box: list[Producer], end_within_s: float) -> None:
    """The closing thread: the producer stays in `box` (a local name would be one more
    reference to count) until it is closed, or dropped here (module doc)."""
    if _close(box[0], end_within_s):
        return
    want_full_collection()
    # two: the box's and getrefcount's argument; the others go with the cycle's collection
    while sys.getrefcount(box[0]) > 2:
        time.sleep(_HELD_ELSEWHERE_S)
    box.clear()         # the client is destroyed here, on this thread


def _close(producer: Producer, end_within_s: float) -> bool:
    """Close `producer` if nothing is left for `close()` to wait on; False: dropped."""
    try:
        if not _transaction_ended(producer, end_within_s):
            log.info("a stopped task's producer could not end its transaction within %.0f s;"
                     " its client goes with the last reference to it", end_within_s)
            return False
        left = producer.flush(_FLUSH_S)
        if left:
            log.info("a stopped task's producer still holds %d records after %.0f s; its "
                     "client goes with the last reference to it", left, _FLUSH_S)
            return False
        producer.close()
    except Exception as exc:  # noqa: BLE001 - the task is gone either way
        log.debug("closing a stopped task's producer: %s", exc)
    return True


def _transaction_ended(producer: Producer, within_s: float) -> bool:
    """Abort the open transaction, again while the brokers do not answer, for at most
    `within_s`. True once `close()` has no transaction left to wait on: aborted, none
    open (`_STATE`) or never to be (a fatal error, such as a fenced producer)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            producer.abort_transaction(_ABORT_S)
            return True
        except KafkaException as exc:
            err = kafka_error(exc)
            if err is None:
                return False
            if err.fatal() or err.code() == KafkaError._STATE:
                return True
        if time.monotonic() + _RETRY_S >= deadline:
            return False
        time.sleep(_RETRY_S)
