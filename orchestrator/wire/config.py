"""The TOML configuration shared by both daemons (keys pinned in docs/design.md; each key
is described in docs/configuration.md, generated from these models).

Every error names the file and the dotted key, so an operator can fix it without
reading code; daemons load the config before touching anything and exit 2 on error.
`[kafka]` values may come from a 0600 file or the environment, and are redacted
wherever settings are shown (`orchestrator.wire.secrets`); any key may come from a
`BATON_<SECTION>__<KEY>` variable, which wins over the file
(`orchestrator.wire.environment`).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from orchestrator.wire.environment import overlay
from orchestrator.wire.job_config import Format, JobConfig
from orchestrator.wire.job_config import Section as _Section
from orchestrator.wire.secrets import SecretError, mask, redact, resolve, secret_values
from orchestrator.wire.store_config import StoreConfig
from orchestrator.wire.toml_dump import dump_config
from orchestrator.wire.validation import check_ports, describe_errors

__all__ = [
    "AutoscaleConfig",
    "CatchUpConfig",
    "CatchUpSource",
    "Config",
    "ConfigError",
    "CoordinatorConfig",
    "Format",
    "JobConfig",
    "ProcessorConfig",
    "SparkConfig",
    "StoreConfig",
    "dump_config",
    "load_config",
    "parse_config",
]

# where a replica rebuilds a task's state: its input through process(), or the
# changelog the active task writes (the one declaration; metrics/ pins its copy)
CatchUpSource = Literal["input", "changelog"]


class ConfigError(Exception):
    """A configuration that cannot work; the message names the file and the key.

    Attributes:
        problems: every error found, one line each (`file: key: message`), so an
            operator fixes them all in one pass; the message is these lines joined.
    """

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems: list[str] = problems if problems is not None else [message]


class CoordinatorConfig(_Section):
    listen: str = Field(default="127.0.0.1:8700", pattern=r"^[^:\s]+:\d+$",
                        examples=["10.0.0.2:8700"])
    """HOST:PORT the coordinator's HTTP API (and /metrics, /sd) binds to."""
    bind_timeout_ms: int = Field(default=30000, ge=0)
    """A listen port in use is tried again this long, then the coordinator exits 1 (its
    supervisor starts it again); 0: tried once."""
    url: str | list[str] = Field(default="http://127.0.0.1:8700",
                                 examples=[["http://10.0.0.2:8700", "http://10.0.0.3:8700"]])
    """One URL, or every coordinator's (leader and standbys): clients find the leader."""
    takeover_ms: int = Field(default=10000, ge=1000)
    """A standby takes over when the leader has written nothing to the stream this long."""
    token_file: str = "./state/coordinator.token"
    """The operators' bearer token (0600; created at the first start when missing)."""
    processor_token_file: str = Field(default="", examples=["/etc/baton/processor.token"])
    """If set, the processors' own token (refused on operator endpoints, and back)."""
    token_grace_ms: int = Field(default=600000, ge=0)
    """After SIGHUP re-reads the token files, a replaced token still works this long."""
    tls_cert_file: str = Field(default="", examples=["/etc/baton/coordinator.pem"])
    """The certificate the API is served with (PEM; with tls_key_file): TLS on."""
    tls_key_file: str = Field(default="", examples=["/etc/baton/coordinator.key"])
    """The key of tls_cert_file."""
    tls_ca_file: str = Field(default="", examples=["/etc/baton/ca.pem"])
    """The CA processors, the CLI and the demo verify the coordinator's certificate with."""
    tls_client_ca_file: str = Field(default="", examples=["/etc/baton/clients-ca.pem"])
    """Mutual TLS: clients must present a certificate signed by this CA."""
    tls_client_cert_file: str = Field(default="", examples=["/etc/baton/operator.pem"])
    """The certificate the CLI presents under mutual TLS (processors: [processor])."""
    tls_client_key_file: str = Field(default="", examples=["/etc/baton/operator.key"])
    """The key of tls_client_cert_file."""
    max_request_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    """A request body larger than this is refused with 413 before it is parsed."""
    release_timeout_ms: int = Field(default=10000, gt=0)
    """An old owner that has not released a task this long is declared dead."""
    activate_timeout_ms: int = Field(default=30000, gt=0)
    """A new owner that has not activated a task this long: the move is cancelled."""
    monitor_interval_ms: int = Field(default=5000, gt=0)
    """How often the inputs' partition counts are read (a grown input is noticed)."""
    processor_timeout_ms: int = Field(default=10000, gt=0)
    """A processor silent this long is considered gone and its tasks are re-placed."""
    failure_backoff_ms: int = Field(default=30000, gt=0)
    """A processor that failed a task is excluded for it this long, doubled per attempt."""
    forget_dead_after_ms: int = Field(default=0, ge=0, examples=[86_400_000])
    """A processor dead this long is forgotten (as by `baton forget`): it leaves
    `baton status` and `baton_processors{state="dead"}`. 0: only `baton forget` does."""
    max_task_attempts: int = Field(default=3, ge=1)
    """Attempts per (task, processor) before that processor never gets the task again. A
    pair that has not failed for 20 backoffs past its exclusion starts over."""

    @field_validator("url")
    @classmethod
    def _urls(cls, url: str | list[str]) -> str | list[str]:
        urls = [url] if isinstance(url, str) else url
        if not urls:
            raise ValueError("give at least one URL")
        for one in urls:
            if not one.startswith(("http://", "https://")):
                raise ValueError(f"{one!r} is not an http:// or https:// URL")
        if len(set(urls)) != len(urls):
            raise ValueError("the same URL twice")
        return url

    @property
    def urls(self) -> list[str]:
        """Every coordinator URL, without trailing slashes."""
        return [u.rstrip("/") for u in ([self.url] if isinstance(self.url, str) else self.url)]


