"""`baton check -c FILE [--json]`: is this job ready to start, and if not, why.

Every config error at once (each `file: key: message`), then, for a valid config,
the probes of `orchestrator.cli.checks`: the job class imports, the broker answers,
the topics exist with their partition counts, the coordinator(s) answer. One line per
finding, naming its key, topic or URL; first, each value that came from a
`BATON_<SECTION>__<KEY>` variable rather than the file, with the variable's name
(a secret's value shown redacted). Exit codes: 0 all good, 1 something did not
answer (broker, coordinator), 2 a config or permission error.
"""

from __future__ import annotations

import json
import os
import sys

import click

from orchestrator.cli.checks import Finding, exit_code, probe
from orchestrator.cli.conventions import epilog
from orchestrator.wire.config import Config, ConfigError, load_config
from orchestrator.wire.secrets import REDACTED

__all__ = ["check_command"]

_MARKS = {"ok": "ok   ", "note": "note ", "unreachable": "DOWN ", "error": "ERROR"}


@click.command("check", epilog=epilog("check"))
@click.option("-c", "--config", "config_path", required=True, metavar="FILE",
              type=click.Path(dir_okay=False), help="The job's TOML config.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def check_command(config_path: str, as_json: bool) -> None:
    """Check a job's config, job class, broker, topics and coordinators."""
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        findings = [Finding("error", "config", problem) for problem in exc.problems]
    else:
        findings = _from_environment(config) + probe(config)
        findings = [Finding(f.status, f.subject, config.mask(f.message)) for f in findings]
    code = exit_code(findings)
    if as_json:
        click.echo(json.dumps({"exit_code": code, "findings": [
            {"status": f.status, "subject": f.subject, "message": f.message}
            for f in findings]}, indent=2))
    else:
        for f in findings:
            click.echo(f"{_MARKS[f.status]} {f.subject}: {f.message}")
    # The probes' librdkafka clients can crash the interpreter while it tears them down
    # after a failed or timed-out request (a SIGSEGV at exit, losing the report and the
    # exit code): the report is out, so leave without that teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _from_environment(config: Config) -> list[Finding]:
    """A note per key the environment set: `key = value (from BATON_...)`."""
    return [Finding("note", key, f"= {_shown(config, key)} (from {name}, over the file)")
            for key, name in sorted(config.sources.items())]


def _shown(config: Config, key: str) -> str:
    section, _, rest = key.partition(".")
    if section == "kafka":
        return REDACTED if rest in config.secret_keys else json.dumps(config.kafka.get(rest))
    if key.startswith("spark.conf"):
        return REDACTED
    value: object = getattr(config, section)
    for part in rest.split("."):
        value = (value.get(part) if isinstance(value, dict)
                 else getattr(value, part, getattr(value, f"{part}_", None)))
    return json.dumps(value, default=str)
