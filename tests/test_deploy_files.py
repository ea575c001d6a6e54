"""What Baton ships for deployment beside the systemd units: the Kubernetes manifests
(checked against the Kubernetes API's own models, and against the daemons' real
commands, ports, probes and config keys), the container file, and `baton deploy files`
writing all of it from the installed package."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient

from orchestrator.cli.deploy import prometheus_rule, shipped_files
from orchestrator.cli.main import main
from orchestrator.wire.config import parse_config
from orchestrator.wire.health import HEALTH_PATHS, LIVE_PATH, READY_PATH

ROOT = Path(__file__).resolve().parent.parent
KUBERNETES = ROOT / "deploy" / "kubernetes"
CONTAINERFILE = ROOT / "deploy" / "container" / "Containerfile"
MODELS = {("v1", "ConfigMap"): "V1ConfigMap", ("v1", "Secret"): "V1Secret",
          ("v1", "Service"): "V1Service", ("apps/v1", "StatefulSet"): "V1StatefulSet",
          ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget"}


def documents() -> list[dict[str, Any]]:
    found = []
    for path in sorted(KUBERNETES.glob("*.yaml")):
        found += [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return found


def kind(name: str) -> list[dict[str, Any]]:
    return [d for d in documents() if d["kind"] == name]


def by_component(kind_name: str, component: str) -> dict[str, Any]:
    return next(d for d in kind(kind_name)
                if d["metadata"]["labels"].get("app.kubernetes.io/component") == component)


def container(component: str) -> dict[str, Any]:
    spec = by_component("StatefulSet", component)["spec"]["template"]["spec"]
    return dict(spec["containers"][0])


def test_every_document_is_a_kubernetes_object_without_loss() -> None:
    """Deserialized into the API client's model and serialized back, each document is
    unchanged: no misspelt or misplaced field (the models drop what they do not know)."""
    client = ApiClient()
    kinds = set()
    for document in documents():
        kinds.add(document["kind"])
        if document["kind"] == "PrometheusRule":
            continue
        model = MODELS[(document["apiVersion"], document["kind"])]
        obj = client.deserialize(json.dumps(document), model, "application/json")
        assert client.sanitize_for_serialization(obj) == document, document["metadata"]
    assert kinds == {"ConfigMap", "Secret", "Service", "StatefulSet", "PodDisruptionBudget",
                     "PrometheusRule"}


def test_the_prometheus_rule_is_the_shipped_alert_rules() -> None:
    alerts = (ROOT / "metrics" / "alerts.yml").read_text()
    assert (KUBERNETES / "prometheus-rule.yaml").read_text() == prometheus_rule(alerts)
    rule = kind("PrometheusRule")[0]
    assert rule["spec"]["groups"] == yaml.safe_load(alerts)["groups"]


def _env(spec: dict[str, Any], pod_ip: str) -> dict[str, str]:
    """The container's environment as the kubelet makes it ($(VAR) expanded)."""
    out: dict[str, str] = {}
    for item in spec.get("env", []):
        if "value" in item:
            value = item["value"]
            for name, known in out.items():
                value = value.replace(f"$({name})", known)
            out[item["name"]] = value
        else:
            assert item["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
            out[item["name"]] = pod_ip
    return out


def _job_toml() -> str:
    config_map = kind("ConfigMap")[0]
    return str(config_map["data"]["job.toml"])


@pytest.mark.parametrize("component", ["coordinator", "processor"])
def test_commands_config_and_mounts_are_the_daemons_own(component: str) -> None:
    import tomllib

    spec = container(component)
    import click

    assert main.get_command(click.Context(main), spec["args"][0]) is not None
    assert spec["args"][0] == component
    assert spec["args"][1:] == ["-c", "/etc/baton/job.toml"]
    assert "--id" not in spec["args"]            # a processor's id: its pod's host name
    mounts = {m["name"]: m for m in spec["volumeMounts"]}
    assert mounts["job"]["mountPath"] == "/etc/baton/job.toml"
    config = parse_config(tomllib.loads(_job_toml()), Path("/etc/baton/job.toml"),
                          _env(spec, "10.1.2.3"))
    assert config.token_file.parent == Path(mounts["token"]["mountPath"])
    ports = {p["name"]: p["containerPort"] for p in spec["ports"]}
    if component == "coordinator":
        assert config.coordinator.listen == f"10.1.2.3:{ports['api']}"
        statefulset = by_component("StatefulSet", "coordinator")
        names = [f"http://{statefulset['metadata']['name']}-{i}."
                 f"{statefulset['spec']['serviceName']}:{ports['api']}"
                 for i in range(statefulset["spec"]["replicas"])]
        assert config.coordinator.urls == names
    else:
        assert config.processor.metrics_port == ports["metrics"]
        assert config.processor.metrics_host == "10.1.2.3"
        assert config.processor.state_dir == mounts["state"]["mountPath"]


@pytest.mark.parametrize("component", ["coordinator", "processor"])
def test_probes_ask_the_health_endpoints_on_the_daemons_port(component: str) -> None:
    spec = container(component)
    port = spec["ports"][0]["name"]
    assert spec["livenessProbe"]["httpGet"] == {"path": LIVE_PATH, "port": port}
    assert spec["readinessProbe"]["httpGet"] == {"path": READY_PATH, "port": port}
    assert {LIVE_PATH, READY_PATH} == HEALTH_PATHS


def test_the_token_secret_is_readable_by_the_pods_group_only() -> None:
    from orchestrator.wire.token import is_private

    for component in ("coordinator", "processor"):
        pod = by_component("StatefulSet", component)["spec"]["template"]["spec"]
        token = next(v for v in pod["volumes"] if v["name"] == "token")
        assert token["secret"]["secretName"] == kind("Secret")[0]["metadata"]["name"]
        mode = token["secret"]["defaultMode"]
        assert mode == 0o440 and pod["securityContext"]["runAsNonRoot"] is True
        group = pod["securityContext"]["fsGroup"]
        assert group == pod["securityContext"]["runAsGroup"]
        # a secret volume gives the files the pod's fsGroup: accepted as the process's own
        status = os.stat_result((stat.S_IFREG | mode, 0, 0, 1, 0, os.getegid(), 0, 0, 0, 0))
        assert is_private(status)


def test_disruption_budgets_keep_a_coordinator_and_all_but_one_processor() -> None:
    budgets = {d["metadata"]["name"]: d["spec"] for d in kind("PodDisruptionBudget")}
    assert budgets["baton-coordinator"]["minAvailable"] == 1
    assert budgets["baton-processor"]["maxUnavailable"] == 1


def test_the_container_runs_baton_as_the_manifests_user() -> None:
    text = CONTAINERFILE.read_text()
    assert text.splitlines()[[line.startswith("FROM ") for line in text.splitlines()].index(
        True)].startswith("FROM debian:")
    assert 'ENTRYPOINT ["/usr/bin/tini", "--", "/opt/baton/venv/bin/baton"]' in text
    user = next(line.split()[1] for line in text.splitlines() if line.startswith("USER "))
    for component in ("coordinator", "processor"):
        pod = by_component("StatefulSet", component)["spec"]["template"]["spec"]
        context = pod["securityContext"]
        assert user == f"{context['runAsUser']}:{context['runAsGroup']}"
    assert "openjdk-17-jre-headless" in text         # PySpark's bulk catch-up and audit


def test_deploy_files_writes_what_is_shipped(tmp_path: Path) -> None:
    def deploy(*more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestrator.cli", "deploy", "files",
                               "--to", str(tmp_path / "out"), *more],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)

    done = deploy("--json")
    assert done.returncode == 0, done.stderr
    written = {str(Path(p).relative_to(tmp_path / "out")) for p in json.loads(done.stdout)[
        "written"]}
    assert {"systemd/baton-coordinator.service", "systemd/baton-processor@.service",
            "kubernetes/processor.yaml", "kubernetes/prometheus-rule.yaml",
            "container/Containerfile", "prometheus/alerts.yml", "grafana/baton.json",
            "docs/operations.md", "docs/runbook.md"} <= written
    assert set(shipped_files()) == written
    assert ((tmp_path / "out" / "prometheus" / "alerts.yml").read_bytes()
            == (ROOT / "metrics" / "alerts.yml").read_bytes())
    again = deploy()
    assert again.returncode == 2
    assert "exists" in again.stderr and "--force" in again.stderr
    assert deploy("--force").returncode == 0


def test_the_wheel_carries_the_data_files(tmp_path: Path) -> None:
    """pyproject.toml's data files name every file `shipped_files` reads from a checkout."""
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "data-files"]
    patterns = [pattern for listed in data.values() for pattern in listed]
    shipped = {name for name in shipped_files()
               if not name.startswith(("prometheus/", "grafana/"))
               and name != "kubernetes/prometheus-rule.yaml"}
    sources = {"systemd": "deploy/systemd", "kubernetes": "deploy/kubernetes",
               "container": "deploy/container", "docs": "docs"}
    for name in shipped:
        folder, file = name.split("/", 1)
        source = ROOT / sources[folder] / file
        assert any(source.match(str(ROOT / p)) for p in patterns), name


def test_a_processor_pod_outlives_its_drain_on_stop() -> None:
    import tomllib

    drain_s = tomllib.loads(_job_toml())["processor"]["drain_on_stop_ms"] / 1000
    pod = by_component("StatefulSet", "processor")["spec"]["template"]["spec"]
    assert drain_s > 0 and pod["terminationGracePeriodSeconds"] >= drain_s + 20
