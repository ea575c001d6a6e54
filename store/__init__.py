"""Baton's task store: RocksDB (rocksdict) per task, with a transaction overlay,
applied offsets committed atomically with the data, and SST bulk ingest; the state a
job sees (`State`: a mapping with entries that expire in stream time, and prefix scans)."""

from __future__ import annotations

from store.base import Change, Changes, Offsets, Store
from store.codec import (
    Key,
    changelog_offset,
    changelog_offset_record,
    check_changelog_key,
    decode_changelog,
    decode_key,
    decode_value,
    encode_changelog,
    encode_key,
    encode_value,
)
from store.errors import StoreCorruptError, StoreError, StoreLockedError
from store.paths import task_store_path
from store.rocksdb import TaskStore
from store.sst import write_encoded_sst, write_sst
from store.state import State

__all__ = [
    "Change",
    "Changes",
    "Key",
    "Offsets",
    "State",
    "Store",
    "StoreCorruptError",
    "StoreError",
    "StoreLockedError",
    "TaskStore",
    "changelog_offset",
    "changelog_offset_record",
    "check_changelog_key",
    "decode_changelog",
    "decode_key",
    "decode_value",
    "encode_changelog",
    "encode_key",
    "encode_value",
    "task_store_path",
    "write_encoded_sst",
    "write_sst",
]
