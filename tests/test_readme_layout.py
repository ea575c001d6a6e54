"""The README's layout table matches the tree: every path it names exists, and every
package of the product (a folder with an `__init__.py` under orchestrator/, processor/,
store/ or metrics/) has a row of its own or is named (`sub/`) in its parent's row."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("orchestrator", "processor", "store", "metrics")
# a row of the table: | `path/` | what it holds |
ROW = re.compile(r"^\| `([^`]+)` \| (.+) \|$")
# a path the description names inside the row's folder: `handoff/`, `config.py`
NAMED = re.compile(r"`([\w./-]+(?:/|\.py))`")


def _layout() -> dict[str, str]:
    """The table under "## Layout": each row's path and description."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = {m.group(1): m.group(2) for line in section.splitlines()
            if (m := ROW.match(line)) is not None}
    assert len(rows) >= len(PRODUCT), f"no layout table found in README.md: {rows}"
    return rows


def _packages() -> set[str]:
    return {f"{init.parent.relative_to(ROOT)}/" for top in PRODUCT
            for init in (ROOT / top).rglob("__init__.py") if "__pycache__" not in init.parts}


def test_every_path_the_layout_table_names_exists() -> None:
    missing = []
    for path, what in _layout().items():
        if not (ROOT / path).exists():
            missing.append(path)
            continue
        # a name in the description is inside the row's folder, beside it or from the top
        for named in NAMED.findall(what):
            if not any(where.exists() for where in
                       (ROOT / path / named, (ROOT / path).parent / named, ROOT / named)):
                missing.append(f"{named} (in the row of {path})")
    assert not missing, f"README.md's layout table names what does not exist: {missing}"


def test_every_package_of_the_product_is_in_the_layout_table() -> None:
    rows = _layout()
    named = {f"{path}{sub}" for path, what in rows.items() for sub in NAMED.findall(what)
             if sub.endswith("/")}
    packages = _packages()
    assert {"orchestrator/core/handoff/", "processor/runtime/", "store/"} <= packages
    absent = sorted(packages - set(rows) - named)
    assert not absent, f"packages missing from README.md's layout table: {absent}"