class ProcessorConfig(_Section):
    state_dir: str = Field(default="./state", examples=["/var/lib/baton"])
    """Where task stores live: `<state_dir>/<job>/<processor id>/<task>/` (a cache)."""
    heartbeat_interval_ms: int = Field(default=1000, gt=0)
    """How often a processor reports to the coordinator."""
    coordinator_grace_ms: int = Field(default=15000, gt=0)
    """A coordinator unreachable this long is logged as an error (nothing stops)."""
    commit_interval_ms: int = Field(default=100, gt=0)
    """How long an active task's Kafka transaction stays open before it commits."""
    loop_timeout_ms: int = Field(default=120_000, ge=1000)
    """A main loop that has not come round this long (a process() or a client call that
    never returns) ends the processor with exit 3, so that its supervisor starts it
    again; its tasks move to other processors meanwhile."""
    commit_timeout_ms: int = Field(default=30_000, ge=100)
    """An active task's commit (outputs flushed, offsets sent, transaction ended) that
    has not returned this long is given up: the task starts again from its last commit
    with a new producer, which fences the stuck one. A client call can outlive its own
    timeout when a broker is lost; this bounds the wait. Keep it below loop_timeout_ms."""
    metrics_port: int | dict[str, int] = Field(default=0, examples=[{"p1": 9101, "p2": 9102}])
    """0: a free port (found through GET /sd); a fixed port; or a table per processor id
    (an id missing from it gets a free port)."""
    metrics_host: str = Field(default="127.0.0.1", examples=["10.0.0.5"])
    """The address the metrics server binds to, and reports (not 0.0.0.0)."""
    bind_timeout_ms: int = Field(default=30000, ge=0)
    """A fixed metrics port in use is tried again this long, then the processor exits 1
    (its supervisor starts it again); 0: tried once."""
    on_error: Literal["fail", "skip", "dlq"] = "fail"
    """A record whose process() raises: stop the task, skip it, or send it to the
    dead-letter topic `baton.<job>.dlq`."""
    idle_fetch_backoff_ms: int = Field(default=0, ge=0, le=10_000)
    """An idle consumer pauses this long on brokers without long polls; 0: never."""
    stall_timeout_ms: int = Field(default=120_000, ge=1000)
    """A task's read of a partition whose end moved and whose position stood still this
    long is stalled: logged, counted and recovered with a new consumer (long enough that
    a consumer reconnecting after a broker restart is not taken for one)."""
    drain_on_stop_ms: int = Field(default=0, ge=0, examples=[60000])
    """On SIGTERM, first ask the coordinator to drain this processor and hand its tasks
    over warm, for at most this long, then stop (releasing what is left with a last
    commit); a second SIGTERM stops at once. 0: SIGTERM stops at once (the tasks move
    without a warm copy). Keep it below the supervisor's stop timeout."""
    min_free_disk_mb: int = Field(default=256, ge=0)
    """Below this much free space on state_dir's disk a processor takes no new task
    (it keeps those it runs) until there is again; 0: no check."""
    tls_cert_file: str = Field(default="", examples=["/etc/baton/p1.pem"])
    """The certificate a processor presents under mutual TLS (common name: its id)."""
    tls_key_file: str = Field(default="", examples=["/etc/baton/p1.key"])
    """The key of tls_cert_file."""

    @field_validator("metrics_port")
    @classmethod
    def _ports(cls, port: int | dict[str, int]) -> int | dict[str, int]:
        return check_ports(port)

    def metrics_port_for(self, processor_id: str) -> int:
        """The metrics port of processor `processor_id` (0: a free one)."""
        port = self.metrics_port
        return port.get(processor_id, 0) if isinstance(port, dict) else port


