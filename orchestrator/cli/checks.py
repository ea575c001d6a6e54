"""The probes of `baton check`: what a job needs before its daemons start.

Theory of operation: each probe returns `Finding`s and never raises, so one run
reports every problem at once. A finding is `ok`, a `note` (nothing to fix, e.g. a
topic the coordinator creates on its first start), `unreachable` (the broker or a
coordinator did not answer: try again, or fix the network; exit 1) or `error` (the
config, a missing topic, a refused permission: the operator must change something;
exit 2). Probes that need the broker are skipped when it does not answer, since each
would only repeat that.

The job's consumer group is checked by reading its committed offsets (the Describe
permission on the group). The topics are read from one full metadata listing: a topic
missing from it either does not exist or is hidden from this principal (no Describe
ACL); both need the operator. A topic Baton creates itself (the coordinator stream,
the changelog, the dead-letter topic) may be missing: the broker is asked to validate
its creation (`validate_only`), which checks the CreateTopics permission without
creating it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tenacity import stop_after_attempt

from orchestrator.kafka.stream import stream_topic
from orchestrator.wire.changelog import changelog_topic
from orchestrator.wire.client import CoordinatorClient, CoordinatorError
from orchestrator.wire.config import Config
from orchestrator.wire.http import httpx
from orchestrator.wire.tls import TlsSettings, client_context, plain_http_context
from orchestrator.wire.token import TokenError, read_token
from processor.job import JobLoadError, load_job
from processor.runtime.dead_letters import DLQ_PARTITIONS, dlq_topic

__all__ = ["EXIT_CODES", "Finding", "Status", "exit_code", "probe"]

Status = Literal["ok", "note", "unreachable", "error"]

# The exit code a finding of each status asks for; the run exits with the highest.
EXIT_CODES: dict[Status, int] = {"ok": 0, "note": 0, "unreachable": 1, "error": 2}

# How long one broker or coordinator request may take: a healthy one answers in
# milliseconds, and an operator waiting on a check wants an answer soon.
_TIMEOUT_S = 10.0
# how long to wait on an admin request's future: past the request's own timeout, so
# librdkafka always ends the request itself (a client destroyed with a request still in
# flight can crash the process at exit)
_RESULT_WAIT_S = _TIMEOUT_S + 5.0

# One attempt per coordinator URL: the check reports, it does not wait for recovery.
_ONCE: dict[str, Any] = {"stop": stop_after_attempt(1)}

# librdkafka error codes that mean "who you are or what you may do", not "not there".
_REFUSED = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED,
                      KafkaError.TOPIC_AUTHORIZATION_FAILED,
                      KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError._SSL})


@dataclass(frozen=True)
class Finding:
    """One line of the report.

    Attributes:
        status: see the module docstring.
        subject: the key, topic or URL the finding is about (`job.inputs events`).
        message: what was found and, for a problem, what to do.
    """

    status: Status
    subject: str
    message: str


def exit_code(findings: list[Finding]) -> int:
    """0 all good, 1 something unreachable, 2 a config or permission error."""
    return max((EXIT_CODES[f.status] for f in findings), default=0)


def probe(config: Config) -> list[Finding]:
    """Every probe of a valid config: the job class, the broker and topics, the
    coordinators."""
    findings = [_job_class(config)]
    findings.extend(_kafka(config))
    findings.extend(_coordinators(config))
    return findings


def _job_class(config: Config) -> Finding:
    try:
        job = load_job(config.job.class_, config.job_path)
    except JobLoadError as exc:
        return Finding("error", "job.class", f"{exc}; is the job's package installed here, "
                                             "on PYTHONPATH or in [job] path?")
    return Finding("ok", "job.class", f"{config.job.class_} imports ({job.__name__})")


def _kafka(config: Config) -> Iterator[Finding]:
    bootstrap = str(config.kafka_settings()["bootstrap.servers"])
    # librdkafka's own log lines would repeat the finding on stderr: only the report
    admin = AdminClient({**config.kafka_settings(), "log_level": 0,
                         "socket.timeout.ms": int(_TIMEOUT_S * 1000)})
    try:
        meta = admin.list_topics(timeout=_TIMEOUT_S)
    except KafkaException as exc:
        error = exc.args[0]
        refused = error.code() in _REFUSED
        yield Finding("error" if refused else "unreachable", "kafka.bootstrap_servers",
                      f"broker {bootstrap}: {error.str()}; "
                      + ("check the [kafka] credentials and ACLs" if refused else
                         "is the broker running and kafka.bootstrap_servers right?"))
        return
    yield Finding("ok", "kafka.bootstrap_servers",
                  f"broker {bootstrap} answers ({len(meta.brokers)} broker"
                  f"{'' if len(meta.brokers) == 1 else 's'})")
    topics: dict[str, int] = {name: len(t.partitions) for name, t in meta.topics.items()
                              if t.error is None}
    for topic in config.job.inputs:
        yield _needed(topics, "job.inputs", topic)
    yield _needed(topics, "job.output", config.job.output)
    for topic in config.job.outputs:
        if topic != config.job.output:
            yield _needed(topics, "job.outputs", topic)
    name = config.job.name
    yield _created(admin, topics, "job.name", stream_topic(name),
                   "the coordinator stream (the coordinator creates it)")
    if config.catch_up.source == "changelog":
        yield _created(admin, topics, "catch_up.source", changelog_topic(name),
                       "the changelog (the coordinator creates it)")
    if config.processor.on_error == "dlq":
        yield _created(admin, topics, "processor.on_error", dlq_topic(name),
                       "the dead-letter topic (a processor creates it)", DLQ_PARTITIONS)
    yield _group(config, topics, f"baton.{name}")


def _group(config: Config, topics: dict[str, int], group: str) -> Finding:
    """The job's consumer group: may this principal read its committed offsets (the
    Describe permission every daemon needs on it)? Asked as the daemons ask, by a
    consumer of the group that never joins it (read_uncommitted: no wait on pending
    transactional offsets)."""
    subject = f"job.name {group}"
    wanted = [TopicPartition(topic, n) for topic in config.job.inputs
              for n in range(topics.get(topic, 0))]
    consumer = Consumer({**config.kafka_settings(), "log_level": 0, "group.id": group,
                         "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
    try:
        offsets = consumer.committed(wanted, timeout=_TIMEOUT_S) if wanted else []
    except KafkaException as exc:
        error = exc.args[0]
        if error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
            return Finding("error", subject, f"consumer group: {error.str()}; grant Describe "
                                             "and Read on the group")
        return Finding("note", subject, f"consumer group not verified: {error.str()}")
    finally:
        consumer.close()
    committed = sum(1 for tp in offsets if tp.offset >= 0)
    return Finding("ok", subject, f"consumer group readable ({committed} committed "
                                  f"offset{'' if committed == 1 else 's'})")


def _needed(topics: dict[str, int], key: str, topic: str) -> Finding:
    """A topic the operator creates: it must exist and be visible to this principal."""
    count = topics.get(topic)
    if count is None:
        return Finding("error", f"{key} {topic}",
                       f"topic {topic!r} does not exist, or this principal may not describe "
                       f"it; create it (or grant Describe, Read/Write on it) or fix {key}")
    return Finding("ok", f"{key} {topic}",
                   f"topic {topic!r}: {count} partition{'' if count == 1 else 's'}")


def _created(admin: AdminClient, topics: dict[str, int], key: str, topic: str, what: str,
             partitions: int = 1) -> Finding:
    """A topic Baton creates when missing: present, or creatable by this principal."""
    count = topics.get(topic)
    subject = f"{key} {topic}"
    if count is not None:
        return Finding("ok", subject, f"{what}: {count} partition{'' if count == 1 else 's'}")
    spec = NewTopic(topic, partitions, 1)
    try:
        admin.create_topics([spec], validate_only=True,
                           request_timeout=_TIMEOUT_S)[topic].result(_RESULT_WAIT_S)
    except KafkaException as exc:
        error = exc.args[0]
        if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return Finding("error", subject, f"{what} exists but this principal may not "
                                             "describe it; grant Describe on it")
        status: Status = "unreachable" if error.code() in (KafkaError._TIMED_OUT,
                                                           KafkaError._TRANSPORT) else "error"
        return Finding(status, subject, f"{what} is missing and cannot be created: "
                                        f"{error.str()}; create it, or grant CreateTopics")
    return Finding("note", subject, f"{what} does not exist yet; this principal may create it")


def _coordinators(config: Config) -> Iterator[Finding]:
    c = config.coordinator
    tls = TlsSettings(config.file(c.tls_ca_file), config.file(c.tls_client_cert_file),
                      config.file(c.tls_client_key_file))
    answered = []
    for url in c.urls:
        try:
            # /containerHeartbeat needs no token: the placeholder is never checked
            with CoordinatorClient(url, "-", _ONCE, timeout=_TIMEOUT_S, tls=tls) as client:
                client.request("GET", "/containerHeartbeat",
                               params={"executionContainerId": "baton-check"})
        except ValueError as exc:   # a TLS file that cannot be read
            yield Finding("error", "coordinator.tls_ca_file", str(exc))
            return
        except CoordinatorError as exc:
            yield Finding("unreachable", f"coordinator.url {url}", str(exc))
            continue
        answered.append(url)
        yield Finding("ok", f"coordinator.url {url}", "answers")
    if answered:
        yield from _token(config, tls, answered)


def _token(config: Config, tls: TlsSettings, urls: list[str]) -> Iterator[Finding]:
    """The operators' token, when written: does each coordinator that answers accept it?
    A standby checks it as the leader does, so coordinators holding different tokens
    show here, before a failover to one would lock everyone out."""
    subject = f"coordinator.token_file {config.token_file}"
    try:
        token = read_token(config.token_file)
    except TokenError as exc:
        if not config.token_file.exists():
            yield Finding("note", subject, "not written yet: 'baton token -c FILE' writes "
                                           "it; copy it to every host")
            return
        yield Finding("error", subject, str(exc))
        return
    answers = {url: _token_answer(url, token, tls) for url in urls}
    accepted = [url for url, answer in answers.items() if answer in _ACCEPTED]
    for url, answer in answers.items():
        where = f"{subject} at {url}"
        if answer in _ACCEPTED:
            yield Finding("ok", where, f"the {_ACCEPTED[answer]} accepts it")
        elif answer in (401, 403) and accepted:
            yield Finding("error", where, (
                f"this coordinator refuses the token (HTTP {answer}) that "
                f"{', '.join(accepted)} accept{'s' if len(accepted) == 1 else ''}: the "
                f"coordinators hold different tokens, and a failover to this one would "
                f"lock the processors out; copy {config.token_file} from the host of "
                f"{accepted[0]} to the same path on this coordinator's host, then restart "
                f"it or send it SIGHUP"))
        elif answer in (401, 403):
            yield Finding("error", where, (
                f"the coordinator refuses the token (HTTP {answer}); copy the coordinators' "
                f"token file to {config.token_file} (or fix coordinator.token_file)"))
        else:
            yield Finding("unreachable", where, f"no answer on the token: {answer}")


# a /status answer that shows the token accepted: the leader's, or a standby's (which
# checks the token before saying it is not the leader)
_ACCEPTED: dict[int | str, str] = {200: "leader", 503: "standby"}


def _token_answer(url: str, token: str, tls: TlsSettings) -> int | str:
    """The HTTP status of `GET /status` at `url` alone (no leader followed), or why
    there was none."""
    verify = (client_context(tls) if url.startswith("https://") or tls.ca_file
              else plain_http_context())
    try:
        with httpx.Client(timeout=_TIMEOUT_S, verify=verify) as http:
            return http.get(f"{url}/status",
                            headers={"Authorization": f"Bearer {token}"}).status_code
    except httpx.HTTPError as exc:
        return str(exc) or type(exc).__name__
