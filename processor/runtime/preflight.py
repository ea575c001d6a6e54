"""What a processor asks the broker before it takes any task: refusals it cannot outlive.

Two things a broker refuses for good, whose refusal would otherwise surface late and
far from the cause, as a task failing on every processor in turn:

- *The transaction timeout.* Every task's producer asks for `transaction.timeout.ms`
  (Baton's 10 s, or [kafka]'s); a broker whose `transaction.max.timeout.ms` is lower
  answers each init_transactions INVALID_TRANSACTION_TIMEOUT, so no task could ever
  activate. The broker's limit is read with DescribeConfigs.
- *ACLs.* The job's principal must read the inputs and write the output (and the
  changelog with catch_up.source = "changelog", the dead-letter topic with on_error =
  "dlq"). DescribeTopics returns the operations the principal may perform on each
  topic (KIP-430); one missing is named with its topic.

Either is a start error (exit 2: the operator must act), naming the values or the
resource and operation. A question the broker will not answer (DescribeConfigs needs
DESCRIBE_CONFIGS on the cluster; a broker without an authorizer reports no
operations) skips that check: the task's own error then says the same later
(`fence_refused`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient, ConfigResource

from orchestrator.kafka.logs import client_logging
from orchestrator.kafka.settings import producer_settings
from orchestrator.wire.changelog import changelog_topic
from orchestrator.wire.config import Config

__all__ = ["DEFAULT_TRANSACTION_TIMEOUT_MS", "FenceRefused", "PreflightError", "check_broker",
           "fence_refused", "transaction_timeout_ms"]

log = logging.getLogger("baton.processor.runtime")

_TIMEOUT_S = 10.0
# what Baton's producers ask for unless [kafka] says otherwise (activation.py's defaults)
DEFAULT_TRANSACTION_TIMEOUT_MS = 10_000


class FenceRefused(Exception):
    """A task's init_transactions was refused for a reason no retry changes."""


class PreflightError(RuntimeError):
    """The broker refuses something every task needs; exit 2."""

    exit_code = 2


def transaction_timeout_ms(config: Config) -> int:
    """The `transaction.timeout.ms` the tasks' producers ask for."""
    return int(config.kafka_settings().get("transaction.timeout.ms",
                                           DEFAULT_TRANSACTION_TIMEOUT_MS))


def _timeout_message(config: Config, configured: int, limit: int) -> str:
    return (f"[kafka] transaction.timeout.ms = {configured} (in {config.path}) is above the "
            f"broker's transaction.max.timeout.ms = {limit}: the broker refuses every "
            f"transactional producer asking for more. Set transaction.timeout.ms to at "
            f"most {limit} in [kafka], or raise the broker's transaction.max.timeout.ms")


def _broker_limit(admin: AdminClient) -> int | None:
    """The broker's `transaction.max.timeout.ms`, or None if it will not say."""
    try:
        brokers = admin.list_topics(timeout=_TIMEOUT_S).brokers
        resource = ConfigResource(ConfigResource.Type.BROKER, str(min(brokers)))
        found = admin.describe_configs([resource])[resource].result(_TIMEOUT_S)
    except (KafkaException, ValueError, TimeoutError) as exc:
        log.info("preflight: cannot read the broker's transaction.max.timeout.ms (%s); "
                 "a task's activation will report a transaction timeout it refuses", exc)
        return None
    entry = found.get("transaction.max.timeout.ms")
    return int(entry.value) if entry is not None and entry.value is not None else None


def _needed(config: Config) -> dict[str, tuple[AclOperation, ...]]:
    """Topic -> the operations the processors perform on it."""
    needed: dict[str, tuple[AclOperation, ...]] = {
        t: (AclOperation.READ,) for t in config.job.inputs}
    needed[config.job.output] = (AclOperation.WRITE,)
    if config.catch_up.source == "changelog":
        needed[changelog_topic(config.job.name)] = (AclOperation.WRITE, AclOperation.READ)
    if config.processor.on_error == "dlq":
        needed[f"baton.{config.job.name}.dlq"] = (AclOperation.WRITE,)
    return needed


def _principal(config: Config) -> str:
    user = config.kafka_settings().get("sasl.username")
    return f"User:{user}" if user else "the job's principal"


def _missing_acls(admin: AdminClient, config: Config) -> list[str]:
    """One line per topic operation the principal lacks."""
    needed = _needed(config)
    futures = admin.describe_topics(TopicCollection(list(needed)),
                                    include_authorized_operations=True)
    missing: list[str] = []
    for topic, future in futures.items():
        try:
            allowed: Iterable[AclOperation] | None = future.result(
                _TIMEOUT_S).authorized_operations
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                missing.append(f"DESCRIBE on topic {topic!r}")
            continue        # a missing topic is the coordinator's and `baton check`'s to say
        if allowed is None:     # no authorizer: nothing is refused
            continue
        granted = set(allowed)
        missing += [f"{op.name} on topic {topic!r}" for op in needed[topic]
                    if op not in granted and AclOperation.ALL not in granted]
    return missing


def check_broker(config: Config) -> None:
    """Refuse to start when the broker would refuse every task (see the module docstring).

    Raises:
        PreflightError: the transaction timeout is above the broker's limit, or the
            principal lacks an operation on one of the job's topics.
    """
    admin = AdminClient({**producer_settings(config.kafka_settings()),
                         **client_logging("processor.preflight")})
    try:
        admin.list_topics(timeout=_TIMEOUT_S)
    except KafkaException as exc:      # unreachable: the runtime's own retries say so
        log.info("preflight skipped: the broker does not answer (%s)", exc)
        return
    configured = transaction_timeout_ms(config)
    limit = _broker_limit(admin)
    if limit is not None and configured > limit:
        raise PreflightError(_timeout_message(config, configured, limit))
    try:
        missing = _missing_acls(admin, config)
    except (KafkaException, TimeoutError) as exc:
        log.info("preflight: cannot describe the job's topics (%s)", exc)
        return
    if missing:
        raise PreflightError(
            f"the broker denies {_principal(config)} {'; '.join(missing)} (ACLs): grant "
            f"it (kafka-acls --add --allow-principal ... --operation ... --topic ...), "
            f"then start the processor again")


def fence_refused(config: Config, task: str, exc: BaseException) -> FenceRefused | None:
    """A clear error for an init_transactions refusal no retry can change, else None."""
    reason = _fence_reason(config, task, exc)
    return None if reason is None else FenceRefused(reason)


def _fence_reason(config: Config, task: str, exc: BaseException) -> str | None:
    error: Any = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if not isinstance(error, KafkaError):
        return None
    if error.code() == KafkaError.INVALID_TRANSACTION_TIMEOUT:
        admin = AdminClient({**producer_settings(config.kafka_settings()),
                         **client_logging("processor.preflight")})
        limit = _broker_limit(admin)
        return _timeout_message(config, transaction_timeout_ms(config),
                                limit if limit is not None else -1).replace(
            "= -1", "(which it does not let this principal read)")
    if error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        return (f"task {task!r}: the broker denies {_principal(config)} WRITE on "
                f"transactional id 'baton.{config.job.name}.{task}' (ACLs): grant it "
                f"(kafka-acls --add --operation Write --transactional-id "
                f"'baton.{config.job.name}.' --resource-pattern-type prefixed)")
    return None
