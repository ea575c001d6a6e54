"""Fixtures of the store tests: stores in tmp_path (real rocksdict) and child processes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from store import TaskStore

_REPO = Path(__file__).resolve().parents[2]
_CHILD = Path(__file__).with_name("_child.py")

StoreFactory = Callable[..., TaskStore]
ChildFactory = Callable[..., "subprocess.Popen[str]"]


@pytest.fixture
def store_factory(tmp_path: Path) -> Iterator[StoreFactory]:
    """Open stores under tmp_path by name (default "db"); all closed at teardown."""
    opened: list[TaskStore] = []

    def make(name: str = "db", **kwargs: object) -> TaskStore:
        store = TaskStore(tmp_path / name, **kwargs)  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(store_factory: StoreFactory) -> TaskStore:
    return store_factory()


@pytest.fixture
def child() -> Iterator[ChildFactory]:
    """Start tests/store/_child.py commands; any still running at teardown is killed."""
    started: list[subprocess.Popen[str]] = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(_REPO), os.environ.get("PYTHONPATH", "")) if p)}

    def start(*args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, str(_CHILD), *args], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
