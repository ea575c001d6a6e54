"""`baton`: the command line (pinned commands in DESIGN.md).

Exit codes: 0 success, 1 the thing asked for did not happen (timeout, oracle or audit
failure), 2 bad usage or configuration, 3 a daemon stopped because it lost its
coordinator or was declared dead.
"""

from __future__ import annotations

import click

from orchestrator.cli.assign import assign_command
from orchestrator.cli.audit import audit_command
from orchestrator.cli.demo import demo_command
from orchestrator.cli.group import group_command
from orchestrator.cli.ops import (
    coordinator_command,
    drain_command,
    expand_command,
    plan_command,
    split_command,
    status_command,
    wait_command,
)
from orchestrator.cli.processor import processor_command

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="baton")
def main() -> None:
    """Scale stateful Kafka stream processors out and in under live traffic."""


main.add_command(demo_command, name="demo")
main.add_command(group_command, name="group")
main.add_command(processor_command, name="processor")
main.add_command(coordinator_command, name="coordinator")
main.add_command(status_command, name="status")
main.add_command(wait_command, name="wait")
main.add_command(plan_command, name="plan")
main.add_command(drain_command, name="drain")
main.add_command(expand_command, name="expand")
main.add_command(split_command, name="split")
main.add_command(assign_command, name="assign")
main.add_command(audit_command, name="audit")


