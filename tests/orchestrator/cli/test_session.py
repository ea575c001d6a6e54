"""What a CLI command says on stderr while it waits for a leading coordinator."""

from __future__ import annotations

from io import StringIO
from typing import Any

import click
import pytest
from click.testing import CliRunner
from rich.console import Console

from orchestrator.cli.main import main
from orchestrator.cli.ops import COMMANDS
from orchestrator.cli.session import Session, poll_until
from orchestrator.wire.client import CLI_LIMIT_S, CoordinatorClient
from orchestrator.wire.http import httpx
from tests.clocks import FakeClock
from tests.orchestrator.wire.test_client import A, B, refused


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

    limits = {c.name: next((p.default for p in c.params if p.name == "timeout"), "none")
              for c in COMMANDS if isinstance(c, click.Command)}
    assert limits == {"coordinator": "none", "status": CLI_LIMIT_S, "plan": CLI_LIMIT_S,
                      "split": CLI_LIMIT_S, "forget": CLI_LIMIT_S, "wait": 600.0, "expand": 600.0,
                      "drain": None}              # 600 with --wait, else CLI_LIMIT_S
    runner = CliRunner()
    assert "default: 60.0" in runner.invoke(main, ["status", "--help"]).output
    assert "600 with --wait, else 60" in runner.invoke(main, ["drain", "--help"]).output
    assert "keep trying within their --timeout (60 s" in \
        " ".join(runner.invoke(main, ["--help"]).output.split())


def _session_client(clock: FakeClock, answers: list[Any], limit: float
                    ) -> tuple[Session, StringIO, Any]:
    """A session on `clock` and a client of two coordinators, a (refused) and b, b
    answering /status with `answers` in turn (the last one for ever)."""
    out = StringIO()
    session = Session(limit, Console(file=out, width=400), clock)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.port == 8701:
            return refused(request)
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        return answer if isinstance(answer, httpx.Response) else httpx.Response(200, json=answer)

    client = CoordinatorClient([A, B], "t", transport=httpx.MockTransport(handler),
                               deadline=session.deadline, notify=session.notify, clock=clock)
    return session, out, client


def _standby_503() -> Any:
    return httpx.Response(503, json={"detail": f"standby coordinator of job j: the leader is "
                                               f"at {A}", "standby": True, "leader": A})


def test_wait_polls_through_a_failover_until_balanced() -> None:
    clock = FakeClock()
    pending = {"balanced": False, "handoffs": [{"task": "Partition 1"}],
               "pending": ["Partition 1 moving to p3"]}
    balanced = {"balanced": True, "handoffs": [], "generation": 3}
    session, out, client = _session_client(
        clock, [_standby_503()] * 6 + [pending, pending, balanced], 180)
    status = poll_until(client, lambda s: bool(s["balanced"]), session, "balanced", True)
    assert status == balanced
    said = out.getvalue().splitlines()
    assert said[0].startswith("baton: no coordinator leads yet: coordinator at "
                              f"{B} answered /status with HTTP 503")
    assert said[-1] == f"baton: coordinator at {B} answered /status as the leader"
    assert clock.monotonic() < 10


def test_wait_gives_up_at_its_timeout_naming_who_answered(capsys: Any) -> None:
    clock = FakeClock()
    session, _, client = _session_client(clock, [_standby_503()], 30)
    with pytest.raises(SystemExit) as exited:
        poll_until(client, lambda s: True, session, "balanced", True)
    assert exited.value.code == 1
    assert 30 <= clock.monotonic() <= 31
    error = capsys.readouterr().err
    assert error.startswith("baton: timed out after 30 s waiting for balanced: coordinator "
                            f"at {B} answered /status with HTTP 503")
