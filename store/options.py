"""RocksDB tuning for a per-task store.

A processor holds one store per task, dozens at a time, on a shared host: each store
gets a small memory budget rather than RocksDB's server-sized defaults. The budget an
operator sizes (`StoreMemory`, from the `[store]` section) is set per processor; the
rest are module constants so a reviewer can see them in one place.

Durability: every commit is one WriteBatch through the WAL, written to the OS (no
fsync) before `commit` returns. A SIGKILL of the processor does not lose the OS page
cache, so such a commit survives it; a host crash can lose the last commits, which is
allowed (the store may lag Kafka's committed offsets, never lead them: recovery replays
T2 -> T1). Point-in-time WAL recovery stops at the first torn record, so recovery
always lands on a batch boundary. With the WAL off (`[store] write_ahead_log`), a kill
loses the memtable's commits: a flush writes a whole memtable, so the store falls back
to an earlier commit, never to a part of one, and never ahead of Kafka (which commits
first).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import rocksdict

__all__ = ["OPEN_OPTIONS", "READ_OPTIONS", "StoreMemory", "db_options", "sst_options",
           "write_options"]

# Bloom filter bits per key: most reads of new keys miss; 10 bits ~ 1% false positives.
BLOOM_BITS_PER_KEY = 10
# Bloom filter over the memtable, as a fraction of its size: most reads of a replay or
# of new keys miss, and a miss otherwise searches the memtable's skiplist and every L0
# file (docs/performance.md, "Measurements behind the code").
MEMTABLE_BLOOM_RATIO = 0.1
# Background flush + compaction jobs per store: the host has few cores and many stores.
MAX_BACKGROUND_JOBS = 2
# RocksDB's own info LOG: keep it small and rotated.
MAX_INFO_LOG_BYTES = 1 << 20
KEEP_INFO_LOG_FILES = 3
# WAL size that forces a flush of the memtable, bounding recovery time after a crash.
MAX_TOTAL_WAL_BYTES = 64 << 20


@dataclass(frozen=True)
class StoreMemory:
    """The memory and file budget of a processor's stores (the `[store]` section).

    One block cache and one write buffer manager are shared by every store opened with
    the same `StoreMemory`, so a processor's cache and memtables are bounded however
    many stores it holds; each store has its own memtables (allocated as they fill, and
    flushed when full or when all of them together pass `memtable_bytes`) and its own
    table cache of open files.
    """

    block_cache_bytes: int = 64 << 20
    write_buffer_bytes: int = 16 << 20     # one memtable; a flush starts when it is full
    max_write_buffers: int = 2             # memtables per store (one filling, one flushing)
    max_open_files: int = 64               # table files a store keeps open
    memtable_bytes: int = 256 << 20        # every store's memtables together
    cache: rocksdict.Cache = field(init=False, repr=False, compare=False)
    memtables: rocksdict.WriteBufferManager = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cache", rocksdict.Cache(self.block_cache_bytes))
        # no stall: a writer past the bound triggers a flush of the largest memtable and
        # goes on (a stall would hold the processor's loop, and its heartbeats)
        object.__setattr__(self, "memtables",
                           rocksdict.WriteBufferManager(self.memtable_bytes, False))

    def usage(self) -> dict[str, int]:
        """Bytes the stores hold now: "block_cache" (their shared cache) and "memtables"
        (all their memtables); safe from any thread (a metrics scrape reads it)."""
        return {"block_cache": self.cache.get_usage(), "memtables": self.memtables.get_usage()}


_DEFAULT_MEMORY = StoreMemory()


def _table_options(cache: rocksdict.Cache | None) -> rocksdict.BlockBasedOptions:
    table = rocksdict.BlockBasedOptions()
    table.set_bloom_filter(BLOOM_BITS_PER_KEY, False)
    if cache is not None:
        table.set_block_cache(cache)
        table.set_cache_index_and_filter_blocks(True)
    return table


# Set on every store as soon as it is open (rocksdict's Options has no setter for it).
# A table file that compaction replaces leaves its blocks in the shared block cache,
# and reads of the live state cache the new files' blocks beside them: with a small
# state updated all day the cache fills with dead blocks toward its capacity, and the
# processor's RSS rises with it (6 MiB after 400,000 updates of 4,000 keys:
# tests/processor/runtime/test_store_open.py). With this RocksDB erases a file's
# blocks when it drops the file; 300 is the effort RocksDB's own header suggests as its
# future default (it stops erasing a file's blocks once few of them are still cached).
OPEN_OPTIONS = {"uncache_aggressiveness": "300"}


# What `reads=True` turns on, in RocksDB's own names, for a store opened without it.
READ_OPTIONS = {"memtable_prefix_bloom_size_ratio": str(MEMTABLE_BLOOM_RATIO),
                "memtable_whole_key_filtering": "true"}


def db_options(create: bool, reads: bool = True,
               memory: StoreMemory | None = None) -> rocksdict.Options:
    """Options of a task store; `create` allows creating a new, empty one. Without
    `reads` the memtable has no Bloom filter: a store that is only written (a changelog
    replica) inserts cheaper without one, and never reads what it would filter.
    `memory`: the budget (default: the `[store]` defaults, one cache for all)."""
    memory = memory or _DEFAULT_MEMORY
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(create)
    opts.set_paranoid_checks(True)
    opts.set_wal_recovery_mode(rocksdict.DBRecoveryMode.point_in_time())
    opts.set_write_buffer_size(memory.write_buffer_bytes)
    opts.set_max_write_buffer_number(memory.max_write_buffers)
    opts.set_write_buffer_manager(memory.memtables)
    if reads:
        opts.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO)
        opts.set_memtable_whole_key_filtering(True)
    opts.set_max_total_wal_size(MAX_TOTAL_WAL_BYTES)
    opts.set_max_background_jobs(MAX_BACKGROUND_JOBS)
    opts.set_max_open_files(memory.max_open_files)
    opts.set_max_log_file_size(MAX_INFO_LOG_BYTES)
    opts.set_keep_log_file_num(KEEP_INFO_LOG_FILES)
    opts.set_level_compaction_dynamic_level_bytes(True)
    # lz4 costs little CPU; zstd on the bottom level, where most bytes end up.
    opts.set_compression_type(rocksdict.DBCompressionType.lz4())
    opts.set_bottommost_compression_type(rocksdict.DBCompressionType.zstd())
    opts.set_block_based_table_factory(_table_options(memory.cache))
    return opts


def sst_options() -> rocksdict.Options:
    """Options of an SST file written for bulk ingest (same table format as the store)."""
    opts = rocksdict.Options(raw_mode=True)
    opts.set_compression_type(rocksdict.DBCompressionType.lz4())
    opts.set_block_based_table_factory(_table_options(None))
    return opts


def write_options(sync: bool, wal: bool = True) -> rocksdict.WriteOptions:
    """WAL on unless told; fsync only if asked (see the module docstring)."""
    opts = rocksdict.WriteOptions()
    opts.sync = sync and wal
    opts.disable_wal = not wal
    return opts
