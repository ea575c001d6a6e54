"""Every package's public surface: `from P import *` works for every module of Baton."""

from __future__ import annotations

import importlib
import pkgutil
import types

import pytest

PACKAGES = ("orchestrator", "processor", "store", "metrics")


def _modules() -> list[str]:
    names: list[str] = []
    for top in PACKAGES:
        package = importlib.import_module(top)
        names.append(top)
        names += [m.name for m in pkgutil.walk_packages(package.__path__, f"{top}.")
                  if not m.name.endswith("__main__")]     # runs the CLI when imported
    return names


@pytest.mark.parametrize("module", _modules())
def test_star_import(module: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {module} import *", namespace)  # noqa: S102 - the statement under test
    exported = getattr(importlib.import_module(module), "__all__", None)
    if exported is not None:
        assert set(exported) <= set(namespace), module


def _packages() -> list[str]:
    return [m for m in _modules() if hasattr(importlib.import_module(m), "__path__")]


@pytest.mark.parametrize("package", _packages())
def test_a_package_that_lists_modules_lists_them_all(package: str) -> None:
    """A package's `__all__` names objects it exports, or its modules: then every one
    of them (a new module cannot be left out of the package's surface)."""
    module = importlib.import_module(package)
    children = {m.name for m in pkgutil.iter_modules(module.__path__)
                if not m.name.startswith("_")}
    exported = set(getattr(module, "__all__", ()))
    names_modules = all(isinstance(getattr(module, n, None), types.ModuleType)
                        or n not in vars(module) for n in exported)
    if exported and exported <= children and names_modules:
        assert exported == children, f"{package}.__all__ leaves out {children - exported}"


def test_metrics_vocabulary_copies_equal_the_domain() -> None:
    """metrics/ may not import the domain, so it keeps copies of its words: pinned here."""
    from typing import get_args

    from metrics._vocab import CatchUpSource as MetricsSource
    from orchestrator.wire.config import CatchUpSource

    assert get_args(MetricsSource) == get_args(CatchUpSource)


def test_the_store_s_partition_check_agrees_with_the_wire_s() -> None:
    """store/ may not import the orchestrator, so `offset_key` checks "topic:N" itself:
    every name the wire accepts, the store accepts; what the store refuses, the wire
    refuses too (the store's check is the looser one: it guards its own key space)."""
    import pytest

    from orchestrator.wire.partitions import PartitionNameError, parse_partition
    from store.codec import offset_key

    for good in ("events:0", "a.b_c-d:12", "1:3", "x" * 249 + ":7"):
        parse_partition(good)
        assert offset_key(good)
    for bad in ("events", "events:", ":3", "events:-1", "events:x", "events:1a"):
        with pytest.raises(ValueError):
            offset_key(bad)
        with pytest.raises(PartitionNameError):
            parse_partition(bad)
