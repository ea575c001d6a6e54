"""`baton`: the command line (the pinned commands of docs/design.md).

Exit codes: 0 success, 1 the thing asked for did not happen (timeout, oracle or audit
failure), 2 bad usage or configuration, 3 a processor stopped because its coordinator
declared it dead. Each command's own are in its `--help` (`orchestrator.cli.conventions`).
Every error reads `baton <command>: message`, click's usage errors included.
"""

from __future__ import annotations

import importlib
from typing import IO, Any

import click

__all__ = ["main"]

# name -> "module:attribute"; a command's module is imported when it is run (or listed
# by --help): a processor's start imported every command's dependencies (rich for the
# demo, the assignment bench's), ~50 ms of each join
_COMMANDS = {
    "demo": "orchestrator.cli.demo:demo_command",
    "dev": "orchestrator.cli.dev:dev_command",
    "group": "orchestrator.cli.group:group_command",
    "processor": "orchestrator.cli.processor:processor_command",
    "coordinator": "orchestrator.cli.ops:coordinator_command",
    "status": "orchestrator.cli.ops:status_command",
    "wait": "orchestrator.cli.ops:wait_command",
    "plan": "orchestrator.cli.ops:plan_command",
    "drain": "orchestrator.cli.ops:drain_command",
    "forget": "orchestrator.cli.ops:forget_command",
    "expand": "orchestrator.cli.ops:expand_command",
    "split": "orchestrator.cli.ops:split_command",
    "autoscale": "orchestrator.cli.autoscale:autoscale_command",
    "assign": "orchestrator.cli.assign:assign_command",
    "audit": "orchestrator.cli.audit:audit_command",
    "check": "orchestrator.cli.check:check_command",
    "deploy": "orchestrator.cli.deploy:deploy_group",
    "token": "orchestrator.cli.token:token_command",
}


class _CommandError(click.ClickException):
    """A click error (a missing option, a bad value) shown as every other error is:
    `baton <command>: message`, then where to find the usage."""

    def __init__(self, command: str | None, error: click.ClickException) -> None:
        super().__init__(error.format_message())
        object.__setattr__(self, "exit_code", error.exit_code)   # a ClassVar in click
        self.command = f"baton {command}" if command else "baton"
        self.usage = isinstance(error, click.UsageError)

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"{self.command}: {self.format_message()}", file=file, err=True)
        if self.usage:
            click.echo(f"Try '{self.command} --help' for help.", file=file, err=True)


class _LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except _CommandError:
            raise
        except click.ClickException as exc:
            raise _CommandError(ctx.invoked_subcommand, exc) from exc

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, attribute = target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog="Exit codes: 0 success; 1 what was asked did not happen (timeout, "
                    "oracle or audit difference, no coordinator); 2 bad usage or "
                    "configuration; 3 a processor declared dead by its coordinator, or "
                    "stuck. "
                    "Each command's --help lists its own.")
@click.version_option(package_name="baton", prog_name="baton")
def main() -> None:
    """Scale stateful Kafka stream processors out and in under live traffic.

    While no coordinator leads (a failover, a restart), the commands that talk to it
    keep trying within their --timeout (60 s; wait, expand and drain --wait: 600 s),
    saying on stderr what they wait for.
    """
