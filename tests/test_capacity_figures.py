"""docs/operations.md's capacity planning quotes measurements: every figure in it that
carries a size or a time (a number of four digits or more, or one followed by s, ms or
us) is one that docs/performance.md or docs/performance-processor.md reports, so the
sizing advice cannot drift from what the benchmarks measured."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
# 65,259 (records/s), 1,000,000 (keys); 7.20 us, 3.72 s, 46 ms
FIGURE = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+(?!\d)|\d+(?:\.\d+)? (?:s|ms|us)\b)")


def _capacity_planning() -> str:
    text = (DOCS / "operations.md").read_text()
    section = text.split("\n## Capacity planning\n", 1)[1]
    return section.split("\n### Memory and open files per processor\n", 1)[0]


def test_the_capacity_figures_are_the_measured_ones() -> None:
    measured = (DOCS / "performance.md").read_text() + (
        DOCS / "performance-processor.md").read_text()
    figures = FIGURE.findall(_capacity_planning())
    assert {"65,259", "111,142", "7.20 us"} <= set(figures), figures
    unmeasured = sorted({f for f in figures if f not in measured})
    assert not unmeasured, (
        f"docs/operations.md, Capacity planning: figures docs/performance.md and "
        f"docs/performance-processor.md do not report: {unmeasured}")


def test_a_figure_nobody_measured_is_found() -> None:
    assert FIGURE.findall("about 218,000 records/s, 0.8 s, 12 ms; 2000 ms, 1.5x") == [
        "218,000", "0.8 s", "12 ms", "2000 ms"]