class CatchUpConfig(_Section):
    source: CatchUpSource = "input"
    """Where a new home rebuilds a task's state: its input through process(), or the
    changelog topic `baton.<job>.changelog` the active task writes."""
    changelog_read_from: Literal["store", "beginning"] = "store"
    """Where a changelog read starts: the store's position, or the partition's start."""
    acceptable_lag: int = Field(default=1000, ge=0)
    """A warmup this close to the owner (records) is handed the task."""
    max_warmups: int = Field(default=2, ge=1)
    """Warmups catching up at once, job-wide."""
    num_standbys: int = Field(default=0, ge=0)
    """Hot standby replicas per task (they follow the owner; failover goes to them)."""
    bulk_threshold: int = Field(default=5_000_000, ge=0)
    """A fresh store's backlog above this many records is rebuilt on Spark first."""
    balance_factor: int = Field(default=1, ge=1)
    """Balanced: each processor's active tasks within this many of its (capacity) share."""


class SparkConfig(_Section):
    master: str = Field(default="local[*]", examples=["spark://10.0.0.10:7077"])
    """The Spark master of bulk catch-up and `baton audit` (spark://, yarn, k8s://...)."""
    conf: dict[str, str | int | float | bool] = Field(
        default_factory=dict, repr=False, examples=[{"spark.driver.host": "10.0.0.21"}])
    """Spark properties passed to the session as is; values may be `{ file }` / `{ env }`
    secrets as in `[kafka]` (resolved values: never in repr)."""
    secret_keys: frozenset[str] = frozenset()
    """(derived) the conf keys whose values came from a file or the environment."""


class AutoscaleConfig(_Section):
    min_processors: int = Field(default=1, ge=1)
    """The fewest processors the recommendation (and `baton autoscale`) goes to."""
    max_processors: int = Field(default=0, ge=0)
    """The most; 0: the job's task count (more could hold no task)."""
    target_utilization: float = Field(default=0.7, gt=0, le=1)
    """The busy share each processor is sized for: the rest is headroom for bursts and
    for burning a lag."""
    max_lag_s: float = Field(default=30, gt=0)
    """A lag is burnt within this many seconds: its records over this time are demand."""
    allow_expand: bool = False
    """Past the task count, recommend (and let `baton autoscale` perform) expand + split."""
    up_window_ms: int = Field(default=15_000, ge=0)
    """A scale-out is recommended once every estimate of this long needs more (a spike
    shorter than it does not scale)."""
    down_window_ms: int = Field(default=300_000, ge=0)
    """A scale-in once every estimate of this long needs fewer, to the window's peak."""
    max_decisions_per_hour: int = Field(default=6, ge=1)
    """Decisions (the recommendation leaving the current count) in any hour."""
    launcher: Literal["local", "systemd", "command"] = "local"
    """How `baton autoscale` starts and stops processors: `local` (child processes on its
    own host, `baton processor -c <this file> --id ID`), `systemd` (the template units
    `baton-processor@ID` of deploy/systemd), or `command` (start_command, stop_command)."""
    start_command: str = Field(default="", examples=["nomad job dispatch -meta id={id} baton"])
    """The command launcher's start of processor `{id}` (run by /bin/sh; exit 0: started)."""
    stop_command: str = Field(default="", examples=["nomad job stop baton-{id}"])
    """The command launcher's stop of processor `{id}` after its drain (exit 0: stopped)."""
    processor_prefix: str = Field(default="auto-", pattern=r"^[A-Za-z0-9._-]{0,100}$")
    """Processors `baton autoscale` starts are named this and the lowest number no live
    processor has (`auto-1`, `auto-2`, ...)."""
    state_dir: str = Field(default="", examples=["/var/lib/baton/autoscale"])
    """Where `baton autoscale` records the processors it started (the local launcher's
    pid files and logs), so a restarted autoscaler finds them; empty:
    `<processor.state_dir>/autoscale-<job>`."""
    poll_interval_ms: int = Field(default=2000, ge=100)
    """How often `baton autoscale` reads the coordinator's status and recommendation."""
    start_timeout_ms: int = Field(default=120_000, ge=1000)
    """A processor `baton autoscale` started that has not registered within this is
    stopped again and the scale-out counted as failed."""

    @model_validator(mode="after")
    def _bounds(self) -> AutoscaleConfig:
        if self.max_processors and self.max_processors < self.min_processors:
            raise ValueError(f"max_processors ({self.max_processors}) is below "
                             f"min_processors ({self.min_processors})")
        if self.launcher == "command":
            for key in ("start_command", "stop_command"):
                if "{id}" not in getattr(self, key):
                    raise ValueError(f"{key} must name the processor as {{id}} with "
                                     f'launcher = "command"')
        return self


