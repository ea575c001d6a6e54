"""The layout's import rules, read from the source (AST), so a stray import fails here.

- `orchestrator.core` imports only core, wire and metrics of Baton (pure decisions).
- `orchestrator.wire` imports only wire; `orchestrator.kafka` only kafka and wire.
- `orchestrator.daemon` does not import cli, devkit or processor.
- `processor` imports only `orchestrator.wire` and `orchestrator.kafka` of the orchestrator.
- only `orchestrator.cli` and `orchestrator.devkit` import `processor`.
- `processor` in layers: its root (the per-task pieces), `spark`, `runtime`, `daemon`.
- `store` and `metrics` import no orchestrator or processor code.
- no import cycles between Baton's modules, nor between its folders (of any length).
- no private name (`_x`) is imported from another module: what modules share is public
  (tests included).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("orchestrator", "processor", "store", "metrics")

# importer prefix -> Baton prefixes it may import (checked longest prefix first)
ALLOWED: dict[str, tuple[str, ...]] = {
    "orchestrator.wire": ("orchestrator.wire",),
    "orchestrator.kafka": ("orchestrator.kafka", "orchestrator.wire"),
    "orchestrator.core": ("orchestrator.core", "orchestrator.wire", "metrics"),
    "orchestrator.daemon": ("orchestrator.daemon", "orchestrator.core", "orchestrator.kafka",
                            "orchestrator.wire", "metrics"),
    "orchestrator.cli": PACKAGES,
    "orchestrator.devkit": PACKAGES,
    "orchestrator": ("orchestrator",),  # the package's own __init__ only (see _rule)
    "processor": ("processor", "orchestrator.wire", "orchestrator.kafka", "store", "metrics"),
    "store": ("store",),
    "metrics": ("metrics",),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _imports(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """Baton modules imported by `name`, anywhere in the file (lazy imports count)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] in PACKAGES)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if base.split(".")[0] not in PACKAGES:
                continue
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            yield from subs or [base]


# prefixes that name one module, not a folder: a new module beside them needs a rule
EXACT = {"orchestrator"}


def _rule(importer: str) -> tuple[str, ...]:
    for prefix in sorted(ALLOWED, key=len, reverse=True):
        if importer == prefix or (prefix not in EXACT and importer.startswith(prefix + ".")):
            return ALLOWED[prefix]
    raise AssertionError(f"{importer}: no import rule covers this module; add one")


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


GRAPH = {name: sorted(set(_imports(name, path, set(_modules()))))
         for name, path in _modules().items()}


@pytest.mark.parametrize("importer", sorted(GRAPH))
def test_imports_point_down(importer: str) -> None:
    allowed = _rule(importer)
    wrong = [m for m in GRAPH[importer] if not _within(m, allowed)]
    assert not wrong, f"{importer} imports {wrong}; it may import only {allowed}"


# the pure core decides; it never talks to Kafka, starts threads or reads the clock
CORE_FORBIDDEN = ("confluent_kafka", "threading", "time", "asyncio", "httpx", "rocksdict")


def _third_party(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if _within(m, ("orchestrator.core",))))
def test_core_is_pure(module: str) -> None:
    used = _third_party(_modules()[module]) & set(CORE_FORBIDDEN)
    assert not used, f"{module} imports {sorted(used)}: the core must stay free of I/O"


def test_no_import_cycles() -> None:
    """Module-level cycles through any Baton modules (lazy imports included)."""
    edges = {m: [d for d in deps if d in GRAPH and d != m] for m, deps in GRAPH.items()}
    # a package's __init__ re-exporting its own modules is not a cycle of concepts
    for m, deps in edges.items():
        edges[m] = [d for d in deps if not d.startswith(m + ".")]
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in edges[node]:
            if state.get(dep) == 1:
                cycle = stack[stack.index(dep):] + [dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module)


def test_the_rules_catch_a_bad_import() -> None:
    """The checker itself: a core module importing confluent-free daemon code fails."""
    assert not _within("orchestrator.daemon.service", _rule("orchestrator.core.placement"))
    assert not _within("processor.job", _rule("orchestrator.core.grouping"))
    assert _within("orchestrator.wire.config", _rule("processor.runtime"))
    assert not _within("orchestrator.core.model", _rule("processor.runtime"))


