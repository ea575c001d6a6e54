"""Which metric names a PromQL expression reads, for the dashboard and alert tests.

Not a PromQL parser: it removes what cannot be a metric name (strings, label
matchers, ranges, grouping clauses, Grafana variables) and keeps the identifiers that
are not function calls or keywords. Syntax itself is checked by promtool.
"""

from __future__ import annotations

import re

__all__ = ["metric_names"]

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE)
_GRAFANA_VARS = re.compile(r"\$\{[^}]*\}|\$\w+")
_OFFSET = re.compile(r"\boffset\s+-?[\w.]+", re.IGNORECASE)
_IDENT = re.compile(r"(?<![\w.:])([A-Za-z_:][\w:]*+)(?!\s*\()")  # *+: no backtracking
_KEYWORDS = frozenset({
    "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
    "group_left", "group_right", "inf", "nan", "atan2",
})


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` selects (identifiers that are not functions or keywords)."""
    text = _STRINGS.sub(" ", expr)
    text = _GRAFANA_VARS.sub(" ", text)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _OFFSET.sub(" ", text)
    return {m for m in _IDENT.findall(text) if m.lower() not in _KEYWORDS}
