"""What a CLI command says on stderr while it waits for a leading coordinator."""

from __future__ import annotations

from io import StringIO

from rich.console import Console

from orchestrator.cli.session import Session
from orchestrator.wire.clock import FakeClock


def test_the_cli_says_each_reason_once_then_again_every_few_seconds() -> None:
    clock = FakeClock()
    out = StringIO()
    session = Session(30, Console(file=out, width=300), clock)
    for _ in range(3):
        session.notify("no coordinator leads yet: [Errno 111]")
        clock.advance(1)
    session.notify("coordinator at b answered /status as the leader", waiting=False)
    clock.advance(10)
    session.notify("no coordinator leads yet: [Errno 111]")
    lines = out.getvalue().splitlines()
    assert lines == [
        "baton: no coordinator leads yet: [Errno 111] (trying for up to 30 s more)",
        "baton: coordinator at b answered /status as the leader",
        "baton: no coordinator leads yet: [Errno 111] (trying for up to 17 s more)"]


def test_every_command_that_asks_the_coordinator_has_a_bounded_documented_limit() -> None:
    import click
    from click.testing import CliRunner

    from orchestrator.cli.main import main
    from orchestrator.cli.ops import COMMANDS
    from orchestrator.wire.client import CLI_LIMIT_S

    limits = {c.name: next((p.default for p in c.params if p.name == "timeout"), "none")
              for c in COMMANDS if isinstance(c, click.Command)}
    assert limits == {"coordinator": "none", "status": CLI_LIMIT_S, "plan": CLI_LIMIT_S,
                      "split": CLI_LIMIT_S, "wait": 600.0, "expand": 600.0,
                      "drain": None}              # 600 with --wait, else CLI_LIMIT_S
    runner = CliRunner()
    assert "default: 60.0" in runner.invoke(main, ["status", "--help"]).output
    assert "600 with --wait, else 60" in runner.invoke(main, ["drain", "--help"]).output
    assert "keep trying within their --timeout (60 s" in \
        " ".join(runner.invoke(main, ["--help"]).output.split())
