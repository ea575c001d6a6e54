"""The state directory's free-space verdict a processor sends with each heartbeat
(processor/daemon/disk.py)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from processor.daemon.disk import StateDisk


def test_a_disk_below_the_minimum_is_full_and_said_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    free = shutil.disk_usage(tmp_path).free
    disk = StateDisk(tmp_path, free + (1 << 40))
    with caplog.at_level(logging.INFO, "baton.processor"):
        assert disk.full() and disk.full()
    assert caplog.text.count("takes no new task") == 1
    assert "min_free_disk_mb" in caplog.text


def test_room_again_is_said(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    free = [0]          # the free bytes the disk reports (any real disk's change under way)
    monkeypatch.setattr(shutil, "disk_usage",
                        lambda path: shutil._ntuple_diskusage(1 << 30, 0, free[0]))
    disk = StateDisk(tmp_path, 8 << 20)
    assert disk.full()
    free[0] = 8 << 20
    with caplog.at_level(logging.INFO, "baton.processor"):
        assert not disk.full()
    assert "8 MiB free again" in caplog.text


def test_zero_turns_the_check_off_and_a_missing_directory_counts_as_full(
        tmp_path: Path) -> None:
    assert not StateDisk(tmp_path / "gone", 0).full()
    assert StateDisk(tmp_path / "gone", 1).full()
