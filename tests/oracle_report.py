"""The oracles run over a job's input and output topics (`oracle_check`, running sums;
`identified_check`, IdentifiedSum's), and what a failed running-sum check shows: the
first wrong sums of a few keys with the input and output records around each, and a
file with every record of both topics.

Only the topics tell what went wrong once the daemons are gone, so the report names
each record by partition@offset (and the origin of a forwarded copy), and keeps the
whole input and output for a closer look.
"""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.wire.barrier import FORWARDED_HEADER, input_records
from processor.oracle import check_identified_sums, check_running_sums

if TYPE_CHECKING:
    from tests.brokers import Broker

__all__ = ["Checked", "identified_check", "oracle_check", "report", "unseen"]


@dataclass(frozen=True)
class Checked:
    """An oracle result that prints its diagnosis when it fails."""

    result: Any
    diagnosis: str

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result, name)

    def __str__(self) -> str:
        return f"{self.result}\n{self.diagnosis}" if self.diagnosis else str(self.result)


def _where(m: Any) -> str:
    origin = dict(m.headers() or ()).get(FORWARDED_HEADER)
    return f"{m.partition()}@{m.offset()}" + (f"<-{origin.decode()}" if origin else "")


def report(inputs: list[Any], outputs: list[Any], keys: int = 4, around: int = 4) -> str:
    """The first wrong sums of up to `keys` keys, and where every record was dumped."""
    records: dict[bytes, list[tuple[str, int]]] = defaultdict(list)
    for m in inputs:
        records[m.key()].append((_where(m), int(m.value())))
    got: dict[bytes, list[tuple[str, int]]] = defaultdict(list)
    for m in outputs:
        got[m.key()].append((_where(m), int(m.value())))
    lines, wrong = [], 0
    for key in sorted(records):
        sums, total = [], 0
        for _, value in records[key]:
            total += value
            sums.append(total)
        out = got.get(key, [])
        first = next((i for i, (w, g) in enumerate(zip(sums, out, strict=False)) if w != g[1]),
                     None if len(sums) == len(out) else min(len(sums), len(out)))
        if first is None:
            continue
        wrong += 1
        if len(lines) < keys:
            span = range(max(0, first - around), min(max(len(sums), len(out)), first + around))
            lines.append(f"{key!r} first wrong at #{first}: " + ", ".join(
                (f"in {records[key][i][0]}={records[key][i][1]} want {sums[i]}"
                 if i < len(sums) else "in -")
                + (f" out {out[i][0]}={out[i][1]}" if i < len(out) else " out -")
                for i in span))
    dump = tempfile.NamedTemporaryFile("w", prefix="baton-oracle-", suffix=".json",
                                       delete=False)
    with dump:
        json.dump({"inputs": {k.decode(): v for k, v in records.items()},
                   "outputs": {k.decode(): v for k, v in got.items()}}, dump)
    lines.append(f"{wrong} keys wrong; every record of both topics in {dump.name}")
    return "\n".join(lines)


def oracle_check(broker: Broker, config: Any) -> Any:
    """Read input and output topics and run the running-sum oracle."""
    inputs = [m for topic in config.job.inputs for m in input_records(broker.read_all(topic))]
    outputs = broker.read_all(config.job.output)
    result = check_running_sums([(m.key(), m.value()) for m in inputs],
                                [(m.key(), m.value()) for m in outputs])
    return Checked(result, "" if result.ok else report(inputs, outputs))


def identified_check(broker: Broker, config: Any) -> Any:
    """Read input and output topics and run IdentifiedSum's oracle (one id per key)."""
    inputs = [(m.key(), m.value()) for topic in config.job.inputs
              for m in input_records(broker.read_all(topic))]
    outputs = [(m.key(), m.value()) for m in broker.read_all(config.job.output)]
    return check_identified_sums(inputs, outputs)


def unseen(broker: Broker, topic: str, delivered: list[tuple[int, int]]) -> str:
    """Which acknowledged records (partition, offset) the oracle's input lacks, and what
    the topic holds at each: nothing visible, or a record a forwarded copy stands for."""
    everything = broker.read_all(topic, committed_only=False)
    raw = {(m.partition(), m.offset()): m for m in everything}
    kept = {(m.partition(), m.offset()) for m in input_records(broker.read_all(topic))}
    copies: dict[str, list[str]] = defaultdict(list)     # origin -> its forwarded copies
    for c in everything:
        origin = dict(c.headers() or ()).get(FORWARDED_HEADER)
        if origin is not None:
            copies[origin.decode()].append(_where(c))
    lines = []
    for where in sorted(set(delivered) - kept):
        m = raw.get(where)
        held = ("nothing" if m is None else
                f"key {m.key()!r} value {m.value()!r} headers {m.headers()}")
        lines.append(f"{where[0]}@{where[1]}: {held}; "
                     f"copies {copies.get(f'{topic}:{where[0]}@{where[1]}', [])}")
    doubled = len(delivered) - len(set(delivered))
    return (f"{len(lines)} acknowledged records not in the input "
            f"({doubled} positions acknowledged twice): " + "; ".join(lines[:20]))
