"""Write throughput of the task store's overlay against raw rocksdict WriteBatches.

Every writer writes the same records (same encoded keys and values, same batch sizes,
the same applied-offset key per batch) into its own fresh database with the store's
own options, so the ratio is the price of the overlay: the per-record Python work of
the state mapping and building the batch at commit.

    .venv/bin/python bench/store_write.py [--records N] [--batch B] [--rounds R] [--json]

Writers take turns batch by batch (in rotating order), so noise from other processes
on a shared machine hits them alike; each figure is the best of `rounds` runs. Rates are
given twice: per wall-clock second, and per CPU second of the writing thread
(`time.thread_time`, which a busy machine disturbs much less; RocksDB's background
flushes and compactions are not in it, and are the same work for every writer).

* raw: a rocksdict WriteBatch per batch, each record encoded in the loop, as any
  writer must;
* overlay: `store.state[key] = value` per record, `store.commit(offsets)` per batch;
* overlay_undo: the same with `begin_record()` per record, as the processor does under
  the skip/dlq error policies (the undo log then costs one append per write);
* raw_preencoded: raw with bytes prepared beforehand (RocksDB and the batch alone),
  for reference.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Protocol

import orjson
import rocksdict

from store import TaskStore, encode_key, encode_value
from store.codec import OFFSET_PREFIX
from store.options import db_options, write_options

__all__ = ["main", "measure"]

_PARTITION = "bench:0"
_OFFSET_KEY = OFFSET_PREFIX + _PARTITION.encode()
_DISTINCT_KEYS = 200_000

Records = tuple[list[bytes], list[int | str]]


def make_records(n: int) -> Records:
    """Keys cycle over 200,000 distinct ones; values alternate small ints and strs."""
    keys = [b"key-%d" % (i % _DISTINCT_KEYS) for i in range(n)]
    values: list[int | str] = [i if i % 2 else f"v{i}" for i in range(n)]
    return keys, values


class Writer(Protocol):
    def write(self, lo: int, hi: int) -> None: ...
    def close(self) -> None: ...


class Overlay:
    """Records through TaskStore's state mapping, one commit per batch."""

    def __init__(self, path: Path, records: Records, undo: bool = False) -> None:
        self.store = TaskStore(path)
        self.keys, self.values = records
        self.undo = undo

    def write(self, lo: int, hi: int) -> None:
        store, keys, values = self.store, self.keys, self.values
        state = store.state
        if self.undo:
            begin = store.begin_record
            for i in range(lo, hi):
                begin()
                state[keys[i]] = values[i]
        else:
            for i in range(lo, hi):
                state[keys[i]] = values[i]
        store.commit({_PARTITION: hi})

    def close(self) -> None:
        self.store.close()


class Raw:
    """The same records with raw rocksdict WriteBatches, encoded in the loop."""

    def __init__(self, path: Path, records: Records) -> None:
        self.db = rocksdict.Rdict(str(path), db_options(create=True))
        self.wopts = write_options(sync=False)
        self.keys, self.values = records

    def write(self, lo: int, hi: int) -> None:
        keys, values, dumps = self.keys, self.values, orjson.dumps
        batch = rocksdict.WriteBatch(raw_mode=True)
        put = batch.put
        for i in range(lo, hi):
            put(b"\x01" + keys[i], dumps(values[i]))
        put(_OFFSET_KEY, str(hi).encode())
        self.db.write(batch, self.wopts)

    def close(self) -> None:
        self.db.close()


class RawPreencoded(Raw):
    """Raw, with keys and values encoded before the clock starts."""

    def __init__(self, path: Path, records: Records) -> None:
        super().__init__(path, records)
        self.raw_keys = [encode_key(k) for k in self.keys]
        self.raw_values = [encode_value(v) for v in self.values]

    def write(self, lo: int, hi: int) -> None:
        raw_keys, raw_values = self.raw_keys, self.raw_values
        batch = rocksdict.WriteBatch(raw_mode=True)
        put = batch.put
        for i in range(lo, hi):
            put(raw_keys[i], raw_values[i])
        put(_OFFSET_KEY, str(hi).encode())
        self.db.write(batch, self.wopts)


def _writers(tmp: Path, records: Records) -> dict[str, Writer]:
    return {
        "raw": Raw(tmp / "raw", records),
        "overlay": Overlay(tmp / "overlay", records),
        "overlay_undo": Overlay(tmp / "overlay_undo", records, undo=True),
        "raw_preencoded": RawPreencoded(tmp / "raw_preencoded", records),
    }


def run_once(records: Records, batch: int) -> dict[str, tuple[float, float]]:
    """(wall, thread CPU) seconds each writer spent, batches interleaved across writers."""
    with tempfile.TemporaryDirectory(prefix="baton-bench-") as tmp:
        writers = _writers(Path(tmp), records)
        wall = dict.fromkeys(writers, 0.0)
        cpu = dict.fromkeys(writers, 0.0)
        names = list(writers)
        try:
            for turn, lo in enumerate(range(0, len(records[0]), batch)):
                hi = min(lo + batch, len(records[0]))
                shift = turn % len(names)
                for name in names[shift:] + names[:shift]:
                    start, start_cpu = time.perf_counter(), time.thread_time()
                    writers[name].write(lo, hi)
                    wall[name] += time.perf_counter() - start
                    cpu[name] += time.thread_time() - start_cpu
        finally:
            for writer in writers.values():
                writer.close()
    return {name: (wall[name], cpu[name]) for name in names}


def measure(records: int, batch: int, rounds: int) -> dict[str, float | int]:
    """Best rates (records/s, wall and CPU) of each writer over `rounds` runs; ratios."""
    data = make_records(records)
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, (wall, cpu) in run_once(data, batch).items():
            best[name] = min(best.get(name, float("inf")), wall)
            best[f"{name}_cpu"] = min(best.get(f"{name}_cpu", float("inf")), cpu)
    r = {f"{name}_rate": records / seconds for name, seconds in best.items()}
    return {"records": records, "batch": batch, "rounds": rounds, **r,
            "ratio": r["overlay_rate"] / r["raw_rate"],
            "ratio_undo": r["overlay_undo_rate"] / r["raw_rate"],
            "ratio_preencoded": r["overlay_rate"] / r["raw_preencoded_rate"],
            "cpu_ratio": r["overlay_cpu_rate"] / r["raw_cpu_rate"],
            "cpu_ratio_undo": r["overlay_undo_cpu_rate"] / r["raw_cpu_rate"],
            "cpu_ratio_preencoded": r["overlay_cpu_rate"] / r["raw_preencoded_cpu_rate"]}


def _print_human(result: dict[str, float | int]) -> None:
    print(f"{result['records']:,} records, {result['batch']:,} per commit, "
          f"best of {result['rounds']} runs")
    print(f"  {'writer':<16} {'records/s':>12} {'records/CPU-s':>14}")
    for name in ("raw", "overlay", "overlay_undo", "raw_preencoded"):
        print(f"  {name:<16} {result[f'{name}_rate']:>12,.0f} "
              f"{result[f'{name}_cpu_rate']:>14,.0f}")
    for label, key in (("overlay/raw", "ratio"), ("overlay_undo/raw", "ratio_undo"),
                       ("overlay/raw_preencoded", "ratio_preencoded")):
        print(f"  {label:<24} {result[key]:>6.2f} {result[f'cpu_{key}']:>14.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Task store overlay vs raw write rates.")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = measure(args.records, args.batch, args.rounds)
    if args.json:
        print(json.dumps(result))
    else:
        _print_human(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
