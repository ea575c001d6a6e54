"""A processor's state directory fills up under traffic (a small tmpfs, mounted by the
test as root): the tasks whose stores can no longer write fail loudly and are re-placed,
the processor stays up, nothing is lost, and it takes tasks again once space returns.

Two moments: while its tasks are active (a store commit fails after Kafka's), and while
it warms up as a newcomer (a replica's write fails). The running-sum oracle over the
output topic checks the whole run.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.feeder import Feeder
from tests.oracle_report import oracle_check
from tests.orchestrator.test_e2e import PARTITIONS, Job, finish, start_two
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

# a failed task's processor is excluded from it this long (doubled per attempt): short,
# so the test sees the processor take tasks again soon after space returns; below 8 MiB
# free (of 64) a processor takes no new task
BACKLOG = 200_000
RETRY = {"coordinator": {"failure_backoff_ms": 2000}, "processor": {"min_free_disk_mb": 8}}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs: room for the stores, and quick to fill."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)],
                   check=True, capture_output=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False, capture_output=True)


def fill(disk: Path) -> Path:
    """Write a file until the disk has no block left; returns it."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (1 << 20, 4096):
            chunk = b"\0" * size
            try:
                while True:
                    os.write(fd, chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return filler


def wrote(disk: Path) -> bool:
    """A store on `disk` has written its write-ahead log."""
    return any(p.stat().st_size > 0 for p in disk.glob("state/**/*.log") if p.name != "LOG")


def processor(j: Job, pid: str) -> dict[str, Any]:
    return next(p for p in j.status()["processors"] if p["id"] == pid)


def failed_on(j: Job, pid: str) -> dict[str, str]:
    """Task -> the error `pid` reported failing it (from status)."""
    return {t["name"]: f["error"] for t in j.status()["tasks"]
            for f in t.get("failed", ()) if f["processor"] == pid}


def test_a_full_disk_fails_the_active_tasks_which_move_and_come_back(
        job: Callable[..., Job], broker: Any, small_disk: Path) -> None:
    j = job(**RETRY)
    j.start_coordinator()
    j.start_processor("p1", state_dir=small_disk / "state")
    j.start_processor("p2")
    wait_for(lambda: j.balanced() and sorted(len(a) for a in j.holding().values()) == [2, 2],
             90, "p1 and p2 balanced with 2 tasks each")
    feeder = Feeder(broker, j.config.job.inputs[0], keys=400, rate=300.0).start()
    wait_for(lambda: feeder.sent > 1000, 30, "some traffic")
    held = set(j.holding()["p1"])

    filler = fill(small_disk)
    wait_for(lambda: set(failed_on(j, "p1")) == held, 60, "p1's tasks reported failed")
    errors = failed_on(j, "p1")
    # the full disk failed them; status keeps a task's latest failure on p1, and one
    # retried there meanwhile may have been fenced by the owner it had moved to
    assert any("No space left on device" in e for e in errors.values()), errors
    assert all("No space left on device" in e or "fenced" in e for e in errors.values()), \
        errors
    wait_for(lambda: len(j.holding().get("p2", [])) == PARTITIONS, 60,
             "p1's tasks re-placed on p2")
    j.check_running()                              # the processor itself stays up
    assert processor(j, "p1")["disk_full"], processor(j, "p1")
    time.sleep(5)               # past the backoff: a full disk is given no new task
    assert not j.holding().get("p1") and set(failed_on(j, "p1")) == held

    filler.unlink()
    wait_for(lambda: j.balanced() and bool(j.holding().get("p1")), 120,
             "p1 holding tasks again once space returned")
    j.check_running()
    finish(j, feeder, broker)


def test_a_full_disk_fails_a_warmup_which_succeeds_once_space_returns(
        job: Callable[..., Job], broker: Any, small_disk: Path) -> None:
    j = job(catch_up={"acceptable_lag": 10}, **RETRY)
    feeder = start_two(j, broker)
    producer = broker.producer(**{"linger.ms": 50})
    for i in range(BACKLOG):        # a backlog p3's warmups replay for a few seconds
        while True:
            try:
                producer.produce(j.config.job.inputs[0], key=b"b%d" % (i % 400), value=b"1")
                break
            except BufferError:     # the client's queue is full: let it deliver
                producer.poll(0.1)
    assert producer.flush(60) == 0
    j.start_processor("p3", registered=False, state_dir=small_disk / "state")
    # freeze p3 once a warmup has written to its store, fill its disk, let it go on
    wait_for(lambda: wrote(small_disk), 60, "a warmup on p3 writing",
             step=lambda: time.sleep(0.002))
    j.signal(["p3"], signal.SIGSTOP)
    try:
        filler = fill(small_disk)
    finally:
        j.signal(["p3"], signal.SIGCONT)
    wait_for(lambda: bool(failed_on(j, "p3")), 60, "a warmup on p3 reported failed")
    errors = failed_on(j, "p3")
    assert all("No space left on device" in e for e in errors.values()), errors
    assert not any("cannot open" in e for e in errors.values()), errors   # a write failed
    j.check_running()

    filler.unlink()
    wait_for(lambda: j.balanced() and bool(j.holding().get("p3")), 120,
             "p3 holding tasks once space returned")
    j.check_running()
    sent = feeder.stop() + BACKLOG
    wait_for(lambda: j.all_consumed(sent), 120, f"all {sent} records consumed")
    result = oracle_check(broker, j.config)
    assert result.ok, result
    assert result.records_in == sent
