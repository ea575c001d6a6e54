"""Ingesting a bulk result: the SST files into an empty task store with T2, in one
atomic RocksDB step (nothing half-ingested)."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.wire.config import CatchUpSource
from processor.spark.session import SparkError
from store import Store

__all__ = ["BulkCatchUpError", "BulkResult", "Source", "ingest_bulk"]

Source = CatchUpSource      # the catch-up source a bulk result was folded from


class BulkCatchUpError(SparkError):
    """The bulk path failed (after Spark's task retries); fall back to the consumer."""


@dataclass
class BulkResult:
    """SST files on the driver plus T2, ready for `ingest_bulk` (which removes them)."""

    task: str
    source: Source
    plan: str
    directory: Path
    sst_paths: list[Path]
    offsets: dict[str, int]
    records: int = 0
    skipped: int = 0  # records whose process() raised: skipped, as the consumer path does
    keys: int = 0
    # executor CPU seconds summed over tasks: "read" and "fold" (shuffle plan) or "replay"
    # (local plan: both at once), "write" (SSTs); driver wall seconds: "spark" (the Spark
    # jobs), "fetch" (files to the driver), "ingest", "total" (bulk_catch_up)
    timings: dict[str, float] = field(default_factory=dict)

    def cleanup(self) -> None:
        """Remove the files (ingest copies them into the store)."""
        shutil.rmtree(self.directory, ignore_errors=True)


def ingest_bulk(store: Store, result: BulkResult) -> None:
    """Ingest every file of `result` into `store` in one atomic step, then remove them.

    Args:
        store: an open, empty `store.TaskStore` for the task.
        result: from `bulk_catch_up`.

    Raises:
        BulkCatchUpError: the store already holds state or offsets (bulk catch-up builds
            a task's state from scratch), or RocksDB refused the files (nothing landed).
    """
    began = time.monotonic()
    try:
        applied = store.applied_offsets()
        if applied or next(iter(store.state), None) is not None:
            raise BulkCatchUpError(
                f"task store {store.path} already holds state (applied offsets {applied}); "
                f"bulk catch-up of task {result.task} builds state from scratch: catch up "
                "through the consumer, or destroy the store first")
        store.ingest(result.sst_paths, move=True)
    except BulkCatchUpError:
        raise
    except Exception as exc:  # noqa: BLE001 - StoreError and RocksDB's bare errors
        raise BulkCatchUpError(
            f"ingest of {len(result.sst_paths)} SST files into {store.path} failed, nothing "
            f"was applied: {exc}") from exc
    finally:
        result.cleanup()
    result.timings["ingest"] = time.monotonic() - began
