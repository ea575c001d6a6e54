"""`baton deploy files --to DIR`: the deployment files Baton ships, written where an
operator wants them, from an installed Baton as from a checkout.

A `pip install` puts the package in site-packages: the alert rules and the dashboard
travel inside the `metrics` package, the systemd units, the Kubernetes manifests, the
container file and the docs as data files under `<prefix>/share/baton/`
(pyproject.toml). A checkout has them in `deploy/`, `metrics/` and `docs/`. Either way
this command writes the same tree:

    systemd/     baton-coordinator.service, baton-processor@.service,
                 baton-autoscale.service
    kubernetes/  the manifests, and prometheus-rule.yaml made from alerts.yml
    container/   Containerfile
    prometheus/  alerts.yml
    grafana/     baton.json
    docs/        the operator's documents the units and alerts link to
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path

import click

import orchestrator
from orchestrator.cli.conventions import epilog, fail

__all__ = ["deploy_group", "prometheus_rule", "shipped_files"]

_DOCS = ("operations.md", "runbook.md", "configuration.md", "design.md", "jobs.md",
         "performance.md")
_PROMETHEUS_RULE_HEAD = """\
# The alert rules of metrics/alerts.yml as a Prometheus Operator PrometheusRule
# (`baton deploy files` writes it; tests/test_deploy_files.py checks it matches).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: baton
  labels:
    app.kubernetes.io/name: baton
spec:
"""


def _source_root() -> Path:
    """Where the data files are: the checkout's root, else `<prefix>/share/baton`."""
    checkout = Path(orchestrator.__file__).resolve().parents[1]
    if (checkout / "deploy" / "systemd").is_dir():
        return checkout
    return Path(sys.prefix) / "share" / "baton"


def shipped_files() -> dict[str, bytes]:
    """Every file the command writes: its path under the target -> its content.

    Raises:
        FileNotFoundError: an installation without its data files (naming the place).
    """
    root = _source_root()
    layout = {"systemd": root / "deploy" / "systemd", "kubernetes": root / "deploy" / "kubernetes",
              "container": root / "deploy" / "container", "docs": root / "docs"}
    files: dict[str, bytes] = {}
    for folder, source in layout.items():
        if not source.is_dir():
            raise FileNotFoundError(f"{source} is missing: reinstall Baton (its data files "
                                    "go to <prefix>/share/baton)")
        for path in sorted(source.iterdir()):
            if path.is_file() and (folder != "docs" or path.name in _DOCS):
                files[f"{folder}/{path.name}"] = path.read_bytes()
    metrics = resources.files("metrics")
    alerts = (metrics / "alerts.yml").read_bytes()
    files["prometheus/alerts.yml"] = alerts
    files["grafana/baton.json"] = (metrics / "dashboards" / "baton.json").read_bytes()
    files["kubernetes/prometheus-rule.yaml"] = prometheus_rule(alerts.decode()).encode()
    return files


def prometheus_rule(alerts: str) -> str:
    """alerts.yml as a PrometheusRule: its `groups:` block under `spec:`, indented."""
    start = alerts.index("groups:")
    body = "".join(f"  {line}" if line.strip() else line
                   for line in alerts[start:].splitlines(keepends=True))
    return _PROMETHEUS_RULE_HEAD + body


@click.group("deploy", epilog=epilog("deploy"))
def deploy_group() -> None:
    """The deployment files Baton ships (systemd, Kubernetes, container, alerts)."""


@deploy_group.command("files", epilog=epilog("deploy"))
@click.option("--to", "target", type=click.Path(file_okay=False, path_type=Path),
              required=True, help="the directory to write them to (created if missing)")
@click.option("--force", is_flag=True, help="overwrite files that exist there")
@click.option("--json", "as_json", is_flag=True, help="print the written paths as JSON")
def files_command(target: Path, force: bool, as_json: bool) -> None:
    """Write the systemd units, Kubernetes manifests, container file, alert rules,
    dashboard and docs to a directory."""
    try:
        files = shipped_files()
    except FileNotFoundError as exc:
        fail(str(exc), 1)
    clashes = [name for name in files if (target / name).exists()]
    if clashes and not force:
        fail(f"{target / clashes[0]} exists ({len(clashes)} of the files do): "
             "give --force to overwrite them", 2)
    for name, content in files.items():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    written = [str(target / name) for name in files]
    click.echo(json.dumps({"written": written}, indent=2) if as_json else "\n".join(written))
