"""`baton audit -c FILE [--json]`: is the output topic what the job should have written?

Exit codes: 0 the output equals the recomputed one, 1 it differs, 2 the audit could
not run (a bad config, which names the file and key; Java or the Spark master missing;
input no longer retained; a broker or Spark failure).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, NoReturn

import click

from orchestrator.cli.conventions import epilog, fail
from orchestrator.wire.config import Config, ConfigError, load_config

if TYPE_CHECKING:
    from processor.spark.audit import AuditReport

__all__ = ["audit_command"]


@click.command("audit", epilog=epilog("audit"),
               context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="The job's TOML config.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def audit_command(config_path: str, as_json: bool) -> None:
    """Recompute a deterministic job's output from its input (on Spark) and compare it,
    key by key, with the output topic (read_committed). Run it when the job has caught
    up: outputs of input records still in flight count as missing."""
    from processor.job import load_job
    from processor.spark import SparkError, spark_session
    from processor.spark.audit import AuditError, audit

    try:
        config = load_config(config_path)
    except ConfigError as exc:
        _fail(str(exc), as_json)
    try:
        load_job(config.job.class_, config.job_path)
    except ValueError as exc:
        _fail(f"{config.path}: job.class: {exc}", as_json)
    try:
        report = audit(spark_session(config.spark.master, "baton-audit", config.spark.conf),
                       config)
    except (AuditError, SparkError) as exc:
        _fail(config.mask(f"audit could not run: {exc}"), as_json)  # Kafka errors may quote one
    if as_json:
        click.echo(json.dumps(report.to_json()))
    else:
        _print_human(config, report)
    sys.exit(0 if report.ok else 1)


def _fail(message: str, as_json: bool) -> NoReturn:
    if as_json:
        click.echo(json.dumps({"ok": False, "error": message}))
    fail(message, 2)


def _print_human(config: Config, report: AuditReport) -> None:
    click.echo(f"audit of job {config.job.name}: topic {config.job.output} against "
               f"{', '.join(config.job.inputs)} replayed through {config.job.class_}")
    rows = [("keys", report.keys), ("expected records", report.expected),
            ("actual records", report.actual), ("missing", report.missing),
            ("duplicated", report.duplicated), ("wrong", report.wrong),
            ("reordered keys", report.reordered), ("differing keys", report.differing)]
    for name, value in rows:
        click.echo(f"  {name:<17} {value:>12,}")
    for diff in report.examples:
        click.echo(f"  key {diff.key!r}: {diff.expected} expected, {diff.actual} actual; "
                   f"first divergence at #{diff.first_divergence}: expected "
                   f"{diff.expected_value!r}, got {diff.actual_value!r}")
    click.echo("OK: identical" if report.ok else
               f"DIFFERENT: {report.differing:,} keys differ")
