"""`baton dev`: the user's own job on the embedded broker, fed from JSON lines.

Theory of operation: `baton dev -c job.toml` starts the embedded broker on a free port,
creates the job's input and output topics, writes the *effective config* and runs a
coordinator and N processors from it as child processes, as an operator would run them.
It then produces the records of the input file (or stdin) and prints, as JSON lines on
stdout, every record the job commits to its output topics (a read_committed consumer:
what a downstream reader sees). Ctrl-C (SIGINT) or SIGTERM stops the feeding, the
processors, the coordinator and the broker, in that order, and exits 0.

The effective config is the job's file with `[kafka]` replaced by the embedded broker's
address and settings, the processors' state in a fresh directory (the broker is fresh
too: stores from another run would be ahead of it) and the embedded broker's
`[processor]` / `[catch_up]` settings. It is written next to the job's file, as
`<name>.dev.toml`, so every relative path in it (token_file, [job] path, TLS files)
means what it means in the job's file; it is removed on exit. The coordinator's
address and token file are the job's own: `baton status|plan|wait|drain -c job.toml`
work from another terminal as they would in production; commands that reach the
broker (`baton processor`, `expand`, `check`) take the effective file.
"""

from __future__ import annotations

import signal
import sys
import tempfile
import threading
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from orchestrator.devkit.cluster import Cluster, create_topics
from orchestrator.devkit.embedded import (
    EMBEDDED_CATCH_UP_SETTINGS,
    EMBEDDED_CLIENT_SETTINGS,
    EMBEDDED_KAFKA_SETTINGS,
    EMBEDDED_PROCESSOR_SETTINGS,
    EmbeddedBroker,
)
from orchestrator.devkit.records import InputError, output_line, parse_line
from orchestrator.wire.config import Config, dump_config, load_config

__all__ = ["effective_config", "run_dev"]

_POLL_S = 0.2


def effective_config(config_file: Path, bootstrap: str, state_dir: Path) -> Path:
    """Write the effective config next to `config_file` (see the module docstring)."""
    raw: dict[str, Any] = tomllib.loads(config_file.read_text(encoding="utf-8"))
    raw["kafka"] = {"bootstrap_servers": bootstrap, **EMBEDDED_KAFKA_SETTINGS}
    raw["processor"] = {**raw.get("processor", {}), "state_dir": str(state_dir),
                        **EMBEDDED_PROCESSOR_SETTINGS}
    raw["catch_up"] = {**raw.get("catch_up", {}), **EMBEDDED_CATCH_UP_SETTINGS}
    text = dump_config(raw)
    path = config_file.with_name(f"{config_file.stem}.dev.toml")
    path.write_text(f"# written by baton dev for {config_file.name}; removed when it "
                    f"stops\n{text}", encoding="utf-8")
    return path


class _Feeder:
    """Produces the input lines on a thread of its own (stdin may block for ever)."""

    def __init__(self, config: Config, bootstrap: str, lines: Iterable[str], source: str,
                 say: Callable[[str], None], flush_each: bool) -> None:
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                   "partitioner": config.job.partitioner, "log_level": 3})
        self._lines, self._source, self._say = lines, source, say
        self._inputs, self._flush_each = list(config.job.inputs), flush_each
        self.sent = 0
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dev-feeder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            for number, line in enumerate(self._lines, 1):
                try:
                    record = parse_line(line, self._inputs)
                except InputError as exc:
                    self._say(f"{self._source}:{number}: skipped: {exc}")
                    continue
                if record is None:
                    continue
                extra: dict[str, Any] = {} if record.partition is None else {
                    "partition": record.partition}
                if record.timestamp is not None:
                    extra["timestamp"] = record.timestamp
                self._produce(record.topic, record.key, record.value, record.headers, extra)
                self.sent += 1
                if self._flush_each:
                    self._producer.flush(30)
            self._producer.flush(30)
            self._say(f"{self._source}: {self.sent} record(s) sent; Ctrl-C stops")
        finally:
            self.done.set()

    def _produce(self, topic: str, key: bytes | None, value: bytes | None,
                 headers: list[tuple[str, bytes | None]], extra: dict[str, Any]) -> None:
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, headers=headers or None,
                                       **extra)
                self._producer.poll(0)
                return
            except BufferError:
                self._producer.poll(0.1)
            except KafkaException as exc:
                self._say(f"{self._source}: cannot produce to {topic}: {exc}")
                return


