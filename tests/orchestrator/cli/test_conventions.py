"""What every `baton` command shares: exit codes in its --help, one error format
(`baton <command>: message`), one syntax for lists of processor ids, and `status`
before the coordinator has started (exit 1, saying so). No broker needed."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.conventions import EXIT_CODES, processor_ids
from orchestrator.cli.main import main
from orchestrator.wire.config import dump_config

COMMANDS = sorted(main.list_commands(None))  # type: ignore[arg-type]


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(dump_config({
        "job": {"name": "sums", "class": "processor.examples:RunningSum",
                "inputs": ["in"], "output": "out"},
        "kafka": {"bootstrap_servers": "127.0.0.1:1"},
        "coordinator": {"token_file": "never/written.token",
                        "url": "http://127.0.0.1:1"}}))
    return path


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), prog_name="baton")
    return result.exit_code, result.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_lists_its_exit_codes_in_its_help(command: str) -> None:
    result = CliRunner().invoke(main, [command, "--help"], prog_name="baton")
    assert result.exit_code == 0
    assert "Exit codes: 0 " in result.output
    assert " ".join(EXIT_CODES[command].split()[:4]) in " ".join(result.output.split())


def test_the_group_help_lists_the_exit_codes_too() -> None:
    result = CliRunner().invoke(main, ["--help"], prog_name="baton")
    assert "Exit codes: 0 success" in result.output and "3 a processor" in result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_a_usage_error_names_the_command(command: str) -> None:
    code, err = _run(command, "--no-such-option")
    assert code == 2
    assert err.startswith(f"baton {command}: No such option"), err
    assert "--no-such-option" in err.splitlines()[0]
    assert f"Try 'baton {command} --help' for help." in err


@pytest.mark.parametrize("args", [("status",), ("plan", "--add", "p1"), ("split",),
                                  ("drain", "--processor", "p1"),
                                  ("forget", "--processor", "p1"),
                                  ("expand", "--topic", "in", "--partitions", "2"),
                                  ("wait", "--until", "balanced"), ("coordinator",),
                                  ("processor", "--id", "p1"), ("audit",)])
def test_a_config_error_names_the_command_the_file_and_exits_2(tmp_path: Path,
                                                               args: tuple[str, ...]) -> None:
    missing = tmp_path / "missing.toml"
    code, err = _run(args[0], "-c", str(missing), *args[1:])
    assert code == 2
    assert err.startswith(f"baton {args[0]}: {missing}: config file not found"), err


def test_an_unknown_command_is_named() -> None:
    code, err = _run("stauts")
    assert code == 2 and err.startswith("baton: No such command 'stauts'"), err


@pytest.mark.parametrize("command", [("status",), ("plan", "--add", "p3"), ("split",),
                                     ("drain", "--processor", "p1"),
                                     ("forget", "--processor", "p1"),
                                     ("expand", "--topic", "in", "--partitions", "2")])
def test_before_the_coordinator_wrote_its_token_the_command_says_so_and_exits_1(
        tmp_path: Path, command: tuple[str, ...]) -> None:
    path = _config(tmp_path)
    code, err = _run(command[0], "-c", str(path), *command[1:])
    assert code == 1, err
    token = tmp_path / "never" / "written.token"
    assert err.startswith(f"baton {command[0]}: the coordinator has not written its token "
                          f"file {token} yet (coordinator.token_file in {path})"), err


def test_a_processor_id_list_reads_the_same_in_both_forms() -> None:
    assert processor_ids("--add", ["p3,p4"]) == ["p3", "p4"]
    assert processor_ids("--add", ["p3", "p4"]) == ["p3", "p4"]
    assert processor_ids("--add", ["p3, p4", "p5", "p3"]) == ["p3", "p4", "p5"]
    assert processor_ids("--add", []) == []


@pytest.mark.parametrize("args", [("plan", "--add", "p3", "--add", "p 4"),
                                  ("plan", "--remove", "p3,p/4"),
                                  ("wait", "--until", "balanced", "--processors", "p3",
                                   "--processors", "p 4"),
                                  ("wait", "--until", "balanced", "--processors", "p3,p 4")])
def test_a_bad_id_in_either_form_is_named_with_its_option(tmp_path: Path,
                                                          args: tuple[str, ...]) -> None:
    code, err = _run(args[0], "-c", str(_config(tmp_path)), *args[1:])
    assert code == 2
    option = args[-2]
    assert err.startswith(f"baton {args[0]}: {option}: "), err
    assert "is not a processor id" in err


def test_the_operations_guide_lists_each_command_s_exit_codes_as_its_help_does() -> None:
    guide = (Path(__file__).resolve().parents[3] / "docs" / "operations.md").read_text()
    for command, codes in EXIT_CODES.items():
        assert f"| `baton {command}` | {codes} |" in guide, command