def _folder(module: str, path: Path) -> str:
    """The folder (package) a module lives in."""
    return module if path.name == "__init__.py" else module.rpartition(".")[0] or module


def test_the_graph_is_real() -> None:
    """The checks above would pass on an empty graph: it holds every module and known
    edges, lazy imports included."""
    assert len(GRAPH) > 100
    assert "processor.runtime.consumers" in GRAPH["processor.runtime.task_runtime"]
    assert "orchestrator.core.model" in GRAPH["orchestrator.core.coordinator"]
    assert "orchestrator.wire.barrier" in GRAPH["processor.active"]
    assert "orchestrator.core.picture" in GRAPH["orchestrator.core.coordinator"]


def test_folders_import_one_way() -> None:
    """Between folders (packages) too there is no cycle: a folder's modules may import
    a lower folder's, never the other way round."""
    modules = _modules()
    folders: dict[str, set[str]] = {}
    for name, deps in GRAPH.items():
        mine = _folder(name, modules[name])
        for dep in deps:
            if dep not in modules:
                continue
            theirs = _folder(dep, modules[dep])
            # a package's __init__ re-exporting its own modules is not an edge up
            if theirs != mine and not (modules[name].name == "__init__.py"
                                       and theirs.startswith(mine + ".")):
                folders.setdefault(mine, set()).add(theirs)
    # the folder graph is real too: it would pass empty
    assert "orchestrator.core" in folders["orchestrator.daemon"]
    assert "orchestrator.core.handoff" in folders["orchestrator.core"]
    cycle = _cycle(folders)
    assert cycle is None, "folders importing each other: " + " -> ".join(cycle or [])


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle of any length in a graph (node -> nodes it points at), or None."""
    state: dict[str, int] = {}      # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [node, nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, [*path, node])) is not None:
                return found
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start, [])) is not None:
            return found
    return None


def test_the_cycle_check_finds_a_long_cycle() -> None:
    three = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(three) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "d": {"c"}}) is None


# processor/ bottom up: the per-task pieces at its root (active task, replica, changelog
# writer and applier, replay sources, Job API), spark/, runtime/, daemon/
PROCESSOR_LAYERS = ("processor", "processor.spark", "processor.runtime", "processor.daemon")


def _processor_layer(module: str) -> int:
    return max(i for i, layer in enumerate(PROCESSOR_LAYERS) if _within(module, (layer,)))


@pytest.mark.parametrize("importer", sorted(m for m in GRAPH if _within(m, ("processor",))))
def test_processor_layers_point_down(importer: str) -> None:
    """A processor module imports only its own layer's modules and lower layers'; the
    package's own __init__ only re-exports the Job API."""
    mine = _processor_layer(importer)
    above = [m for m in GRAPH[importer]
             if _within(m, ("processor",)) and _processor_layer(m) > mine]
    assert not above, f"{importer} imports {above} of a layer above its own"


def test_processor_layers_are_real() -> None:
    """The layers' edges exist, so the rule above is not checked against nothing."""
    assert "processor.runtime" in GRAPH["processor.daemon.main"]
    assert "processor.active" in GRAPH["processor.runtime.driver"]
    assert "processor.job" in GRAPH["processor.spark.bulk"]
    assert _processor_layer("processor.active") == 0
    assert _processor_layer("processor.daemon.heartbeat") == 3


def _private_imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            yield from (f"{node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__"))


def test_no_private_name_crosses_modules() -> None:
    """A helper two modules share is part of an interface: it is public."""
    found = {name: sorted(_private_imports(path)) for name, path in _modules().items()}
    wrong = {name: names for name, names in found.items() if names}
    assert not wrong, f"private names imported across modules: {wrong}"


def test_the_private_name_check_catches_one(tmp_path: Path) -> None:
    module = tmp_path / "bad_import.txt"
    module.write_text("from orchestrator.core.model import _hidden, Visible\n")
    assert list(_private_imports(module)) == ["orchestrator.core.model._hidden"]


def test_no_test_imports_a_private_name() -> None:
    """Tests use what modules share, by public names: support modules such as
    tests/brokers.py or tests/processor/spark/bulk_support.py, not another module's `_x`."""
    found = {str(path.relative_to(ROOT)): sorted(_private_imports(path))
             for path in (ROOT / "tests").rglob("*.py")}
    wrong = {name: names for name, names in found.items() if names}
    assert not wrong, f"private names imported by tests: {wrong}"
