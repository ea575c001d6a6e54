"""`baton dev` end to end: a job package outside the repository (`[job] path`), JSON
lines in, committed outputs printed, the scaling commands from another terminal
(status, plan, a third processor, check), and Ctrl-C stopping every process it
started, with exit code 0."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.devkit.embedded import free_port

pytestmark = pytest.mark.integration

_JOB = '''
from processor import Job, Output


class Totals(Job):
    def process(self, record, state):
        total = state.get(record.key, 0) + record.value["n"]
        state[record.key] = total
        yield record.key, {"total": total}
        if total > self.params["limit"]:
            yield Output(record.key, {"over": total}, topic="alerts")
'''
_TIMEOUT_S = 90.0


def _job(tmp_path: Path) -> Path:
    """A job package and its config in a directory of their own, outside the repo."""
    package = f"devjobs_{uuid.uuid4().hex[:8]}"
    (tmp_path / "code" / package).mkdir(parents=True)
    (tmp_path / "code" / package / "__init__.py").write_text(textwrap.dedent(_JOB))
    port = free_port()
    config = tmp_path / "job.toml"
    config.write_text(textwrap.dedent(f'''\
        [job]
        name = "dev-{package[-8:]}"
        class = "{package}:Totals"
        path = "code"
        inputs = ["events"]
        output = "totals"
        outputs = ["alerts"]
        key_format = "str"
        value_format = "json"

        [job.params]
        limit = 5

        [kafka]
        bootstrap_servers = "127.0.0.1:1"

        [coordinator]
        listen = "127.0.0.1:{port}"
        url = "http://127.0.0.1:{port}"
        token_file = "./state/coordinator.token"
        monitor_interval_ms = 500

        [processor]
        state_dir = "./state"
        heartbeat_interval_ms = 200
        '''))
    return config


def read_lines(stream: Any, into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line)


def json_outputs(lines: queue.Queue[str], count: int) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + _TIMEOUT_S
    while len(got) < count:
        try:
            got.append(json.loads(lines.get(timeout=max(deadline - time.monotonic(), 0.01))))
        except queue.Empty:
            raise AssertionError(f"{len(got)} of {count} outputs: {got}") from None
    return got


def _baton(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")


def _status(config: Path) -> dict[str, Any]:
    done = _baton("status", "-c", str(config), "--json", cwd=config.parent)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _wait(config: Path, done: Callable[[list[dict[str, Any]]], bool], what: str) -> None:
    """Until `baton status` shows processors for which `done` holds."""
    deadline = time.monotonic() + _TIMEOUT_S
    while not done(processors := _status(config)["processors"]):
        assert time.monotonic() < deadline, f"waiting for {what}: {processors}"
        time.sleep(0.3)


def test_dev_runs_a_job_from_outside_the_repository_and_stops_on_ctrl_c(tmp_path) -> None:
    config = _job(tmp_path)
    records = tmp_path / "in.jsonl"
    records.write_text("\n".join([
        '{"key": "a", "value": {"n": 2}}',
        '{"key": "b", "value": {"n": 1}, "headers": {"src": "web"}}',
        "not a record",
        '{"key": "a", "value": {"n": 4}}']) + "\n")
    err = tmp_path / "dev.err"
    with err.open("w") as stderr:
        dev = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "dev", "-c",
                                str(config), "--input", str(records), "--processors", "2"],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=stderr, text=True)
    extra: subprocess.Popen[bytes] | None = None
    try:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=read_lines, args=(dev.stdout, lines), daemon=True).start()
        shown = json_outputs(lines, 4)
        by_topic = sorted((o["topic"], o["key"], o["value"]) for o in shown)
        assert by_topic == [("alerts", "a", '{"over":6}'), ("totals", "a", '{"total":2}'),
                            ("totals", "a", '{"total":6}'), ("totals", "b", '{"total":1}')]
        assert "in.jsonl:3: skipped: not JSON" in err.read_text()
        effective = tmp_path / "job.dev.toml"
        assert effective.is_file()
        # another terminal: the coordinator under the job's own config, a processor and
        # check under the effective one
        _wait(config, lambda ps: {p["id"] for p in ps} == {"p1", "p2"}, "p1 and p2")
        extra = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "processor",
                                  "-c", str(effective), "--id", "p3"], cwd=tmp_path,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait(config, lambda ps: any(p["id"] == "p3" and p["active"] for p in ps),
              "p3 to take a task")
        plan = _baton("plan", "-c", str(config), "--remove", "p3", "--json", cwd=tmp_path)
        assert plan.returncode == 0, plan.stderr
        check = _baton("check", "-c", str(effective), "--json", cwd=tmp_path)
        findings = {f["subject"]: f["status"] for f in json.loads(check.stdout)["findings"]}
        assert findings["job.class"] == "ok" and findings["job.outputs alerts"] == "ok", check
        assert check.returncode == 0, check.stdout
    finally:
        if extra is not None:
            extra.terminate()
            extra.wait(60)
        dev.send_signal(signal.SIGINT)
        code = dev.wait(_TIMEOUT_S)
    log = err.read_text()
    assert code == 0, log
    pids = [int(p) for p in re.findall(r"\(pid (\d+)\)", log)]
    assert len(pids) == 4, log                   # the broker, the coordinator, p1, p2
    assert not [pid for pid in pids if _alive(pid)]
    assert not (tmp_path / "job.dev.toml").exists()


def test_dev_reads_stdin_until_ctrl_c(tmp_path) -> None:
    """Lines typed (here: written) on stdin go in as they come; SIGINT stops all."""
    config = _job(tmp_path)
    err = tmp_path / "dev.err"
    with err.open("w") as stderr:
        dev = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "dev", "-c",
                                str(config)], cwd=tmp_path, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        assert dev.stdin is not None
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=read_lines, args=(dev.stdout, lines), daemon=True).start()
        dev.stdin.write('{"key": "k", "value": {"n": 3}}\n')
        dev.stdin.flush()
        [first] = json_outputs(lines, 1)
        assert (first["topic"], first["key"], first["value"]) == ("totals", "k", '{"total":3}')
        dev.stdin.write('{"key": "k", "value": {"n": 4}}\n')
        dev.stdin.flush()
        assert sorted((o["topic"], o["value"]) for o in json_outputs(lines, 2)) == [
            ("alerts", '{"over":7}'), ("totals", '{"total":7}')]
    finally:
        dev.send_signal(signal.SIGINT)
        code = dev.wait(_TIMEOUT_S)
    log = err.read_text()
    assert code == 0, log
    assert not [pid for pid in map(int, re.findall(r"\(pid (\d+)\)", log)) if _alive(pid)]


def test_a_job_class_that_does_not_import_is_named_before_anything_starts(tmp_path) -> None:
    config = _job(tmp_path)
    config.write_text(config.read_text().replace('path = "code"', 'path = "elsewhere"'))
    done = _baton("dev", "-c", str(config), "--input", str(config), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(f"baton dev: {config}: job.class: cannot import"), done.stderr
    assert not (tmp_path / "job.dev.toml").exists()