class Config(_Section):
    job: JobConfig
    # resolved values, secrets included: never in repr (see orchestrator.wire.secrets)
    kafka: dict[str, Any] = Field(default_factory=dict, repr=False)
    coordinator: CoordinatorConfig = CoordinatorConfig()
    processor: ProcessorConfig = ProcessorConfig()
    catch_up: CatchUpConfig = CatchUpConfig()
    spark: SparkConfig = SparkConfig()
    store: StoreConfig = StoreConfig()
    autoscale: AutoscaleConfig = AutoscaleConfig()
    path: Path = Path("<memory>")
    # the [kafka] keys whose values came from a file or the environment
    secret_keys: frozenset[str] = frozenset()
    # dotted key -> the BATON_<SECTION>__<KEY> variable its value came from
    sources: dict[str, str] = Field(default_factory=dict)

    @field_validator("kafka")
    @classmethod
    def _kafka(cls, kafka: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(kafka.get("bootstrap_servers", kafka.get("bootstrap.servers")), str):
            raise ValueError("bootstrap_servers (host:port[,host:port]) is required")
        for key, value in kafka.items():
            if not isinstance(value, str | int | float | bool):
                raise ValueError(f"{key}: librdkafka settings must be scalars")
        return kafka

    def kafka_settings(self, **extra: Any) -> dict[str, Any]:
        """librdkafka settings: [kafka] as is, with `bootstrap_servers` spelled its way.

        Secrets included: for clients only. Anything shown uses `shown_kafka_settings`.
        """
        return {**_librdkafka_names(self.kafka), **extra}

    def shown_kafka_settings(self) -> dict[str, Any]:
        """`kafka_settings()` with every secret value redacted: what logs may show."""
        return _librdkafka_names(redact(self.kafka, self.secret_keys))

    def mask(self, text: str) -> str:
        """`text` (an error, a log line) with every secret [kafka] value redacted."""
        return mask(text, self.secret_values())

    def secret_values(self) -> list[str]:
        """The secret [kafka] and [spark] conf values (see orchestrator.wire.secrets)."""
        return (secret_values(self.kafka, self.secret_keys)
                + secret_values(self.spark.conf, self.spark.secret_keys))

    @model_validator(mode="after")
    def _tls(self) -> Config:
        c = self.coordinator
        for section, cert, key in (("coordinator", "tls_cert_file", "tls_key_file"),
                                   ("coordinator", "tls_client_cert_file",
                                    "tls_client_key_file"),
                                   ("processor", "tls_cert_file", "tls_key_file")):
            values = getattr(self, section)
            if bool(getattr(values, cert)) != bool(getattr(values, key)):
                raise ValueError(f"{section}.{cert} and {section}.{key} go together: "
                                 "set both or neither")
        if c.tls_client_ca_file and not c.tls_cert_file:
            raise ValueError("coordinator.tls_client_ca_file needs coordinator.tls_cert_file "
                             "(mutual TLS is TLS first)")
        plain = [u for u in c.urls if not u.startswith("https://")]
        if c.tls_cert_file and plain:
            raise ValueError(f"coordinator.url has {plain[0]!r} but the API is served over "
                             "TLS (coordinator.tls_cert_file): use https://")
        return self

    def file(self, value: str) -> Path | None:
        """A path setting resolved against the config file; None when unset."""
        return _relative_to(self.path, value) if value else None

    def path_of(self, value: str) -> Path:
        """A path setting resolved against the config file."""
        return _relative_to(self.path, value)

    @property
    def processor_token_file(self) -> Path:
        """The token processors present: processor_token_file, else token_file."""
        own = self.file(self.coordinator.processor_token_file)
        return own if own is not None else self.token_file

    @property
    def job_path(self) -> list[Path]:
        """`[job] path`: the directories of the job's code, resolved against the file."""
        return [self.path_of(p) for p in self.job.path]

    @property
    def state_dir(self) -> Path:
        return _relative_to(self.path, self.processor.state_dir)

    @property
    def token_file(self) -> Path:
        return _relative_to(self.path, self.coordinator.token_file)


def _librdkafka_names(kafka: Mapping[str, Any]) -> dict[str, Any]:
    return {k.replace("_", ".") if k == "bootstrap_servers" else k: v for k, v in kafka.items()}


def _relative_to(config_path: Path, value: str) -> Path:
    """Relative paths in a config file are relative to the file, not the cwd."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else config_path.parent / path


def load_config(path: str | Path, read_secrets: bool = True) -> Config:
    """Read and validate a TOML config file.

    Args:
        path: the file.
        read_secrets: False: `[kafka]` values given by `{ file }` / `{ env }` are
            checked for shape only and left redacted, for commands that never create a
            Kafka client (an operator's shell has neither the daemon's environment nor,
            often, access to its secret files).

    Raises:
        ConfigError: naming the file and the key at fault.
    """
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse_config(raw, path, read_secrets=read_secrets)


def parse_config(raw: dict[str, Any], path: Path = Path("<memory>"),
                 environ: Mapping[str, str] | None = None, read_secrets: bool = True
                 ) -> Config:
    """Validate an already-parsed config mapping (tests and the demo build these).

    `[kafka]` values given as `{ file = ... }` or `{ env = ... }` are read here, from
    `environ` (default: the process environment); see `load_config` for `read_secrets`.
    """
    for derived in _DERIVED:
        if derived in raw:
            raise ConfigError(f"{path}: {derived}: unknown top-level key")
    env = os.environ if environ is None else environ
    laid = overlay(raw, env, path, [s for s in Config.model_fields if s not in _DERIVED])
    raw = laid.raw
    problems: list[str] = list(laid.problems)
    kafka = _resolve_kafka(raw, path, env, read_secrets, problems)
    spark = _resolve_spark(raw, path, env, read_secrets, problems)
    if laid.kafka_secrets and "secret_keys" in kafka:
        kafka["secret_keys"] = kafka["secret_keys"] | laid.kafka_secrets
    if laid.spark_secrets and "secret_keys" in spark.get("spark", {}):
        spark["spark"]["secret_keys"] = spark["spark"]["secret_keys"] | laid.spark_secrets
    try:
        config = Config.model_validate({**raw, **kafka, **spark, "path": path.resolve(),
                                        "sources": laid.sources})
    except ValidationError as exc:
        problems.extend(describe_errors(path, exc.errors(), laid.sources))
    if problems:
        raise ConfigError("\n".join(problems), problems) from None
    return config


# fields of Config the loader sets, which no file or variable may
_DERIVED = ("path", "secret_keys", "sources")


def _resolve_kafka(raw: dict[str, Any], path: Path, environ: Mapping[str, str], read: bool,
                   problems: list[str]) -> dict[str, Any]:
    """[kafka] flattened and its secrets read, as Config fields (none if it is no table)."""
    if not isinstance(raw.get("kafka"), dict):
        return {}
    try:
        resolved = resolve(raw["kafka"], lambda value: _relative_to(path.resolve(), value),
                           environ, read)
    except SecretError as exc:
        problems.append(f"{path}: kafka.{exc.key}: {exc}")
        return {"kafka": {"bootstrap_servers": ""}}    # the other keys are still checked
    return {"kafka": resolved.settings, "secret_keys": resolved.secret_keys}


def _resolve_spark(raw: dict[str, Any], path: Path, environ: Mapping[str, str], read: bool,
                   problems: list[str]) -> dict[str, Any]:
    """[spark] with `conf` flattened and its secrets read (as [kafka]'s)."""
    spark = raw.get("spark")
    if isinstance(spark, dict) and "secret_keys" in spark:
        problems.append(f"{path}: spark.secret_keys: unknown key (misspelt?)")
        spark = {k: v for k, v in spark.items() if k != "secret_keys"}
    if not isinstance(spark, dict) or not isinstance(spark.get("conf"), dict):
        return {"spark": spark} if isinstance(spark, dict) else {}
    try:
        resolved = resolve(spark["conf"], lambda value: _relative_to(path.resolve(), value),
                           environ, read)
    except SecretError as exc:
        problems.append(f"{path}: spark.conf.{exc.key}: {exc}")
        return {"spark": {**spark, "conf": {}}}
    return {"spark": {**spark, "conf": resolved.settings,
                      "secret_keys": resolved.secret_keys}}
