"""Every repository path named in a docstring, a comment or the docs exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOPS = ("orchestrator/", "processor/", "store/", "metrics/", "tests/", "bench/", "deploy/",
        "docs/")
_TOPS = "|".join(re.escape(t) for t in TOPS)
PATH = re.compile(rf"(?<![\w./-])((?:{_TOPS})[\w./@-]*\w/?)")
# names that look like paths but are not: coordinator-stream keys ("processor/<id>"),
# glob and unit-template patterns in the docs
NOT_PATHS = re.compile(r"^processor/(p\d*|<id>)$|[*@]$|baton-?$")


def _texts() -> list[Path]:
    files = [p for top in ("orchestrator", "processor", "store", "metrics", "bench", "tests",
                           "deploy") for p in (ROOT / top).rglob("*.py")]
    return [*files, ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]


def test_named_paths_exist() -> None:
    missing = []
    for text in _texts():
        for number, line in enumerate(text.read_text().splitlines(), 1):
            for found in PATH.finditer(line):
                name = found.group(1).rstrip(".")
                if NOT_PATHS.search(name) or (ROOT / name).exists():
                    continue
                missing.append(f"{text.relative_to(ROOT)}:{number}: {name}")
    assert not missing, "paths that do not exist:\n" + "\n".join(missing)
