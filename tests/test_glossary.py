"""One word per concept: identifiers use the glossary's words (docs/design.md, "Words"),
never the retired synonyms it names. Read from the source (AST): names of classes,
functions, arguments, variables and attributes."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("orchestrator", "processor", "store", "metrics", "bench")
# `HeartbeatReply.moving` keeps its wire name: a processor of the previous version, whose
# reply model forbids unknown fields, still reads the replies of an upgraded coordinator
# (docs/operations.md, "Upgrades under traffic"); its readers and writers name it so
WIRE = {"orchestrator/wire/protocol.py", "orchestrator/core/replies.py",
        "processor/runtime/task_runtime.py"}


def words(identifier: str) -> list[str]:
    """The words of a snake_case or CamelCase identifier, lower case."""
    return [w.lower() for w in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", identifier)]


def retired(identifier: str, path: Path) -> str | None:
    """Why `identifier` (in `path`) uses a retired word, or None."""
    found = words(identifier)
    if identifier == "moving" and path.as_posix() in WIRE:
        return None
    if {"moves", "moving"} & set(found):
        return "a task changes owner through a handoff: say handoff"
    if "catchup" in found:
        return "catch-up is written catch_up"
    if "standby" in found and ({"producer", "producers"} & set(found)):
        return "a producer made ahead of an activation is a prepared producer"
    return None


def identifiers(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.lineno, node.name
            for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
                yield node.lineno, arg.arg
        elif isinstance(node, ast.ClassDef):
            yield node.lineno, node.name
        elif isinstance(node, ast.Name):
            yield node.lineno, node.id
        elif isinstance(node, ast.Attribute):
            yield node.lineno, node.attr
        elif isinstance(node, ast.keyword) and node.arg:
            yield getattr(node, "lineno", 0), node.arg


def test_words_of_identifiers() -> None:
    assert words("HandoffBook") == ["handoff", "book"]
    assert words("_prepared_producers") == ["prepared", "producers"]
    assert words("TXN_TIMEOUT_S") == ["txn", "timeout", "s"]


def test_the_rule_names_each_retired_word() -> None:
    here = Path("orchestrator/core/placement.py")
    assert retired("moving", here) and retired("ActiveMoves", here)
    assert retired("moving", Path("orchestrator/wire/protocol.py")) is None
    assert retired("move_files", Path("store/db.py")) is None
    assert retired("catchup_rate", here) and retired("catch_up_rate", here) is None
    assert retired("_standby" + "_producers", here) and retired("standby_count", here) is None
    assert retired("_prepared_producers", here) is None


def test_no_identifier_uses_a_retired_word() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            for line, name in identifiers(ast.parse(path.read_text(), str(path))):
                why = retired(name, relative)
                if why:
                    found.append(f"{relative}:{line}: {name}: {why}")
    assert not found, "\n".join(sorted(set(found)))
