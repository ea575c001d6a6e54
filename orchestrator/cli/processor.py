"""`baton processor -c FILE --id ID`: run a processor daemon.

The id may come from the environment instead (`BATON_PROCESSOR_ID`), and without either
it is the host's name up to its first dot: a Kubernetes StatefulSet's pod name
(`baton-processor-0`), stable across the pod's restarts as an id must be.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from orchestrator.cli.conventions import epilog, fail
from orchestrator.wire.c_heap import limit_arenas
from orchestrator.wire.config import ConfigError, load_config
from orchestrator.wire.logs import setup_logging

__all__ = ["processor_command"]


@click.command("processor", epilog=epilog("processor"))
@click.option("-c", "--config", "config_path", required=True, type=click.Path(path_type=Path),
              help="the job's TOML config")
@click.option("--id", "processor_id", envvar="BATON_PROCESSOR_ID", default=None,
              help="stable processor id, e.g. p1 ([A-Za-z0-9._-]+); default: "
                   "$BATON_PROCESSOR_ID, else the host name up to its first dot")
@click.option("--state-dir", type=click.Path(path_type=Path), default=None,
              help="override processor.state_dir (processors sharing one already keep "
                   "their stores apart, under their ids)")
def processor_command(config_path: Path, processor_id: str | None,
                      state_dir: Path | None) -> None:
    """Run a processor daemon: its tasks, catch-up and handoffs, driven by the coordinator."""
    import re
    import socket

    if not processor_id:
        processor_id = socket.gethostname().split(".")[0]

    # before librdkafka's and RocksDB's threads exist: glibc fixes the limit at its
    # first extra arena (orchestrator/wire/c_heap.py)
    limit_arenas()

    if not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", processor_id):
        raise click.BadParameter(f"{processor_id!r}: use letters, digits, '.', '_' or '-'",
                                 param_hint="--id")
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        fail(str(exc), 2)
    if state_dir is not None:
        config = config.model_copy(update={"processor": config.processor.model_copy(
            update={"state_dir": str(state_dir.resolve())})})
    setup_logging(f"processor[{processor_id}]", secrets=config.secret_values())
    from processor.daemon import run_processor
    from processor.job import JobLoadError, load_job

    try:
        load_job(config.job.class_, config.job_path)
    except JobLoadError as exc:
        fail(f"{config_path}: {exc}", 2)
    from store.errors import StoreError

    try:
        code = run_processor(config, processor_id)
    except StoreError as exc:           # its state directory is locked or unusable
        fail(str(exc), 2)
    sys.exit(code)
