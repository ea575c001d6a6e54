"""A command's conversation with the coordinator: its time limit, what it says while it
waits, and how the coordinator's errors become exit codes.

Every operator command runs under one `Deadline` (its `--timeout`): the client retries
within it while no coordinator leads (a failover, a restart), `wait` polls within it,
and nothing outlives it. What a command waits for goes to stderr as it happens, so a
human sees why it has not returned and `--json` output on stdout stays intact.
Exit codes: 0 done, 1 not done (timeout, no leading coordinator, refused operation, no
token file yet: the coordinator has not started), 2 bad usage or configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from orchestrator.cli.conventions import command_name, fail
from orchestrator.wire.client import CoordinatorClient, CoordinatorError, CoordinatorUnreachable
from orchestrator.wire.clock import Clock, Deadline, SystemClock
from orchestrator.wire.config import Config, ConfigError, load_config
from orchestrator.wire.token import TokenError, read_token

__all__ = ["Session", "await_token_file", "coordinator", "fail", "load", "poll_until"]

# How often `wait`, `drain --wait` and `expand` poll /status.
_POLL_S = 0.5
# An unchanged notice is repeated this often (with the time left), not at every retry.
_REPEAT_S = 5.0


def load(path: str, read_secrets: bool = False) -> Config:
    """The config; only the coordinator reads [kafka] secrets, the other commands talk
    to it over HTTP (see `load_config`)."""
    try:
        return load_config(path, read_secrets)
    except ConfigError as exc:
        fail(str(exc), 2)


class Session:
    """One command's time limit and its stderr: what it waits for, each new reason at
    once and an unchanged one again every `_REPEAT_S` with the time left, so a failover
    reads as a few lines.

    Args:
        limit: the command's time limit in seconds (its `--timeout`), armed now.
        console: where notices go (stderr; a progress bar shares it and they print
            above it).
        clock: of the deadline and the repeat interval.
    """

    def __init__(self, limit: float, console: Console | None = None,
                 clock: Clock | None = None) -> None:
        self.clock = clock or SystemClock()
        self.limit = limit
        self.deadline = Deadline.after(self.clock, limit)
        self.console = console or Console(stderr=True)
        self._last, self._at = "", -float("inf")

    def notify(self, message: str, waiting: bool = True) -> None:
        """Say why the command is still `waiting` (the client calls this at each
        retry), or that it goes on."""
        now = self.clock.monotonic()
        if message == self._last and now - self._at < _REPEAT_S:
            return
        self._last, self._at = message, now
        left = f" (trying for up to {self.deadline.remaining():.0f} s more)" if waiting else ""
        self.console.print(f"{command_name()}: {message}{left}", markup=False, highlight=False,
                           soft_wrap=True)


@contextmanager
def coordinator(config: Config, session: Session) -> Iterator[CoordinatorClient]:
    """A client with the token that keeps trying until the command's deadline;
    coordinator errors become clear messages and exit codes.

    No token file yet is no configuration error: the coordinator creates it at its first
    start, so it has not started (or not got that far); exit 1 saying so."""
    if not config.token_file.exists():
        fail(f"the coordinator has not written its token file {config.token_file} yet "
             f"(coordinator.token_file in {config.path}): start it, or wait for it "
             f"(`baton wait` waits for the file)", 1)
    try:
        token = read_token(config.token_file)
    except TokenError as exc:
        fail(f"{exc} (coordinator.token_file in {config.path})", 2)
    try:
        client = CoordinatorClient.for_config(config, token, deadline=session.deadline,
                                              notify=session.notify, clock=session.clock)
    except ValueError as exc:
        fail(f"{exc} (in {config.path})", 2)
    try:
        yield client
    except CoordinatorUnreachable as exc:
        fail(str(exc), 1)
    except CoordinatorError as exc:
        fail(str(exc), 2 if exc.status in (400, 404, 422) else 1)
    finally:
        client.close()


def poll_until(client: CoordinatorClient, done: Callable[[dict[str, Any]], bool],
               session: Session, what: str, as_json: bool, applied: str = ""
               ) -> dict[str, Any]:
    """Poll /status until `done`, with a progress bar; exit 1 naming what is pending
    (or who answered, when no coordinator led) once the deadline passes.

    `applied` says what the command already changed before it waited (an expansion, a
    drain), so a timeout never reads as if nothing happened."""
    after = f" ({applied}; only the wait timed out)" if applied else ""
    deadline, limit = session.deadline, session.limit
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), TextColumn("{task.fields[now]}"),
                  console=session.console, disable=as_json, transient=True) as progress:
        bar = progress.add_task(what, total=None, now="")
        most = 0
        while True:
            try:
                status = client.status()
            except CoordinatorUnreachable as exc:
                if not deadline.expired():
                    raise                   # not for want of time (a refused certificate)
                fail(f"timed out after {limit:g} s waiting for {what}: {exc}{after}", 1)
            finished = done(status)         # may add its own reasons to "pending"
            waiting = list(status.get("pending", []))
            if finished:
                progress.update(bar, total=max(most, 1), completed=max(most, 1), now="")
                return status
            most = max(most, len(waiting), 1)
            progress.update(bar, total=most, completed=most - len(waiting),
                            now=waiting[0] if waiting else "")
            if deadline.expired():
                pending = "; ".join(waiting) or "the condition is not met yet"
                fail(f"timed out after {limit:g} s waiting for {what}; pending: {pending}"
                     f"{after}", 1)
            session.clock.sleep(min(_POLL_S, deadline.remaining()))


def await_token_file(config: Config, session: Session) -> None:
    """`baton wait` run right after `baton coordinator`: the coordinator creates its
    token file on its first start, a moment later, so wait for it (within --timeout)
    instead of failing; exit 1 when it never comes."""
    while not config.token_file.exists():
        if session.deadline.expired():
            fail(f"timed out after {session.limit:g} s waiting for the coordinator's token "
                 f"file {config.token_file} (coordinator.token_file in {config.path}): is "
                 f"the coordinator running?", 1)
        session.clock.sleep(0.1)