def _output_consumer(bootstrap: str, topics: Iterable[str]) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "baton-dev-printer",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "log_level": 3, **EMBEDDED_CLIENT_SETTINGS})
    assigned: list[TopicPartition] = []
    for topic in topics:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        assigned.extend(TopicPartition(topic, p, 0) for p in meta.partitions)
    consumer.assign(assigned)
    return consumer


def run_dev(config_file: Path, processors: int, input_file: Path | None, partitions: int,
            out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run the job until SIGINT/SIGTERM; 0 then, 1 if a daemon it runs stops on its own.

    Raises:
        ConfigError: the job's file is invalid.
        EmbeddedBrokerError: the broker did not start.
        RuntimeError, TimeoutError: the topics or the coordinator could not start.
        OSError: the input file cannot be read.
    """
    config = load_config(config_file)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}

    def say(text: str) -> None:
        print(f"baton dev: {text}", file=err, flush=True)

    lines: Iterable[str] = (input_file.open(encoding="utf-8") if input_file is not None
                            else sys.stdin)
    try:
        with tempfile.TemporaryDirectory(prefix="baton-dev-") as tmp:
            return _run(config, Path(tmp), processors, partitions, lines,
                        str(input_file or "stdin"), stop, say, out)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if input_file is not None:
            lines.close()  # type: ignore[attr-defined]


def _run(config: Config, workdir: Path, processors: int, partitions: int,
         lines: Iterable[str], source: str, stop: threading.Event,
         say: Callable[[str], None], out: TextIO) -> int:
    broker = EmbeddedBroker(workdir / "broker")
    broker.start()
    effective: Path | None = None
    cluster: Cluster | None = None
    feeder: _Feeder | None = None
    try:
        bootstrap = broker.bootstrap
        topics = {t: partitions for t in (*config.job.inputs, *config.job.output_topics)}
        # kept whatever their records' timestamps: a file of past events (and the
        # outputs, which carry their time) would otherwise be deleted by the broker's
        # time-based retention (7 days) as soon as it is written
        create_topics(broker.client_settings(), topics, {"retention.ms": "-1"})
        effective = effective_config(config.path, bootstrap, workdir / "state")
        say(f"job {config.job.name} ({config.job.class_}) on the embedded broker "
            f"{bootstrap} (pid {broker.pid}); topics {', '.join(topics)} "
            f"({partitions} partitions each)")
        cluster = Cluster(workdir, effective, say, new_session=True, own_state_dirs=False)
        cluster.start("coordinator", "coordinator")
        cluster.wait_for_file(config.token_file)
        for n in range(1, processors + 1):
            cluster.start(f"p{n}", "processor", "--id", f"p{n}")
        say(f"coordinator {config.coordinator.urls[0]}; from another terminal: "
            f"baton status -c {config.path}, baton processor -c {effective} --id "
            f"p{processors + 1}; daemon logs in {workdir}")
        feeder = _Feeder(config, bootstrap, lines, source, say, source == "stdin")
        feeder.start()
        return _print_outputs(config, bootstrap, cluster, stop, say, out)
    finally:
        say("stopping")
        if cluster is not None:
            cluster.stop_all()
        broker.close()
        if effective is not None:
            effective.unlink(missing_ok=True)


def _print_outputs(config: Config, bootstrap: str, cluster: Cluster, stop: threading.Event,
                   say: Callable[[str], None], out: TextIO) -> int:
    """Print committed outputs until `stop`; 1 if the coordinator or every processor
    stopped on its own meanwhile."""
    consumer = _output_consumer(bootstrap, config.job.output_topics)
    try:
        while not stop.is_set():
            for msg in consumer.consume(500, _POLL_S):
                if msg.error() is None:
                    print(output_line(msg), file=out, flush=True)
            gone = _stopped(cluster)
            if gone:
                say(f"{gone} stopped on its own; see its log in {cluster.workdir}")
                return 1
        return 0
    finally:
        consumer.close()


def _stopped(cluster: Cluster) -> str:
    """The coordinator if it exited, or the processors if all of them did."""
    procs = cluster.procs
    if procs["coordinator"].poll() is not None:
        return "the coordinator"
    own = [p for name, p in procs.items() if name != "coordinator"]
    if own and all(p.poll() is not None for p in own):
        return "every processor"
    return ""

