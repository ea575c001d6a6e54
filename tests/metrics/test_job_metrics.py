"""A job's own metrics (`context.metrics`): on the processor's registry with the job's,
processor's and task's labels, one family across tasks, bounded label sets, series
gone with the task, names that cannot clash with Baton's refused."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter

from metrics import MAX_LABEL_SETS, JobMetricSet, ProcessorMetrics, register_daemon_metrics

_BASE = {"job": "sums", "processor": "p1"}


def _sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {**_BASE, **labels})


def test_instruments_carry_the_task_and_share_a_family_across_tasks() -> None:
    registry = CollectorRegistry()
    metrics = ProcessorMetrics(registry, "sums", "p1")
    t0, t1 = metrics.job_metrics.task("Partition 0"), metrics.job_metrics.task("Partition 1")
    calls = t0.counter("sums_calls_total", "Calls.", ["outcome"])
    calls.labels(outcome="ok").inc()
    t1.counter("sums_calls_total", "Calls.", ["outcome"]).labels(outcome="ok").inc(2)
    t0.gauge("sums_queue", "Queued.").set(4)
    t0.histogram("sums_call_seconds", "Call time.", buckets=(0.1, 1)).observe(0.5)
    assert _sample(registry, "sums_calls_total", task="Partition 0", outcome="ok") == 1
    assert _sample(registry, "sums_calls_total", task="Partition 1", outcome="ok") == 2
    assert _sample(registry, "sums_queue", task="Partition 0") == 4
    assert _sample(registry, "sums_call_seconds_bucket", task="Partition 0", le="1.0") == 1
    metrics.forget_task("Partition 0")         # the task left: its series go
    assert _sample(registry, "sums_calls_total", task="Partition 0", outcome="ok") is None
    assert _sample(registry, "sums_queue", task="Partition 0") is None
    assert _sample(registry, "sums_calls_total", task="Partition 1", outcome="ok") == 2


def test_label_sets_past_the_bound_fold_into_other() -> None:
    registry = CollectorRegistry()
    users = JobMetricSet(registry, "sums", "p1").task("Partition 0").counter(
        "sums_by_user_total", "Per user.", ["user"])
    for user in range(MAX_LABEL_SETS + 5):
        users.labels(user=f"u{user}").inc()
    assert _sample(registry, "sums_by_user_total", task="Partition 0", user="u0") == 1
    assert _sample(registry, "sums_by_user_total", task="Partition 0",
                   user=f"u{MAX_LABEL_SETS}") is None
    assert _sample(registry, "sums_by_user_total", task="Partition 0", user="other") == 5
    users.labels(user="u1").inc()               # a set it holds is still its own
    assert _sample(registry, "sums_by_user_total", task="Partition 0", user="u1") == 2


@pytest.mark.parametrize(("name", "labels", "error"), [
    ("baton_records_processed_total", (), "reserved"),
    ("2fast", (), "letters"),
    ("sums_calls_total", ("task",), "set by Baton"),
    ("sums_calls_total", ("a", "a"), "twice"),
    ("process_cpu_seconds_total", (), "reserved"),       # the daemon's process collector
    ("sums_build_total", (), "Duplicated"),         # another family of the registry
    ("sums_declared_total", ("other",), "already a counter"),
])
def test_names_that_would_clash_are_refused(name: str, labels: tuple[str, ...],
                                            error: str) -> None:
    registry = CollectorRegistry()
    metrics = ProcessorMetrics(registry, "sums", "p1")
    register_daemon_metrics(registry, "sums")
    Counter("sums_build", "Another collector's.", registry=registry)
    metrics.job_metrics.task("t").counter("sums_declared_total", "Declared first.")
    with pytest.raises(ValueError, match=error):
        metrics.job_metrics.task("t").counter(name, "A counter.", labels)


def test_labels_must_be_the_declared_ones() -> None:
    calls = JobMetricSet(CollectorRegistry(), "sums", "p1").task("t").counter(
        "sums_calls_total", "Calls.", ["outcome"])
    with pytest.raises(ValueError, match="outcome"):
        calls.labels(status="ok")
    with pytest.raises(ValueError, match="outcome"):
        calls.inc()
