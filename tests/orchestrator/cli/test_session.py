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
