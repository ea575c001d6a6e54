"""The `[store]` section of the TOML configuration (re-exported by orchestrator.wire.config):
the memory and open-file budget of a processor's task stores.

A processor's store memory is about `block_cache_mb + min(memtables_mb, stores ×
write_buffer_mb × max_write_buffers) + stores × fixed per-store overhead`; its open
files about `stores × (max_open_files + a few)`. docs/operations.md, "Capacity
planning", gives the measured figures and the rule that sizes the systemd units'
LimitNOFILE from them.
"""

from __future__ import annotations

from pydantic import Field

from orchestrator.wire.job_config import Section

__all__ = ["StoreConfig"]


class StoreConfig(Section):
    block_cache_mb: int = Field(default=64, ge=1)
    """One block cache (MiB) shared by every store of a processor: hot data, index and
    filter blocks. It bounds the cache however many stores the processor holds."""
    write_buffer_mb: int = Field(default=16, ge=1)
    """The size (MiB) of one store's memtable: the writes it absorbs before a flush."""
    max_write_buffers: int = Field(default=2, ge=2)
    """Memtables a store keeps: one filling while the previous one flushes. A store's
    memtables take up to write_buffer_mb × max_write_buffers (allocated as they fill)."""
    memtables_mb: int = Field(default=256, ge=1)
    """Every store's memtables together (MiB): when they pass it, RocksDB flushes the
    largest, full or not. A store's own memtable flushes only when full, so a
    processor with many stores that each see few writes would otherwise grow toward
    stores × write_buffer_mb × max_write_buffers."""
    max_open_files: int = Field(default=64, ge=16)
    """Table files each store keeps open (its table cache); LimitNOFILE is sized from it
    (docs/operations.md, "Capacity planning")."""
    write_ahead_log: bool = True
    """false: commits skip RocksDB's write-ahead log (fewer writes to disk). A processor
    killed then loses its stores' commits since their last flush: the stores are
    behind Kafka's committed offsets, never ahead, and catch-up replays the gap."""
    verify_on_open: bool = True
    """Read a store whole, with checksums verified, the first time a processor opens it:
    a store damaged on disk is moved aside and rebuilt by catch-up, never served."""
