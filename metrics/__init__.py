"""Baton's Prometheus metrics, shared by both daemons.

Theory of operation:

- Every instrument is registered on a registry the daemon passes in; nothing here
  touches prometheus_client's global REGISTRY. One `CoordinatorMetrics` per
  coordinator registry, one `ProcessorMetrics` per processor registry (their family
  names are disjoint, so an in-process demo may also put both on one registry).
- Every series carries `job` (the Baton job name). Scrape Baton with
  `honor_labels: true`, or with a scrape `job_name` equal to the Baton job name, so
  the `job` the dashboard and alerts select on is Baton's (and `up` matches it).
- State (lag, catch-up remaining records and ETA, handoffs in flight, store sizes) is
  computed at scrape time by custom collectors from callbacks returning plain data;
  events (handoffs ended, records processed, transactions) are counters and histograms.
- Each daemon also registers `baton_build_info{version}` and prometheus_client's
  process and platform collectors on its own registry (`register_daemon_metrics`).
- Label values are bounded: tasks, processors and topics of the job model, plus the
  fixed vocabularies in `metrics._vocab` (checked at the call site). A job's own
  metrics (`metrics._job`, `context.metrics`) keep at most `MAX_LABEL_SETS` label sets
  per metric and task, later ones folded into "other".

The dashboard (`metrics/dashboards/baton.json`) and the alert rules
(`metrics/alerts.yml`) use only the names in `METRIC_NAMES` (and `up`).
"""

from __future__ import annotations

from metrics._build import BUILD_METRIC_NAMES, baton_version, register_daemon_metrics
from metrics._coordinator import (
    COORDINATOR_METRIC_NAMES,
    CoordinatorMetrics,
    HandoffSample,
    HandoffView,
    LagSample,
    LagView,
)
from metrics._job import MAX_LABEL_SETS, JobInstrument, JobMetrics, JobMetricSet
from metrics._processor import (
    PROCESSOR_METRIC_NAMES,
    NullProcessorMetrics,
    ProcessorMetrics,
    StoreView,
)
from metrics._server import CONTENT_TYPE, MetricsServer, render, serve_metrics
from metrics._vocab import (
    HANDOFF_PHASES,
    CatchUpPath,
    CatchUpSource,
    HandoffOutcome,
    HandoffPhase,
    HeartbeatOutcome,
    ProcessErrorOutcome,
    ProcessorState,
    ProcessorStep,
    TransactionOutcome,
)

__all__ = [
    "BUILD_METRIC_NAMES",
    "CONTENT_TYPE",
    "COORDINATOR_METRIC_NAMES",
    "HANDOFF_PHASES",
    "MAX_LABEL_SETS",
    "METRIC_NAMES",
    "PROCESSOR_METRIC_NAMES",
    "CatchUpPath",
    "CatchUpSource",
    "CoordinatorMetrics",
    "HandoffOutcome",
    "HandoffPhase",
    "HandoffSample",
    "HandoffView",
    "HeartbeatOutcome",
    "LagSample",
    "JobInstrument",
    "JobMetricSet",
    "JobMetrics",
    "LagView",
    "MetricsServer",
    "NullProcessorMetrics",
    "ProcessErrorOutcome",
    "ProcessorMetrics",
    "ProcessorState",
    "ProcessorStep",
    "StoreView",
    "TransactionOutcome",
    "baton_version",
    "register_daemon_metrics",
    "render",
    "serve_metrics",
]

# Every metric family Baton exports, as PromQL names it (counters end in `_total`;
# histograms add `_bucket`, `_sum`, `_count`).
METRIC_NAMES: tuple[str, ...] = (COORDINATOR_METRIC_NAMES + PROCESSOR_METRIC_NAMES
                                  + BUILD_METRIC_NAMES)
