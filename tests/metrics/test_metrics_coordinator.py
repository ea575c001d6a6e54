"""CoordinatorMetrics: event instruments; lag, catch-up, handoff gauges computed at scrape time."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from metrics import CoordinatorMetrics, HandoffSample, LagSample, render

JOB = "sums"
T0 = "Partition 0"


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"job": JOB, **labels})


def test_families_register_on_a_fresh_registry_with_zero_series(registry):
    CoordinatorMetrics(registry, JOB)

    for outcome in ("done", "cancelled", "fenced"):
        assert value(registry, "baton_handoffs_total", outcome=outcome) == 0
    for state in ("alive", "draining", "dead"):
        assert value(registry, "baton_processors", state=state) == 0
    for phase in ("planned", "catching_up", "releasing", "activating"):
        assert value(registry, "baton_handoff_phase_seconds_count", phase=phase) == 0
        assert value(registry, "baton_handoffs_in_flight", phase=phase) == 0
    assert value(registry, "baton_invalid_heartbeats_total") == 0
    assert value(registry, "baton_job_model_generation") == 0
    assert value(registry, "baton_handoff_pause_seconds_count") == 0
    assert value(registry, "baton_catchup_acceptable_lag_records") == 0


def test_event_instruments_count_what_the_coordinator_records(registry):
    m = CoordinatorMetrics(registry, JOB, acceptable_lag=1000)

    m.record_phase("catching_up", 42.0)
    m.record_phase("releasing", 0.3)
    m.record_handoff("done", pause_seconds=0.2)
    m.record_handoff("done", pause_seconds=0.4)
    m.record_handoff("cancelled")
    m.record_invalid_heartbeat()
    m.record_invalid_heartbeat()
    m.record_expansion("events")
    m.set_processors({"alive": 3, "dead": 1})
    m.set_generation(7)

    assert value(registry, "baton_handoff_phase_seconds_sum", phase="catching_up") == 42.0
    assert value(registry, "baton_handoff_phase_seconds_bucket", phase="releasing",
                 le="0.5") == 1
    assert value(registry, "baton_handoffs_total", outcome="done") == 2
    assert value(registry, "baton_handoffs_total", outcome="cancelled") == 1
    assert value(registry, "baton_handoff_pause_seconds_count") == 2
    assert value(registry, "baton_handoff_pause_seconds_sum") == pytest.approx(0.6)
    assert value(registry, "baton_handoff_pause_seconds_bucket", le="0.25") == 1
    assert value(registry, "baton_invalid_heartbeats_total") == 2
    assert value(registry, "baton_partition_expansions_total", topic="events") == 1
    assert value(registry, "baton_processors", state="alive") == 3
    assert value(registry, "baton_processors", state="dead") == 1
    assert value(registry, "baton_processors", state="draining") == 0
    assert value(registry, "baton_job_model_generation") == 7
    assert value(registry, "baton_catchup_acceptable_lag_records") == 1000


def test_set_processors_zeroes_states_that_are_gone(registry):
    m = CoordinatorMetrics(registry, JOB)
    m.set_processors({"alive": 2, "dead": 1})
    m.set_processors({"alive": 3})
    assert value(registry, "baton_processors", state="dead") == 0
    assert value(registry, "baton_processors", state="alive") == 3


def test_a_standby_exports_none_of_the_job_s_picture(registry):
    """A coordinator that steps down drops the processors and failed tasks it counted
    (sums over every coordinator count the leader's only), and ignores what a deposed
    leadership's last decisions still set; leading again, it counts again."""
    m = CoordinatorMetrics(registry, JOB)
    m.set_leader(True)
    m.set_processors({"alive": 2, "dead": 1})
    m.set_failed_tasks(2)
    m.set_views(lag_view=lambda: [LagSample(T0, "p1", "active", 5)])
    m.set_leader(False)
    for state in ("alive", "draining", "dead"):
        assert value(registry, "baton_processors", state=state) == 0
    assert value(registry, "baton_tasks_failed") == 0
    assert value(registry, "baton_task_lag_records", task=T0, processor="p1",
                 role="active") is None
    assert value(registry, "baton_coordinator_leader") == 0
    m.set_processors({"dead": 1})
    m.set_failed_tasks(1)
    assert value(registry, "baton_processors", state="dead") == 0
    assert value(registry, "baton_tasks_failed") == 0
    m.set_leader(True)
    m.set_processors({"alive": 1})
    assert value(registry, "baton_processors", state="alive") == 1


@pytest.mark.parametrize("call", [
    lambda m: m.record_phase("done", 1.0),
    lambda m: m.record_handoff("succeeded"),
    lambda m: m.set_processors({"zombie": 1}),
])
def test_label_values_outside_the_vocabulary_are_refused(registry, call):
    m = CoordinatorMetrics(registry, JOB)
    with pytest.raises(ValueError, match="is not one of"):
        call(m)


def test_collector_derives_remaining_and_eta_at_scrape_time(registry):
    view = [LagSample(T0, "p3", "warmup", lag=11_000, rate_records_per_s=500.0)]
    CoordinatorMetrics(registry, JOB, acceptable_lag=1000, lag_view=lambda: list(view))

    labels = {"task": T0, "processor": "p3"}
    assert value(registry, "baton_task_lag_records", role="warmup", **labels) == 11_000
    assert value(registry, "baton_catchup_remaining_records", **labels) == 10_000
    assert value(registry, "baton_catchup_eta_seconds", **labels) == 20.0
    assert value(registry, "baton_catchup_rate_records_per_second", **labels) == 500.0

    # the next scrape reads the view again: nothing to update by hand
    view[0] = LagSample(T0, "p3", "warmup", lag=6_000, rate_records_per_s=1000.0)
    assert value(registry, "baton_catchup_remaining_records", **labels) == 5_000
    assert value(registry, "baton_catchup_eta_seconds", **labels) == 5.0


def test_eta_is_omitted_while_the_rate_is_zero(registry):
    CoordinatorMetrics(registry, JOB, lag_view=lambda: [
        LagSample(T0, "p3", "warmup", lag=500, rate_records_per_s=0.0)])
    labels = {"task": T0, "processor": "p3"}
    assert value(registry, "baton_catchup_remaining_records", **labels) == 500
    assert value(registry, "baton_catchup_eta_seconds", **labels) is None


def test_a_caught_up_warmup_has_nothing_remaining_and_eta_zero(registry):
    CoordinatorMetrics(registry, JOB, acceptable_lag=1000, lag_view=lambda: [
        LagSample(T0, "p3", "warmup", lag=800, rate_records_per_s=0.0)])
    labels = {"task": T0, "processor": "p3"}
    assert value(registry, "baton_catchup_remaining_records", **labels) == 0
    assert value(registry, "baton_catchup_eta_seconds", **labels) == 0


def test_only_warmups_are_catching_up_and_unknown_lag_is_absent(registry):
    CoordinatorMetrics(registry, JOB, lag_view=lambda: [
        LagSample(T0, "p1", "active", lag=3, rate_records_per_s=900.0),
        LagSample(T0, "p2", "standby", lag=40, rate_records_per_s=900.0),
        LagSample("Partition 1", "p3", "warmup", lag=None, rate_records_per_s=10.0),
    ])
    assert value(registry, "baton_task_lag_records", task=T0, processor="p1",
                 role="active") == 3
    assert value(registry, "baton_task_lag_records", task=T0, processor="p2",
                 role="standby") == 40
    for processor in ("p1", "p2"):
        assert value(registry, "baton_catchup_remaining_records", task=T0,
                     processor=processor) is None
    unknown = {"task": "Partition 1", "processor": "p3"}
    assert value(registry, "baton_task_lag_records", role="warmup", **unknown) is None
    assert value(registry, "baton_catchup_remaining_records", **unknown) is None
    assert value(registry, "baton_catchup_rate_records_per_second", **unknown) == 10.0


def test_duplicate_replicas_in_the_view_export_one_series(registry):
    CoordinatorMetrics(registry, JOB, lag_view=lambda: [
        LagSample(T0, "p3", "warmup", lag=900), LagSample(T0, "p3", "warmup", lag=700)])
    text = render(registry).decode()
    assert text.count('baton_catchup_remaining_records{job="sums"') == 1
    assert value(registry, "baton_catchup_remaining_records", task=T0, processor="p3") == 700


def test_handoffs_in_flight_and_oldest_age_per_phase(registry):
    CoordinatorMetrics(registry, JOB, handoff_view=lambda: [
        HandoffSample(T0, "catching_up", 120.0),
        HandoffSample("Partition 1", "catching_up", 30.0),
        HandoffSample("Partition 2", "releasing", 4.0),
        HandoffSample("Partition 3", "done", 1.0),
    ])
    assert value(registry, "baton_handoffs_in_flight", phase="catching_up") == 2
    assert value(registry, "baton_handoffs_in_flight", phase="releasing") == 1
    assert value(registry, "baton_handoffs_in_flight", phase="activating") == 0
    assert value(registry, "baton_handoff_phase_age_seconds", phase="catching_up") == 120.0
    assert value(registry, "baton_handoff_phase_age_seconds", phase="releasing") == 4.0
    assert value(registry, "baton_handoff_phase_age_seconds", phase="activating") is None


def test_a_failing_view_costs_only_its_own_families(registry, caplog):
    def broken() -> list[LagSample]:
        raise RuntimeError("view snapshot failed")

    m = CoordinatorMetrics(registry, JOB, lag_view=broken, handoff_view=lambda: [
        HandoffSample(T0, "no_such_phase", 1.0)])
    m.set_generation(4)

    with caplog.at_level(logging.ERROR, logger="baton.metrics"):
        text = render(registry).decode()
    assert "baton_job_model_generation" in text
    assert "baton_task_lag_records" not in text
    assert "baton_handoffs_in_flight{" not in text
    assert value(registry, "baton_coordinator_view_errors_total") == 2  # one per view
    render(registry)
    assert value(registry, "baton_coordinator_view_errors_total") == 4
    assert "lag_view" in caplog.text and "handoff_view" in caplog.text


def test_set_views_rebinds_one_callback_and_keeps_the_other(registry):
    m = CoordinatorMetrics(registry, JOB, handoff_view=lambda: [
        HandoffSample(T0, "activating", 2.0)])
    m.set_views(lag_view=lambda: [LagSample(T0, "p9", "warmup", lag=10)])
    assert value(registry, "baton_catchup_remaining_records", task=T0, processor="p9") == 10
    assert value(registry, "baton_handoffs_in_flight", phase="activating") == 1


def test_two_instances_on_two_registries_do_not_clash():
    first, second = CollectorRegistry(), CollectorRegistry()
    a = CoordinatorMetrics(first, "a", lag_view=lambda: [LagSample(T0, "p1", "warmup", 5)])
    b = CoordinatorMetrics(second, "b", lag_view=lambda: [LagSample(T0, "p1", "warmup", 7)])
    a.record_handoff("done")
    b.set_generation(2)

    assert first.get_sample_value("baton_handoffs_total", {"job": "a", "outcome": "done"}) == 1
    assert second.get_sample_value("baton_handoffs_total", {"job": "b", "outcome": "done"}) == 0
    assert first.get_sample_value("baton_job_model_generation", {"job": "a"}) == 0
    assert second.get_sample_value("baton_job_model_generation", {"job": "b"}) == 2
    assert first.get_sample_value("baton_catchup_remaining_records",
                                  {"job": "a", "task": T0, "processor": "p1"}) == 5
    assert second.get_sample_value("baton_catchup_remaining_records",
                                   {"job": "b", "task": T0, "processor": "p1"}) == 7


def test_a_second_instance_on_the_same_registry_is_refused(registry):
    CoordinatorMetrics(registry, JOB)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        CoordinatorMetrics(registry, JOB)
