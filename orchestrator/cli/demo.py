"""`baton demo [--json]`: the main job on the embedded broker, end to end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console

from orchestrator.cli.conventions import epilog, fail

__all__ = ["demo_command"]


@click.command("demo", epilog=epilog("demo"))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (for scripts)")
@click.option("--logs", "logs", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="copy the daemons' logs to this directory (to follow a slow handoff)")
def demo_command(as_json: bool, logs: Path | None) -> None:
    """Run, scale out, expand, drain, verify, summarise (exit 1 if the oracle fails)."""
    from orchestrator.devkit.demo import print_summary, run_demo

    console = None if as_json else Console()
    try:
        result = run_demo(console, logs)
    except (TimeoutError, RuntimeError) as exc:
        fail(str(exc), 1)
    if as_json:
        click.echo(json.dumps(result.__dict__))
    else:
        assert console is not None
        print_summary(console, result)
    sys.exit(0 if result.ok else 1)
