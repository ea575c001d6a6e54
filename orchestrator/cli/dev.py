"""`baton dev -c FILE [--processors N] [--input FILE]`: the user's job, locally."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from orchestrator.cli.conventions import epilog, fail

__all__ = ["dev_command"]


@click.command("dev", epilog=epilog("dev"))
@click.option("-c", "--config", "config_path", required=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="the job's TOML config (its [kafka] is replaced by the embedded broker)")
@click.option("--processors", default=1, show_default=True, type=click.IntRange(1, 32),
              help="processors to run")
@click.option("--input", "input_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="JSON lines to produce ({\"key\", \"value\", \"headers\", "
                                 "\"timestamp\"}); "
                                 "default: stdin; '-': stdin")
@click.option("--partitions", default=4, show_default=True, type=click.IntRange(1, 1000),
              help="partitions of each topic it creates")
def dev_command(config_path: Path, processors: int, input_file: Path | None,
                partitions: int) -> None:
    """Run your job on the embedded broker: a coordinator and N processors, records fed
    from a JSON-lines file or stdin, committed outputs printed as JSON lines on stdout.
    Ctrl-C stops everything (exit 0). See docs/jobs.md."""
    from orchestrator.devkit.dev import run_dev
    from orchestrator.devkit.embedded import EmbeddedBrokerError
    from orchestrator.wire.config import ConfigError, load_config
    from processor.job import JobLoadError, load_job

    if input_file is not None and str(input_file) == "-":
        input_file = None
    if input_file is not None and not input_file.is_file():
        fail(f"--input {input_file}: no such file", 2)
    try:
        config = load_config(config_path)
        load_job(config.job.class_, config.job_path)
    except ConfigError as exc:
        fail(str(exc), 2)
    except JobLoadError as exc:
        fail(f"{config_path}: job.class: {exc}", 2)
    try:
        code = run_dev(config_path, processors, input_file, partitions)
    except (EmbeddedBrokerError, RuntimeError, TimeoutError, OSError) as exc:
        fail(str(exc), 1)
    sys.exit(code)
