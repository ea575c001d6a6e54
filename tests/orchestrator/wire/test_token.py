"""The token file: `write_token` (`baton token`) writes it once, private, and replaces it
only when forced; `baton token` writes every token file of a config and never prints a
token."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

from orchestrator.wire.config import dump_config
from orchestrator.wire.token import read_token, write_token

ROOT = Path(__file__).resolve().parents[3]


def test_write_token_writes_once_and_replaces_only_when_forced(tmp_path: Path) -> None:
    path = tmp_path / "etc" / "coordinator.token"
    assert write_token(path) is True
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = read_token(path)
    assert len(first) >= 40
    assert write_token(path) is False
    assert read_token(path) == first
    assert write_token(path, force=True) is True
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_token(path) != first
    assert [p.name for p in path.parent.iterdir()] == ["coordinator.token"]


def _token(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", "token", "-c",
                           str(config), *args], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)


def test_baton_token_writes_both_files_and_prints_only_their_paths(tmp_path: Path) -> None:
    config = tmp_path / "job.toml"
    operators, processors = tmp_path / "operator.token", tmp_path / "processor.token"
    config.write_text(dump_config({
        "job": {"name": "sums", "class": "processor.examples:RunningSum",
                "inputs": ["events"], "output": "sums"},
        "kafka": {"bootstrap_servers": "127.0.0.1:9"},
        "coordinator": {"token_file": str(operators),
                        "processor_token_file": str(processors)}}))
    done = _token(config)
    assert done.returncode == 0, done.stderr
    tokens = {read_token(operators), read_token(processors)}
    assert len(tokens) == 2
    for path in (operators, processors):
        assert str(path) in done.stdout
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not any(t in done.stdout + done.stderr for t in tokens)
    again = _token(config, "--json")
    assert again.returncode == 1
    assert json.loads(again.stdout) == {"files": [
        {"key": "coordinator.token_file", "path": str(operators), "written": False},
        {"key": "coordinator.processor_token_file", "path": str(processors),
         "written": False}]}
    assert {read_token(operators), read_token(processors)} == tokens
    forced = _token(config, "--force")
    assert forced.returncode == 0, forced.stderr
    assert {read_token(operators), read_token(processors)}.isdisjoint(tokens)


def test_baton_token_names_the_key_of_a_file_it_cannot_write(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    config = tmp_path / "job.toml"
    config.write_text(dump_config({
        "job": {"name": "sums", "class": "processor.examples:RunningSum",
                "inputs": ["events"], "output": "sums"},
        "kafka": {"bootstrap_servers": "127.0.0.1:9"},
        "coordinator": {"token_file": str(blocker / "coordinator.token")}}))
    done = _token(config)
    assert done.returncode == 2
    assert done.stderr.startswith("baton token: coordinator.token_file: "), done.stderr
