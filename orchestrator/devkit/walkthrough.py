"""The two-host walk-through of docs/operations.md ("Several coordinators"): the hosts,
each host's job.toml, the commands in order and the Prometheus scrape config, as data.

The section of the guide is rendered from these (`render()`), and the several-host
test (tests/test_hosts.py) runs the same steps on network namespaces
(orchestrator/devkit/hosts.py), so the guide and what is tested cannot drift:
tests/test_hosts.py compares the guide with `render()`.

    python -m orchestrator.devkit.walkthrough   # print the section
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["API_PORT", "ETC", "HOSTS", "JOB", "KAFKA_PORT", "METRICS_PORT", "PARTITIONS",
           "STATE", "STEPS", "SUBNET", "Step", "WalkHost", "coordinator_urls", "job_toml",
           "prometheus_yaml", "render"]

# an address range for examples that is no one's network (RFC 2544's benchmark range)
SUBNET = "198.18.52.0/24"
API_PORT, METRICS_PORT, KAFKA_PORT = 8700, 9400, 9092
ETC, STATE = "/etc/baton", "/var/lib/baton"
JOB = {"name": "sums", "class": "processor.examples:RunningSum", "input": "events",
       "output": "sums"}
PARTITIONS = 4
CONFIG = f"{ETC}/job.toml"

Role = Literal["broker", "coordinator", "processor", "operator"]


@dataclass(frozen=True)
class WalkHost:
    """A host of the walk-through: its name, address, and what runs on it."""

    name: str
    address: str
    role: Role
    runs: str


HOSTS = (
    WalkHost("kafka", "198.18.52.10", "broker", f"the Kafka broker on port {KAFKA_PORT}"),
    WalkHost("coord-a", "198.18.52.11", "coordinator", "`baton coordinator` (leads first)"),
    WalkHost("coord-b", "198.18.52.12", "coordinator", "`baton coordinator` (standby)"),
    WalkHost("proc-1", "198.18.52.21", "processor", "`baton processor --id p1`"),
    WalkHost("proc-2", "198.18.52.22", "processor", "`baton processor --id p2`"),
    WalkHost("ops", "198.18.52.1", "operator", "the operator's shell and Prometheus"),
)
_BY_NAME = {h.name: h for h in HOSTS}

StepKind = Literal["topic", "cert", "baton", "copy", "daemon", "stop"]


@dataclass(frozen=True)
class Step:
    """One step: on `host`, `command` (a shell line as the operator types it)."""

    host: str
    kind: StepKind
    command: str
    why: str


def coordinator_urls() -> list[str]:
    return [f"https://{h.address}:{API_PORT}" for h in HOSTS if h.role == "coordinator"]


def _copies(path: str) -> list[Step]:
    return [Step("coord-a", "copy", f"scp -p {path} {h.name}:{ETC}/",
                 f"the same token on {h.name}")
            for h in HOSTS if h.name != "coord-a" and h.role != "broker"]


STEPS = (
    Step("ops", "topic", f"kafka-topics.sh --bootstrap-server {HOSTS[0].address}:{KAFKA_PORT} "
         f"--create --topic {JOB['input']} --partitions {PARTITIONS}", "the input"),
    Step("ops", "topic", f"kafka-topics.sh --bootstrap-server {HOSTS[0].address}:{KAFKA_PORT} "
         f"--create --topic {JOB['output']} --partitions {PARTITIONS}", "the output"),
    Step("ops", "cert", f"your CA issues each coordinator a certificate naming its IP "
         f"address (subjectAltName): {ETC}/coordinator.pem and coordinator.key on coord-a "
         f"and on coord-b, and {ETC}/ca.pem on every host", "TLS"),
    Step("coord-a", "baton", f"baton token -c {CONFIG}",
         "writes the token once (mode 0600), prints its path"),
    *_copies(f"{ETC}/coordinator.token"),
    Step("coord-a", "daemon", f"baton coordinator -c {CONFIG}", "leads"),
    Step("coord-b", "daemon", f"baton coordinator -c {CONFIG}", "stands by"),
    Step("proc-1", "daemon", f"baton processor -c {CONFIG} --id p1", "registers"),
    Step("proc-2", "daemon", f"baton processor -c {CONFIG} --id p2", "registers"),
    Step("ops", "baton", f"baton check -c {CONFIG}",
         "exit 0: the broker, the topics, both coordinators, and each accepts the token"),
    Step("ops", "baton", f"baton wait -c {CONFIG} --until balanced --timeout 120",
         "two tasks on each processor"),
    Step("coord-a", "stop", "systemctl stop baton-coordinator",
         "coord-b leads within coordinator.takeover_ms"),
    Step("ops", "baton", f"baton status -c {CONFIG}", "answered by coord-b"),
)


def job_toml(host: str) -> str:
    """The job.toml of `host` (the operator's is coord-a's)."""
    h = _BY_NAME["coord-a" if host == "ops" else host]
    broker = _BY_NAME["kafka"]
    urls = ", ".join(f'"{u}"' for u in coordinator_urls())
    lines = ["[job]", f'name = "{JOB["name"]}"', f'class = "{JOB["class"]}"',
             f'inputs = ["{JOB["input"]}"]', f'output = "{JOB["output"]}"', "",
             "[kafka]", f'bootstrap_servers = "{broker.address}:{KAFKA_PORT}"', "",
             "[coordinator]"]
    if h.role == "coordinator":
        lines.append(f'listen = "{h.address}:{API_PORT}"')
    lines += [f"url = [{urls}]"]
    if h.role == "coordinator":
        lines += [f'tls_cert_file = "{ETC}/coordinator.pem"',
                  f'tls_key_file = "{ETC}/coordinator.key"']
    lines += [f'tls_ca_file = "{ETC}/ca.pem"', f'token_file = "{ETC}/coordinator.token"', "",
              "[processor]", f'state_dir = "{STATE}"']
    if h.role == "processor":
        lines += [f'metrics_host = "{h.address}"', f"metrics_port = {METRICS_PORT}"]
    return "\n".join(lines) + "\n"


def prometheus_yaml() -> str:
    """The operator host's Prometheus scrape config: the processors found through `/sd`
    of both coordinators."""
    sd = "".join(f"      - url: {u}/sd\n        tls_config:\n          ca_file: {ETC}/ca.pem\n"
                 for u in coordinator_urls())
    return ("scrape_configs:\n"
            "  - job_name: baton-processors\n"
            "    http_sd_configs:\n" + sd)


def render() -> str:
    """The walk-through's section of docs/operations.md."""
    hosts = "".join(f"| {h.name} | {h.address} | {h.runs} |\n" for h in HOSTS)
    steps = "".join(f"{n}. on **{s.host}**: " + (f"{s.command} ({s.why})\n"
                                                  if s.kind == "cert" else
                                                  f"`{s.command}` ({s.why})\n")
                    for n, s in enumerate(STEPS, 1))
    return (
        "### Walk-through: two coordinator hosts\n\n"
        "<!-- Rendered by `python -m orchestrator.devkit.walkthrough`; tests/test_hosts.py\n"
        "runs these steps on network namespaces and checks this text. -->\n\n"
        "| host | address | runs |\n|---|---|---|\n" + hosts + "\n"
        f"`{CONFIG}` on coord-a (and on the operator's host, ops):\n\n"
        "```toml\n" + job_toml("coord-a") + "```\n\n"
        f"coord-b's differs only in `listen = \"{_BY_NAME['coord-b'].address}:{API_PORT}\"`. "
        "proc-1's:\n\n"
        "```toml\n" + job_toml("proc-1") + "```\n\n"
        f"proc-2's differs only in `metrics_host = \"{_BY_NAME['proc-2'].address}\"`. "
        "Then, in order:\n\n" + steps + "\n"
        "Prometheus on ops finds the processors through either coordinator:\n\n"
        "```yaml\n" + prometheus_yaml() + "```\n"
    )


if __name__ == "__main__":
    print(render(), end="")
