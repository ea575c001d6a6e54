"""ProcessorMetrics: per-task counters, transactions, handoff steps, store bytes at scrape time."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from metrics import CoordinatorMetrics, NullProcessorMetrics, ProcessorMetrics, render

JOB, ME, T0, T1 = "sums", "p1", "Partition 0", "Partition 1"


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"job": JOB, "processor": ME, **labels})


def test_families_register_with_zero_series_for_fixed_vocabularies(registry):
    ProcessorMetrics(registry, JOB, ME)
    for outcome in ("ok", "unreachable", "rejected"):
        assert value(registry, "baton_heartbeats_total", outcome=outcome) == 0
    for phase in ("releasing", "activating"):
        assert value(registry, "baton_processor_handoff_seconds_count", phase=phase) == 0
    assert value(registry, "baton_spark_session_start_seconds_count") == 0
    assert value(registry, "baton_bulk_catchup_seconds_count") == 0
    assert value(registry, "baton_store_view_errors_total") == 0
    assert value(registry, "baton_consumer_replacements_total") == 0


def test_counters_count_per_task(registry):
    m = ProcessorMetrics(registry, JOB, ME)
    m.record_processed(T0, 100)
    m.record_processed(T0)
    m.record_processed(T1, 5)
    m.record_catch_up(T0, "spark", 1_000_000)
    m.record_catch_up(T0, "consumer", 250)
    m.record_catch_up(T0, "consumer", 40, "changelog")
    m.record_transaction(T0, "committed")
    m.record_transaction(T0, "committed")
    m.record_transaction(T0, "fenced")
    m.record_bulk_fallback(T1)
    m.record_heartbeat("unreachable")
    m.record_process_error(T1, "dlq")
    m.record_consumer_replaced()

    assert value(registry, "baton_records_processed_total", task=T0) == 101
    assert value(registry, "baton_records_processed_total", task=T1) == 5
    assert value(registry, "baton_catchup_records_total", task=T0, path="spark",
                 source="input") == 1_000_000
    assert value(registry, "baton_catchup_records_total", task=T0, path="consumer",
                 source="input") == 250
    assert value(registry, "baton_catchup_records_total", task=T0, path="consumer",
                 source="changelog") == 40
    assert value(registry, "baton_transactions_total", task=T0, outcome="committed") == 2
    assert value(registry, "baton_transactions_total", task=T0, outcome="fenced") == 1
    assert value(registry, "baton_bulk_fallbacks_total", task=T1) == 1
    assert value(registry, "baton_heartbeats_total", outcome="unreachable") == 1
    assert value(registry, "baton_process_errors_total", task=T1, outcome="dlq") == 1
    assert value(registry, "baton_consumer_replacements_total") == 1


def test_histograms_observe_durations(registry):
    m = ProcessorMetrics(registry, JOB, ME)
    m.record_handoff_step("activating", 0.08)
    m.record_handoff_step("releasing", 0.4)
    m.record_spark_session_start(4.0)
    m.record_bulk_catch_up(95.0)

    assert value(registry, "baton_processor_handoff_seconds_bucket", phase="activating",
                 le="0.1") == 1
    assert value(registry, "baton_processor_handoff_seconds_sum", phase="releasing") == 0.4
    assert value(registry, "baton_spark_session_start_seconds_bucket", le="5.0") == 1
    assert value(registry, "baton_bulk_catchup_seconds_sum") == 95.0


@pytest.mark.parametrize("call", [
    lambda m: m.record_catch_up(T0, "rsync", 1),
    lambda m: m.record_catch_up(T0, "consumer", 1, "snapshot"),  # type: ignore[arg-type]
    lambda m: m.record_transaction(T0, "committing"),
    lambda m: m.record_handoff_step("planned", 1.0),
    lambda m: m.record_heartbeat("late"),
    lambda m: m.record_process_error(T0, "retry"),
])
def test_label_values_outside_the_vocabulary_are_refused(registry, call):
    m = ProcessorMetrics(registry, JOB, ME)
    with pytest.raises(ValueError, match="is not one of"):
        call(m)


def test_store_bytes_are_read_at_scrape_time(registry):
    sizes = {T0: 4096}
    ProcessorMetrics(registry, JOB, ME, store_view=lambda: dict(sizes))
    assert value(registry, "baton_store_bytes", task=T0) == 4096
    sizes[T0] = 8192
    sizes[T1] = 10
    assert value(registry, "baton_store_bytes", task=T0) == 8192
    assert value(registry, "baton_store_bytes", task=T1) == 10


def test_a_failing_store_view_leaves_the_rest_of_the_scrape(registry, caplog):
    def broken() -> dict[str, int]:
        raise OSError("store closed")

    m = ProcessorMetrics(registry, JOB, ME, store_view=broken)
    m.record_processed(T0, 3)
    with caplog.at_level(logging.ERROR, logger="baton.metrics"):
        text = render(registry).decode()
    assert "baton_records_processed_total" in text
    assert "baton_store_bytes{" not in text
    assert value(registry, "baton_store_view_errors_total") == 1
    assert "store_view" in caplog.text


def test_forget_task_removes_its_series_and_keeps_the_others(registry):
    m = ProcessorMetrics(registry, JOB, ME)
    for task in (T0, T1):
        m.record_processed(task, 1)
        m.record_catch_up(task, "consumer", 1)
        m.record_catch_up(task, "consumer", 1, "changelog")
        m.record_transaction(task, "aborted")
        m.record_bulk_fallback(task)
        m.record_process_error(task, "skip")

    m.forget_task(T0)
    m.forget_task("never held")

    text = render(registry).decode()
    assert f'task="{T0}"' not in text
    assert value(registry, "baton_records_processed_total", task=T1) == 1
    assert value(registry, "baton_transactions_total", task=T1, outcome="aborted") == 1


def test_two_processors_on_two_registries_do_not_clash():
    first, second = CollectorRegistry(), CollectorRegistry()
    ProcessorMetrics(first, JOB, "p1").record_processed(T0, 2)
    ProcessorMetrics(second, JOB, "p2").record_processed(T0, 9)
    labels = {"job": JOB, "task": T0}
    assert first.get_sample_value("baton_records_processed_total",
                                  {**labels, "processor": "p1"}) == 2
    assert first.get_sample_value("baton_records_processed_total",
                                  {**labels, "processor": "p2"}) is None
    assert second.get_sample_value("baton_records_processed_total",
                                   {**labels, "processor": "p2"}) == 9


def test_coordinator_and_processor_families_share_a_registry(registry):
    # an in-process demo may expose both daemons from one registry: names are disjoint
    CoordinatorMetrics(registry, JOB).set_generation(1)
    ProcessorMetrics(registry, JOB, ME).record_processed(T0)
    assert registry.get_sample_value("baton_job_model_generation", {"job": JOB}) == 1
    assert value(registry, "baton_records_processed_total", task=T0) == 1


def test_a_second_instance_on_the_same_registry_is_refused(registry):
    ProcessorMetrics(registry, JOB, ME)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        ProcessorMetrics(registry, JOB, "p2")


def test_the_null_metrics_override_every_method_and_record_nothing(registry):
    public = {n for n, v in vars(ProcessorMetrics).items()
              if callable(v) and not n.startswith("_")}
    assert public <= set(vars(NullProcessorMetrics)), public - set(vars(NullProcessorMetrics))
    null = NullProcessorMetrics()
    null.set_store_view(lambda: {T0: 1})
    null.record_processed(T0, 3)
    null.record_catch_up(T0, "consumer", 2)
    null.record_transaction(T0, "committed")
    null.record_handoff_step("activating", 0.1)
    null.record_spark_session_start(1.0)
    null.record_bulk_catch_up(1.0)
    null.record_bulk_fallback(T0)
    null.record_heartbeat("ok")
    null.record_process_error(T0, "skip")
    null.forget_task(T0)
    assert render(registry) == b""


def test_the_stores_memory_is_read_at_scrape_time(registry):
    memory = {"block_cache": 3 << 20, "memtables": 1 << 20}
    m = ProcessorMetrics(registry, JOB, ME)
    assert "baton_store_block_cache_bytes" not in render(registry).decode()  # no view yet
    m.set_memory_view(lambda: dict(memory))
    assert value(registry, "baton_store_block_cache_bytes") == 3 << 20
    assert value(registry, "baton_store_memtable_bytes") == 1 << 20
    memory["block_cache"] = 5 << 20
    assert value(registry, "baton_store_block_cache_bytes") == 5 << 20


def test_a_failing_memory_view_leaves_the_store_sizes(registry, caplog):
    def broken() -> dict[str, int]:
        raise OSError("stores closed")

    m = ProcessorMetrics(registry, JOB, ME, store_view=lambda: {T0: 4096})
    m.set_memory_view(broken)
    with caplog.at_level(logging.ERROR, logger="baton.metrics"):
        text = render(registry).decode()
    assert value(registry, "baton_store_bytes", task=T0) == 4096
    assert "baton_store_memtable_bytes{" not in text
    assert value(registry, "baton_store_view_errors_total") >= 1
    assert "memory_view" in caplog.text
