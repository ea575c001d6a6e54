"""What a RocksDB store has in force, read from its files: the tests check a setting
took effect without asking the store that was given it."""

from __future__ import annotations

from pathlib import Path

__all__ = ["memtable_bloom_ratio"]


def memtable_bloom_ratio(store_dir: Path) -> float:
    """The memtable Bloom filter ratio a RocksDB store has in force: its newest OPTIONS
    file (RocksDB writes one at open and at every SetOptions)."""
    newest = max(store_dir.glob("OPTIONS-*"), key=lambda f: int(f.name.split("-")[1]))
    return float(next(line.split("=")[1] for line in newest.read_text().splitlines()
                      if line.strip().startswith("memtable_prefix_bloom_size_ratio=")))
