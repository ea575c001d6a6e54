"""Shared fixtures: one broker per test session (Apache Kafka, the embedded noida-db, or
the broker in BATON_TEST_BOOTSTRAP), topic factories, configs pointing at it, and
Baton's daemons as subprocesses.

What tests import lives in plain modules beside this one (pytest loads a conftest as
`conftest`, so importing it as `tests.conftest` would make a second copy of everything
in it): tests/brokers.py, tests/feeder.py, tests/daemon_support.py, tests/waiting.py,
tests/oracle_report.py, tests/rocksdb_options.py and tests/faults_support.py.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.brokers import Broker, broker_kind, local_broker
from tests.daemon_support import Daemon


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `kafka` test what only Apache Kafka does: the embedded broker has
    none of it, so under BATON_TEST_BROKER=embedded they are deselected (not skipped).
    Tests marked `kafka3` stop, kill and freeze nodes of the three-node cluster: they
    are deselected under any other broker kind (their lane runs them on it)."""
    kind = broker_kind()

    def unfit(item: pytest.Item) -> bool:
        return ((kind == "embedded" and item.get_closest_marker("kafka") is not None)
                or (kind != "kafka3" and item.get_closest_marker("kafka3") is not None))

    dropped = [item for item in items if unfit(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not unfit(item)]


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """The session's broker: BATON_TEST_BOOTSTRAP's, else a local one of BATON_TEST_BROKER's
    kind."""
    given = os.environ.get("BATON_TEST_BOOTSTRAP")
    if given:
        yield Broker(given, {}, None)
        return
    with local_broker(tmp_path_factory.mktemp("broker")) as local:
        yield local


@pytest.fixture(scope="module")
def _module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with local_broker(tmp_path_factory.mktemp("restartable")) as local:
        yield local


@pytest.fixture
def restartable_broker(_module_broker: Broker) -> Broker:
    """A broker of the module's own (of BATON_TEST_BROKER's kind), which its tests may
    stop, restart or kill: a broker given in BATON_TEST_BOOTSTRAP is shared and not ours
    to stop. One per module, not per test: a broker's start is a JVM's, the costliest
    step of such a test. Each test finds it running (one that failed with it stopped
    does not fail the next), and tests keep apart by their own topics."""
    local = _module_broker.local
    assert local is not None
    if _module_broker.cluster is not None:    # starts the nodes that are down, if any
        _module_broker.cluster.thaw()
        _module_broker.cluster.start()
    elif local.pid is None:           # stopped or killed by a test that then failed
        local.start()
    return _module_broker


@pytest.fixture
def unique() -> Callable[[str], str]:
    """Unique names, so tests sharing one broker never see each other's topics."""
    def make(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:8]}"
    return make


@pytest.fixture
def job_config(broker: Broker, tmp_path: Path, unique: Callable[[str], str]
               ) -> Callable[..., dict[str, Any]]:
    """A factory of raw config mappings for a fresh job on the shared broker."""
    def make(partitions: int = 4, **sections: dict[str, Any]) -> dict[str, Any]:
        name = unique("job")
        inputs = broker.create_topic(unique("events"), partitions)
        output = broker.create_topic(unique("sums"), partitions)
        raw: dict[str, Any] = {
            # expansion_grace_ms 0: the tests' producers see a new partition count before
            # they write again (tests of the grace set their own)
            "job": {"name": name, "class": "processor.examples:RunningSum",
                    "inputs": [inputs], "output": output, "expansion_grace_ms": 0},
            "kafka": broker.kafka_table(),
            "processor": {"state_dir": str(tmp_path / "state"), **broker.processor_table()},
            "coordinator": {"token_file": str(tmp_path / "coordinator.token")},
            "catch_up": broker.catch_up_table(),
        }
        for section, values in sections.items():
            raw.setdefault(section, {}).update(values)
        return raw
    return make


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """A factory: `daemons(name, "processor", "-c", file, "--id", "p1")` starts one
    (`env={...}`: extra environment variables).

    Every daemon still running at teardown is killed (by its PID), so a failing test
    never leaves processes behind; the last lines of each log are printed on failure.
    """
    started: list[Daemon] = []

    def start(name: str, *args: str, env: dict[str, str] | None = None,
              prefix: list[str] | None = None) -> Daemon:
        daemon = Daemon(name, [str(a) for a in args], tmp_path / f"{name}.log", env, prefix)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.kill()
        # one that died on its own shows its whole traceback, not only its end
        died = daemon.proc.returncode not in (0, -signal.SIGKILL, -signal.SIGTERM)
        tail = daemon.log().splitlines()[-80 if died else -15:]
        print(f"---- {daemon.name} (exit {daemon.proc.returncode}) ----", *tail, sep="\n")


@pytest.fixture
def coordinated(job_config: Callable[..., dict[str, Any]], tmp_path: Path
                ) -> Callable[..., tuple[Any, Path]]:
    """A factory: a job config with its own coordinator port and short, test-friendly
    intervals, written to a TOML file. Returns (Config, path)."""
    from orchestrator.devkit.embedded import free_port
    from orchestrator.wire.config import dump_config, load_config

    def make(partitions: int = 4, **sections: dict[str, Any]) -> tuple[Any, Path]:
        port = free_port()
        defaults: dict[str, dict[str, Any]] = {
            "coordinator": {"listen": f"127.0.0.1:{port}", "url": f"http://127.0.0.1:{port}",
                            "release_timeout_ms": 5000, "monitor_interval_ms": 500,
                            "processor_timeout_ms": 4000, "takeover_ms": 2000},
            "processor": {"heartbeat_interval_ms": 200, "coordinator_grace_ms": 20000,
                          "commit_interval_ms": 100},
            "catch_up": {"acceptable_lag": 200, "max_warmups": 2},
        }
        for section, values in sections.items():
            defaults.setdefault(section, {}).update(values)
        raw = job_config(partitions, **defaults)
        path = tmp_path / f"{raw['job']['name']}.toml"
        path.write_text(dump_config(raw))
        return load_config(path), path
    return make


# seconds spent per test file (setup, call and teardown): ./run test's lanes are balanced
# by file, so a session lists where its time went, file by file
_FILE_SECONDS: dict[str, float] = {}
_FILES_LISTED = 12


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The session's slowest files, and the fault suite's table (tests/test_faults.py):
    one row a case, when any ran."""
    if len(_FILE_SECONDS) > 1:
        slowest = sorted(_FILE_SECONDS.items(), key=lambda item: -item[1])[:_FILES_LISTED]
        terminalreporter.write_line("")
        terminalreporter.write_line(f"slowest files ({len(_FILE_SECONDS)} ran, "
                                    f"{sum(_FILE_SECONDS.values()):.0f} s in all):")
        for path, seconds in slowest:
            terminalreporter.write_line(f"{seconds:8.1f}s {path}")
    faults = sys.modules.get("tests.faults_support")
    results = faults.FAULT_RESULTS if faults is not None else []
    if not results:
        return
    write = terminalreporter.write_line
    write("")
    write(f"{'fault case':<56} {'in':>7} {'out':>7} {'lost':>5} {'dup':>5} {'wrong':>5} "
          f"{'s':>5}")
    for case, rin, rout, lost, dup, wrong, seconds in results:
        write(f"{case:<56} {rin:>7} {rout:>7} {lost:>5} {dup:>5} {wrong:>5} {seconds:>5.0f}")
    for figure, seconds in faults.FAULT_FIGURES.items() if faults is not None else ():
        write(f"{figure}: {seconds:.3f} s")
