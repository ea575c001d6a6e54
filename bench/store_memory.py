"""The memory and open files a processor's task stores take: per store, and per million
keys, under a `[store]` budget.

    .venv/bin/python bench/store_memory.py [--stores 1,8,32] [--keys 0,100000,1000000]
        [--block-cache-mb 64] [--write-buffer-mb 16] [--max-write-buffers 2]
        [--memtables-mb 256] [--max-open-files 64] [--json]

Each (stores, keys) point runs in a fresh child process, so one point's allocations do
not stay in the next one's RSS: the child opens `stores` TaskStores with the budget
(one block cache shared by all, as a processor does), writes `keys` keys spread over
them through the store API (`apply_records`, 10,000 a batch, values of 100 bytes),
then reads 100,000 random keys back (filling the block cache), and reports its
VmRSS (/proc/self/status) and open fds (/proc/self/fd) after each step. The base is
the child after its imports, before any store.

Figures: `open_mb` = RSS of the open, empty stores over the base; `written_mb` after
the writes; `read_mb` after the reads. From them: MB per empty store, and MB per
million keys (the 1-store points at 0 and at the most keys).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_BATCH = 10_000
_VALUE_BYTES = 100
_READS = 100_000


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One point, in this process: open, write, read; RSS and fds after each step."""
    from store import TaskStore, encode_key, encode_value
    from store.options import StoreMemory

    memory = StoreMemory(block_cache_bytes=args.block_cache_mb << 20,
                         write_buffer_bytes=args.write_buffer_mb << 20,
                         max_write_buffers=args.max_write_buffers,
                         max_open_files=args.max_open_files,
                         memtable_bytes=args.memtables_mb << 20)
    base, base_fds = _rss_mb(), _fds()
    with tempfile.TemporaryDirectory(prefix="baton-store-memory-") as tmp:
        stores = [TaskStore(Path(tmp) / f"t{i}", memory=memory) for i in range(args.stores)]
        opened, opened_fds = _rss_mb(), _fds()
        value = encode_value("v" * _VALUE_BYTES)
        for start in range(0, args.keys, _BATCH):
            keys = [encode_key(b"key-%09d" % k) for k in range(start, min(start + _BATCH,
                                                                          args.keys))]
            store = stores[(start // _BATCH) % len(stores)]
            store.apply_records(keys, [value] * len(keys), {"in:0": start + len(keys)})
        written, written_fds = _rss_mb(), _fds()
        rng = random.Random(7)
        for _ in range(_READS if args.keys else 0):
            k = rng.randrange(args.keys)
            assert stores[(k // _BATCH) % len(stores)].state[b"key-%09d" % k] is not None
        read = _rss_mb()
        for store in stores:
            store.close()
    return {"stores": args.stores, "keys": args.keys, "base_mb": round(base, 1),
            "open_mb": round(opened - base, 1), "written_mb": round(written - base, 1),
            "read_mb": round(read - base, 1), "fds_open": opened_fds - base_fds,
            "fds_written": written_fds - base_fds}


def _point(args: argparse.Namespace, stores: int, keys: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", "--stores", str(stores), "--keys", str(keys),
           "--block-cache-mb", str(args.block_cache_mb),
           "--write-buffer-mb", str(args.write_buffer_mb),
           "--max-write-buffers", str(args.max_write_buffers),
           "--memtables-mb", str(args.memtables_mb),
           "--max-open-files", str(args.max_open_files)]
    run = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
    if run.returncode:
        raise SystemExit(f"point stores={stores} keys={keys} failed:\n{run.stderr}")
    return dict(json.loads(run.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="1,8,32")
    parser.add_argument("--keys", default="0,100000,1000000")
    parser.add_argument("--block-cache-mb", type=int, default=64)
    parser.add_argument("--write-buffer-mb", type=int, default=16)
    parser.add_argument("--max-write-buffers", type=int, default=2)
    parser.add_argument("--memtables-mb", type=int, default=256)
    parser.add_argument("--max-open-files", type=int, default=64)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.stores, args.keys = int(args.stores), int(args.keys)
        print(json.dumps(child(args)))
        return
    points = [_point(args, s, k) for s in map(int, args.stores.split(","))
              for k in map(int, args.keys.split(","))]
    empty = {p["stores"]: p["open_mb"] for p in points if p["keys"] == 0}
    ones = sorted((p for p in points if p["stores"] == 1), key=lambda p: p["keys"])
    most = ones[-1] if ones else None
    per_store = (max(empty.items())[1] / max(empty)) if empty else None
    per_million = ((most["read_mb"] - ones[0]["read_mb"]) / (most["keys"] / 1e6)
                   if most and most["keys"] and ones[0]["keys"] == 0 else None)
    summary = {"budget": {"block_cache_mb": args.block_cache_mb,
                          "write_buffer_mb": args.write_buffer_mb,
                          "max_write_buffers": args.max_write_buffers,
                          "memtables_mb": args.memtables_mb,
                          "max_open_files": args.max_open_files},
               "points": points,
               "mb_per_empty_store": per_store and round(per_store, 2),
               "mb_per_million_keys": per_million and round(per_million, 1)}
    if args.json:
        print(json.dumps(summary))
        return
    print(f"budget: {summary['budget']}")
    print(f"{'stores':>7} {'keys':>9} {'open MB':>8} {'written MB':>11} {'read MB':>8} "
          f"{'fds open':>9} {'fds written':>12}")
    for p in points:
        print(f"{p['stores']:>7} {p['keys']:>9} {p['open_mb']:>8} {p['written_mb']:>11} "
              f"{p['read_mb']:>8} {p['fds_open']:>9} {p['fds_written']:>12}")
    print(f"per empty store: {summary['mb_per_empty_store']} MB; "
          f"per million keys (1 store, after reads): {summary['mb_per_million_keys']} MB")


if __name__ == "__main__":
    main()
