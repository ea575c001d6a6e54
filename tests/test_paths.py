"""Every repository path named in a docstring, a comment or the docs exists: a path from
the top (`orchestrator/core/model.py`), a path inside a folder (`core/model.py`) or a
module's file name (`model.py`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOPS = ("orchestrator/", "processor/", "store/", "metrics/", "tests/", "bench/", "deploy/",
        "docs/", "examples/")
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


# a path inside some folder ("handoff/machine.py") or a Python file's bare name
PARTIAL = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.py)\b")
# files the README's commands write (`cat > order.py <<'EOF'` in its quick start): named
# in the docs, made in the reader's directory, not in the tree
WRITTEN = frozenset(re.findall(r"^cat > ([\w.-]+) <<", (ROOT / "README.md").read_text(), re.M))


def _repository_files() -> set[str]:
    return {str(p.relative_to(ROOT)) for top in (*TOPS, "run", "pyproject.toml")
            for p in [ROOT / top, *(ROOT / top).rglob("*")]
            if "__pycache__" not in p.parts}


def test_partial_paths_name_a_file() -> None:
    files = _repository_files()
    suffixes = {f[f.index("/") + 1:] for f in files if "/" in f}
    while more := {s[s.index("/") + 1:] for s in suffixes if "/" in s} - suffixes:
        suffixes |= more
    missing = []
    for text in _texts():
        for number, line in enumerate(text.read_text().splitlines(), 1):
            for found in PARTIAL.finditer(line):
                name = found.group(1)
                if name.startswith(TOPS) or name in files or name in suffixes or name in WRITTEN:
                    continue
                missing.append(f"{text.relative_to(ROOT)}:{number}: {name}")
    assert not missing, "paths that name no file:\n" + "\n".join(missing)


def test_partial_path_check_catches_an_old_name() -> None:
    gone = "core/" + "gone" + ".py"    # spelled apart, so this file names no missing path
    assert PARTIAL.findall(f"see {gone} and handoff_driver.py") == [gone, "handoff_driver.py"]


# a section of a document: `docs/jobs.md, "Timers"`, `docs/jobs.md "State"`,
# `docs/runbook.md#batonprocessordead`, or a Markdown link `](performance.md#soak)`
SECTION = re.compile(r'(?<![\w./-])((?:docs/)?[\w-]+\.md),? "([^"]+)"')
ANCHOR = re.compile(r"(?<![\w./-])((?:docs/)?[\w-]+\.md)#([\w-]+)")
LINK = re.compile(r"\]\(([\w./-]+\.md)#([\w-]+)\)")


# the brief's design document: the repository's own is docs/design.md
RETIRED = "DESIGN" + ".md"


def _headings(document: Path) -> list[str]:
    return [line.lstrip("#").strip() for line in document.read_text().splitlines()
            if line.startswith("#") and not line.startswith("#!")]


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _document(name: str, beside: Path) -> Path | None:
    for candidate in (ROOT / name, ROOT / "docs" / name, beside.parent / name):
        if candidate.is_file():
            return candidate
    return None


def _broken_sections(text: Path) -> list[str]:
    broken = []
    for number, line in enumerate(text.read_text().splitlines(), 1):
        where = f"{text.relative_to(ROOT)}:{number}"
        for pattern, by_anchor in ((SECTION, False), (ANCHOR, True), (LINK, True)):
            for found in pattern.finditer(line):
                name, section = found.groups()
                document = _document(name, text)
                if document is None:
                    broken.append(f"{where}: {name} does not exist")
                elif by_anchor and section not in {_anchor(h) for h in _headings(document)}:
                    broken.append(f"{where}: {name} has no heading with the anchor #{section}")
                elif not by_anchor and not any(h.startswith(section)
                                               for h in _headings(document)):
                    broken.append(f"{where}: {name} has no heading {section!r}")
        if RETIRED in line:
            broken.append(f"{where}: {RETIRED} is not in the repository: name docs/design.md")
    return broken


def test_named_sections_exist() -> None:
    """A reference to a document's section names a heading that is there."""
    broken = [b for text in _texts() for b in _broken_sections(text)]
    assert not broken, "references to sections that do not exist:\n" + "\n".join(broken)


def test_section_check_catches_a_missing_heading() -> None:
    text = ROOT / "tests" / "section-check.md"
    jobs, runbook = "docs/" + "jobs.md", "docs/" + "runbook.md"    # spelled apart: this
    text.write_text(f'see {jobs}, "Timers" and {jobs}, "Gone" and '   # file names none
                    f"[it](performance.md#soak) and {runbook}#nowhere\n")
    try:
        broken = _broken_sections(text)
    finally:
        text.unlink()
    assert [b.split(": ", 1)[1] for b in broken] == [
        "docs/jobs.md has no heading 'Gone'",
        "docs/runbook.md has no heading with the anchor #nowhere"]
