"""Spark for bulk catch-up and `baton audit` (see `session` for the theory of operation)."""

from __future__ import annotations

from processor.job import load_job
from processor.spark.fold import FoldState, Timings, replay
from processor.spark.reader import (
    CONSUME_BATCH,
    CONSUME_WAIT_S,
    READ_IDLE_TIMEOUT_S,
    Chunk,
    Ranges,
    ReadError,
    key_partition,
    parse_ranges,
    plan_chunks,
    read_batches,
    read_range,
    without_markers,
)
from processor.spark.session import (
    EXECUTOR_WAIT_S,
    JAVA_MIN_MAJOR,
    MASTER_CONNECT_TIMEOUT_S,
    SHUFFLE_PARTITIONS,
    TASK_ATTEMPTS,
    SparkError,
    SparkUnavailableError,
    spark_failure,
    spark_session,
    startup_seconds,
    stop_spark,
)

__all__ = [
    "CONSUME_BATCH", "CONSUME_WAIT_S", "Chunk", "EXECUTOR_WAIT_S", "FoldState",
    "JAVA_MIN_MAJOR", "MASTER_CONNECT_TIMEOUT_S", "READ_IDLE_TIMEOUT_S", "Ranges",
    "ReadError", "SHUFFLE_PARTITIONS", "SparkError", "SparkUnavailableError",
    "TASK_ATTEMPTS", "Timings", "key_partition", "load_job", "parse_ranges",
    "plan_chunks", "read_batches", "read_range", "without_markers", "replay", "spark_failure",
    "spark_session", "startup_seconds", "stop_spark",
]
