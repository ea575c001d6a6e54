"""The README's quick start, run as written: its one `sh` block, with the test broker's
address put for `localhost:9092`, run by bash from a copy of this checkout in a fresh
directory, from `pip install .` to the second processor's `baton wait` and the stop of
every daemon. Every command must succeed (bash -e), and what each
`python3 next_total.py` prints must be what its comment in the README says.

The environment is a reader's: a fresh virtual environment (the one the README asks for;
the libraries Baton depends on are seen from the tests' own, so `pip install .` builds and
installs only Baton), no PYTHONPATH and no BATON_ variable but two: the coordinator's
`listen` and `url` on a free port instead of the default 8700, which another run of this
test on the same machine could hold.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sysconfig
import time
import venv
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import pytest

from orchestrator.devkit.embedded import free_port
from tests.brokers import Broker, local_broker

ROOT = Path(__file__).resolve().parents[1]
# the Kafka address the quick start names; the test puts its broker's in its place
BOOTSTRAP = "localhost:9092"
# what `pip install .` needs of the checkout is its tracked files; these are what tools,
# runs and builds leave beside them
_LEFT_BY_RUNS = shutil.ignore_patterns(
    ".git", ".venv", ".cache", "build", "*.egg-info", "__pycache__", ".*_cache",
    ".hypothesis", "state", "target", "spark-warehouse")
# the whole quick start, a pip build of Baton included, on a loaded 2-core machine
_SCRIPT_TIMEOUT_S = 420.0
# a daemon of the quick start left running (the script failed before its last line)
# has this long to stop on SIGTERM before it is killed
_STOP_GRACE_S = 30.0


def quick_start() -> str:
    """The shell block of the README's "Quick start" section (there must be one)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```sh\n(.*?)^```$", section, re.S | re.M)
    assert len(blocks) == 1, f"the quick start has {len(blocks)} sh blocks, not one"
    return str(blocks[0])


def expected_totals(commands: str) -> list[str]:
    """What the README says each `python3 next_total.py` prints (its comment)."""
    return re.findall(r"^python3 next_total\.py +# (.+)$", commands, re.M)


@pytest.fixture
def fresh_kafka(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A broker on which the quick start's names (topics "orders" and "order-totals", job
    "order-totals") are new: the session's own, where no other test uses them; for a
    cluster given in BATON_TEST_BOOTSTRAP, where an earlier run left them, one of this
    test's own."""
    if broker.local is not None:
        yield broker
        return
    with local_broker(tmp_path_factory.mktemp("quick-start-broker")) as own:
        yield own


def _reader_venv(where: Path) -> Path:
    """A fresh virtual environment that sees the tests' libraries (a .pth line; not their
    .pth files, so not the checkout's editable Baton) and has no Baton of its own."""
    venv.EnvBuilder(with_pip=True).create(where)
    purelib = subprocess.run(
        [where / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "baton-test-libraries.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return where


def _environment(environment: Path) -> dict[str, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("BATON_") and k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return {**env, "PATH": f"{environment / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            "VIRTUAL_ENV": str(environment),
            "BATON_COORDINATOR__LISTEN": f"127.0.0.1:{port}",
            "BATON_COORDINATOR__URL": f"http://127.0.0.1:{port}"}


def _session(sid: int) -> list[int]:
    """The live processes of session `sid` (the script's and what it started)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:                               # exited meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()   # state, ppid, pgrp, session, ...
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def _stop(pids: list[int]) -> None:
    """SIGTERM each, by its PID; SIGKILL whichever has not exited after the grace."""
    for pid in pids:
        with suppress(ProcessLookupError):             # exited meanwhile
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_GRACE_S
    while (alive := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in alive:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _logs(job: Path) -> str:
    return "".join(f"\n---- {log.name} ----\n{log.read_text(errors='replace')[-6000:]}"
                   for log in sorted(job.glob("*.log")))


@pytest.mark.integration
@pytest.mark.kafka
def test_the_readme_quick_start_runs_as_written(fresh_kafka: Broker, tmp_path: Path) -> None:
    commands = quick_start()
    assert BOOTSTRAP in commands and "PYTHONPATH" not in commands
    expected = expected_totals(commands)
    assert len(expected) == 2, f"two outputs shown in the quick start, found {expected}"
    checkout = tmp_path / "baton"
    shutil.copytree(ROOT, checkout, ignore=_LEFT_BY_RUNS, symlinks=True)
    job = tmp_path / "order-totals"                   # where the quick start puts the job
    assert not job.exists()
    log = tmp_path / "quick-start.log"
    with log.open("wb") as out:
        script = subprocess.Popen(
            ["bash", "-e", "-x", "-c", commands.replace(BOOTSTRAP, fresh_kafka.bootstrap)],
            cwd=checkout, env=_environment(_reader_venv(tmp_path / "venv")),
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    try:
        try:
            script.wait(_SCRIPT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the quick start did not end within {_SCRIPT_TIMEOUT_S:.0f} s:\n"
                        f"{log.read_text(errors='replace')}{_logs(job)}")
        left = _session(script.pid)
    finally:
        _stop(_session(script.pid))
    output = log.read_text(errors="replace")
    assert script.returncode == 0, f"a command failed:\n{output}{_logs(job)}"
    # the quick start's last line stops every daemon it started, and waits for them
    assert not left, f"still running after the quick start: {left}\n{output}{_logs(job)}"
    printed = [line for line in output.splitlines() if not line.startswith("+")]
    found = [line for line in printed if line in expected]
    assert found == expected, f"printed {printed}, the README shows {expected}"
