"""What the embedded broker's autosave costs (a script, not a test).

noida-db keeps its data in memory and, while writes go on, rewrites all of it to its
data dir every few seconds (an `autosave` thread, one JSON file per service). This
script loads --records records into one topic of a fresh embedded broker, then writes
one record every 250 ms for --seconds and prints the CPU seconds the broker's autosave
thread spends in each quarter second, and in all: what any test or bench with that much
data pays on the same cores while anything writes (docs/performance.md, "Catch-up inside a join").
It measures the embedded broker itself, so it runs on that one only (no --broker):
Apache Kafka appends to its log as it is written and has no such thread.

    .venv/bin/python bench/broker_autosave.py [--records 1000000] [--seconds 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from _common import thread_cpu_seconds
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from orchestrator.devkit.embedded import EmbeddedBroker

_STEP_S = 0.25


def _autosave(pid: int | None) -> float:
    return thread_cpu_seconds(pid).get("autosave", 0.0)


def measure(records: int, seconds: float) -> dict[str, float]:
    """Autosave CPU seconds over `seconds` of trickled writes, `records` records held."""
    with EmbeddedBroker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic("t", 4, 1)]).values():
            future.result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
        for i in range(records):
            producer.produce("t", key=b"k%d" % i, value=b"v" * 40, partition=i % 4)
            if i % 50_000 == 0:
                producer.flush(30)
        producer.flush(30)
        time.sleep(3)                   # let the load's own autosave finish
        started, before = time.monotonic(), _autosave(broker.pid)
        last = before
        while time.monotonic() - started < seconds:
            time.sleep(_STEP_S)
            producer.produce("t", key=b"x", value=b"y")
            producer.flush(30)
            now = _autosave(broker.pid)
            if now - last >= 0.01:
                print(f"{time.monotonic() - started:6.2f}s autosave {now - last:.2f} CPU s",
                      file=sys.stderr)
            last = now
        elapsed = time.monotonic() - started
    return {"records": records, "seconds": elapsed, "autosave_cpu_s": last - before,
            "autosave_cores": (last - before) / elapsed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="Embedded broker only: it measures noida-db's own autosave thread; Apache "
               "Kafka has none, so there is no --broker.")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = measure(args.records, args.seconds)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['records']:,} records held, one written every {_STEP_S}s: the "
              f"autosave thread spent {result['autosave_cpu_s']:.2f} CPU s in "
              f"{result['seconds']:.1f}s ({result['autosave_cores']:.2f} core)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
