"""RocksDB tuning for a per-task store.

A processor holds one store per task, dozens at a time, on a shared host: each store
gets a small memory budget rather than RocksDB's server-sized defaults. The numbers are
module constants so a reviewer can see (and a benchmark can change) them in one place.

Durability: every commit is one WriteBatch through the WAL, written to the OS (no
fsync) before `commit` returns. A SIGKILL of the processor does not lose the OS page
cache, so such a commit survives it; a host crash can lose the last commits, which is
allowed (the store may lag Kafka's committed offsets, never lead them: recovery replays
T2 -> T1). Point-in-time WAL recovery stops at the first torn record, so recovery
always lands on a batch boundary.
"""

from __future__ import annotations

import rocksdict

__all__ = ["READ_OPTIONS", "db_options", "sst_options", "write_options"]

# Memtable size: large enough to absorb many commits between flushes, small enough
# that dozens of tasks per processor fit in memory (2 buffers each).
WRITE_BUFFER_BYTES = 16 << 20
MAX_WRITE_BUFFERS = 2
# Block cache per store: point lookups of hot keys; the OS page cache does the rest.
BLOCK_CACHE_BYTES = 16 << 20
# Bloom filter bits per key: most reads of new keys miss; 10 bits ~ 1% false positives.
BLOOM_BITS_PER_KEY = 10
# Bloom filter over the memtable, as a fraction of its size: most reads of a replay or
# of new keys miss, and a miss otherwise searches the memtable's skiplist and every L0
# file (2.2 us -> 0.5 us a miss, measured at 250,000 keys).
MEMTABLE_BLOOM_RATIO = 0.1
# Background flush + compaction jobs per store: the host has few cores and many stores.
MAX_BACKGROUND_JOBS = 2
# Open table files per store: bounded, as a processor opens many stores.
MAX_OPEN_FILES = 256
# RocksDB's own info LOG: keep it small and rotated.
MAX_INFO_LOG_BYTES = 1 << 20
KEEP_INFO_LOG_FILES = 3
# WAL size that forces a flush of the memtable, bounding recovery time after a crash.
MAX_TOTAL_WAL_BYTES = 64 << 20


def _table_options(cache: bool) -> rocksdict.BlockBasedOptions:
    table = rocksdict.BlockBasedOptions()
    table.set_bloom_filter(BLOOM_BITS_PER_KEY, False)
    if cache:
        table.set_block_cache(rocksdict.Cache(BLOCK_CACHE_BYTES))
        table.set_cache_index_and_filter_blocks(True)
    return table


# What `reads=True` turns on, in RocksDB's own names, for a store opened without it.
READ_OPTIONS = {"memtable_prefix_bloom_size_ratio": str(MEMTABLE_BLOOM_RATIO),
                "memtable_whole_key_filtering": "true"}


def db_options(create: bool, reads: bool = True) -> rocksdict.Options:
    """Options of a task store; `create` allows creating a new, empty one. Without
    `reads` the memtable has no Bloom filter: a store that is only written (a changelog
    replica) inserts ~10% cheaper without one (measured on the changelog apply)."""
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(create)
    opts.set_paranoid_checks(True)
    opts.set_wal_recovery_mode(rocksdict.DBRecoveryMode.point_in_time())
    opts.set_write_buffer_size(WRITE_BUFFER_BYTES)
    opts.set_max_write_buffer_number(MAX_WRITE_BUFFERS)
    if reads:
        opts.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO)
        opts.set_memtable_whole_key_filtering(True)
    opts.set_max_total_wal_size(MAX_TOTAL_WAL_BYTES)
    opts.set_max_background_jobs(MAX_BACKGROUND_JOBS)
    opts.set_max_open_files(MAX_OPEN_FILES)
    opts.set_max_log_file_size(MAX_INFO_LOG_BYTES)
    opts.set_keep_log_file_num(KEEP_INFO_LOG_FILES)
    opts.set_level_compaction_dynamic_level_bytes(True)
    # lz4 costs little CPU; zstd on the bottom level, where most bytes end up.
    opts.set_compression_type(rocksdict.DBCompressionType.lz4())
    opts.set_bottommost_compression_type(rocksdict.DBCompressionType.zstd())
    opts.set_block_based_table_factory(_table_options(cache=True))
    return opts


def sst_options() -> rocksdict.Options:
    """Options of an SST file written for bulk ingest (same table format as the store)."""
    opts = rocksdict.Options(raw_mode=True)
    opts.set_compression_type(rocksdict.DBCompressionType.lz4())
    opts.set_block_based_table_factory(_table_options(cache=False))
    return opts


def write_options(sync: bool) -> rocksdict.WriteOptions:
    """WAL on; fsync only if asked (see the module docstring)."""
    opts = rocksdict.WriteOptions()
    opts.sync = sync
    return opts
