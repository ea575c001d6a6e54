"""`baton token -c FILE [--force] [--json]`: write the coordinators' token once, before
the first start, so every coordinator of the job (and every processor and operator)
holds the same one.

It writes `coordinator.token_file`, and `coordinator.processor_token_file` when set,
each with a fresh random token and mode 0600, when missing. An existing file is kept and
reported (exit 1) unless `--force` replaces it. It prints the paths, never a token: the
operator copies the files to every host (docs/operations.md, "Several coordinators").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import click

from orchestrator.cli.conventions import epilog, fail
from orchestrator.cli.session import load
from orchestrator.wire.token import TokenError, write_token

__all__ = ["token_command"]


@dataclass(frozen=True)
class _Written:
    """One token file: its config key, its path, and whether a token was written."""

    key: str
    path: Path
    written: bool


def _files(config_path: str) -> list[tuple[str, Path]]:
    config = load(config_path)
    files = [("coordinator.token_file", config.token_file)]
    own = config.file(config.coordinator.processor_token_file)
    if own is not None and own != config.token_file:
        files.append(("coordinator.processor_token_file", own))
    return files


@click.command("token", epilog=epilog("token"))
@click.option("-c", "--config", "config_path", required=True, metavar="FILE",
              type=click.Path(dir_okay=False), help="The job's TOML config.")
@click.option("--force", is_flag=True,
              help="Replace existing token files (a rotation: SIGHUP the coordinators).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def token_command(config_path: str, force: bool, as_json: bool) -> None:
    """Write the coordinators' token file(s) when missing; copy them to every host."""
    done: list[_Written] = []
    for key, path in _files(config_path):
        try:
            done.append(_Written(key, path, write_token(path, force)))
        except TokenError as exc:
            fail(f"{key}: {exc}", 2)
    kept = [w for w in done if not w.written]
    if as_json:
        click.echo(json.dumps({"files": [{"key": w.key, "path": str(w.path),
                                          "written": w.written} for w in done]}, indent=2))
    else:
        for w in done:
            what = ("wrote a new token (mode 0600)" if w.written else
                    "exists, kept (--force replaces it)")
            click.echo(f"{w.key} {w.path}: {what}")
        if done and not kept:
            click.echo("copy the file(s) to the same path on every coordinator, processor "
                       "and operator host")
    if kept:
        raise SystemExit(1)
