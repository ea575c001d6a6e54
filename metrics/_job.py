"""A job's own metrics (`context.metrics`), on the processor's registry.

Every series of a job metric carries `job`, `processor` and `task` besides the labels
the job declares, so one family serves every task of the processor; a task's series
are removed when the task leaves the processor (`JobMetricSet.forget`), as Baton's own
per-task series are. Families are declared by name from any task's `setup` (or
`process`): the same name, kind, help and labels give the same family back; anything
else is refused, as are names with the daemon's own prefixes (`baton_`, `process_`,
`python_`) and the labels Baton sets.

Cardinality is bounded: a metric keeps at most `MAX_LABEL_SETS` distinct label sets
per task; a later new set is folded into the set whose every declared label is
`"other"` (logged once per metric and task), so a label fed from the data (a user id)
cannot grow the scrape without bound. Pick labels from small vocabularies.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any, Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["MAX_LABEL_SETS", "OTHER", "JobInstrument", "JobMetricSet", "JobMetrics"]

log = logging.getLogger("baton.metrics")

# label sets per metric and task: enough for a status or outcome vocabulary times a
# few kinds; a processor of 64 tasks then serves at most 6,400 series per metric
MAX_LABEL_SETS = 100
OTHER = "other"          # what a label set past the bound is folded into
_BATON_LABELS = ("job", "processor", "task")
# Baton's own families and those of the collectors every daemon registers
# (metrics/_build.py), which a registry does not check at registration
_RESERVED_PREFIXES = ("baton_", "process_", "python_")
_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_Kind = Literal["counter", "gauge", "histogram"]
_KINDS: dict[_Kind, type[Any]] = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}


class JobInstrument:
    """One job metric as a task sees it: `labels(**values)` picks a series (the job's,
    processor's and task's labels are set already); without declared labels, call the
    metric's method (`inc`, `dec`, `set`, `observe`) on it directly."""

    def __init__(self, family: _Family, task: str) -> None:
        self._family = family
        self._task = task

    def labels(self, **values: str) -> Any:
        """The series of these label values (prometheus_client's child: `inc`, `set`,
        `observe`, ...), or the folded `"other"` series past `MAX_LABEL_SETS`.

        Raises:
            ValueError: the names are not the metric's declared labels.
        """
        return self._family.child(self._task, values)

    def inc(self, amount: float = 1) -> None:
        self.labels().inc(amount)

    def dec(self, amount: float = 1) -> None:
        self.labels().dec(amount)

    def set(self, value: float) -> None:
        self.labels().set(value)

    def observe(self, value: float) -> None:
        self.labels().observe(value)


class _Family:
    """One declared job metric: its prometheus_client family and its series per task."""

    def __init__(self, kind: _Kind, name: str, documentation: str, labels: tuple[str, ...],
                 metric: Any, base: tuple[str, str]) -> None:
        self.kind, self.name, self.documentation, self.labels = kind, name, documentation, labels
        self._metric = metric
        self._base = base
        self._sets: dict[str, set[tuple[str, ...]]] = {}

    def child(self, task: str, values: dict[str, str]) -> Any:
        if set(values) != set(self.labels):
            raise ValueError(f"job metric {self.name!r} has labels {list(self.labels)}, "
                             f"given {sorted(values)}")
        key = tuple(str(values[label]) for label in self.labels)
        sets = self._sets.setdefault(task, set())
        if key not in sets:
            if len(sets) >= MAX_LABEL_SETS:
                if (OTHER,) * len(key) not in sets:
                    log.warning("job metric %r, task %r: more than %d label sets; new ones "
                                "are counted under %r", self.name, task, MAX_LABEL_SETS, OTHER)
                key = (OTHER,) * len(key)
            sets.add(key)
        return self._metric.labels(*self._base, task, *key)

    def forget(self, task: str) -> None:
        for key in self._sets.pop(task, ()):
            try:
                self._metric.remove(*self._base, task, *key)
            except KeyError:
                pass


class JobMetricSet:
    """The job metrics of one processor, on its registry.

    Args:
        registry: the processor's registry (served on its `/metrics`).
        job, processor: the labels every series carries.
    """

    def __init__(self, registry: CollectorRegistry, job: str, processor: str) -> None:
        self._registry = registry
        self._base = (job, processor)
        self._families: dict[str, _Family] = {}

    @classmethod
    def unserved(cls) -> JobMetricSet:
        """Metrics that go nowhere (a Spark executor's, a replay-only context's)."""
        return cls(CollectorRegistry(), "", "")

    def task(self, task: str) -> JobMetrics:
        """What `context.metrics` is for `task`."""
        return JobMetrics(self, task)

    def declare(self, kind: _Kind, name: str, documentation: str, labels: Sequence[str],
                **options: Any) -> _Family:
        labels = tuple(labels)
        family = self._families.get(name)
        if family is not None:
            if (family.kind, family.documentation, family.labels) != (kind, documentation,
                                                                     labels):
                raise ValueError(f"job metric {name!r} is already a {family.kind} with labels "
                                 f"{list(family.labels)} and another help text; declare it "
                                 f"the same way in every task")
            return family
        _check_names(name, labels)
        try:
            metric = _KINDS[kind](name, documentation, [*_BATON_LABELS, *labels],
                                  registry=self._registry, **options)
        except ValueError as exc:       # a name another collector on the registry has
            raise ValueError(f"job metric {name!r}: {exc}") from None
        family = self._families[name] = _Family(kind, name, documentation, labels, metric,
                                                self._base)
        return family

    def forget(self, task: str) -> None:
        """Remove `task`'s series: the task left the processor."""
        for family in self._families.values():
            family.forget(task)


class JobMetrics:
    """`context.metrics`: declare a job metric (or get the one declared) for this task.

    Each method takes the metric's name (Prometheus rules; counters end in `_total`),
    its help text and the job's own label names (not `job`, `processor` or `task`,
    which Baton sets). Raises ValueError for a bad or taken name, or a name declared
    before as another kind or with other labels.
    """

    def __init__(self, metrics: JobMetricSet, task: str) -> None:
        self._set = metrics
        self._task = task

    def counter(self, name: str, documentation: str, labels: Sequence[str] = ()
                ) -> JobInstrument:
        return JobInstrument(self._set.declare("counter", name, documentation, labels),
                             self._task)

    def gauge(self, name: str, documentation: str, labels: Sequence[str] = ()
              ) -> JobInstrument:
        return JobInstrument(self._set.declare("gauge", name, documentation, labels),
                             self._task)

    def histogram(self, name: str, documentation: str, labels: Sequence[str] = (),
                  buckets: Sequence[float] | None = None) -> JobInstrument:
        options = {} if buckets is None else {"buckets": tuple(buckets)}
        return JobInstrument(self._set.declare("histogram", name, documentation, labels,
                                               **options), self._task)


def _check_names(name: str, labels: tuple[str, ...]) -> None:
    if not _NAME.match(name) or name.startswith(_RESERVED_PREFIXES):
        raise ValueError(f"job metric name {name!r}: use letters, digits and _, not starting "
                         f"with a digit nor with {', '.join(_RESERVED_PREFIXES)} (reserved "
                         f"for the daemon's own); prefix it with the job's name")
    for label in labels:
        if not _NAME.match(label) or label.startswith("__") or label in _BATON_LABELS:
            raise ValueError(f"job metric {name!r}: label {label!r} is not allowed ("
                             f"{', '.join(_BATON_LABELS)} are set by Baton)")
    if len(set(labels)) != len(labels):
        raise ValueError(f"job metric {name!r}: a label is named twice in {list(labels)}")
