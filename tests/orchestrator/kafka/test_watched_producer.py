"""A deleted WatchedProducer frees its librdkafka client at once, as a plain Producer
does: a client kept alive until the garbage collector's next full pass held its
threads and sockets, and a processor creates one per task activation."""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Iterator

import pytest

from orchestrator.devkit.embedded import free_port
from orchestrator.kafka.watched_producer import WatchedProducer


def _client_threads() -> int:
    """librdkafka's threads in this process (named rdk:...)."""
    tasks = f"/proc/{os.getpid()}/task"
    count = 0
    for tid in os.listdir(tasks):
        try:
            with open(f"{tasks}/{tid}/comm") as comm:
                count += comm.read().startswith("rdk:")
        except FileNotFoundError:
            pass
    return count


@pytest.fixture
def no_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.usefixtures("no_collector")
def test_a_deleted_producer_frees_its_client_without_the_collector() -> None:
    before = _client_threads()
    settings = {"bootstrap.servers": f"127.0.0.1:{free_port()}", "log_level": 0}
    for _ in range(3):
        producer = WatchedProducer(settings)
        producer.losses()       # its error callback runs (nothing listens there)
        del producer
    deadline = time.monotonic() + 10
    while _client_threads() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _client_threads() == before
