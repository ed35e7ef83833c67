"""Options of :func:`kvstore.open`, with their defaults.

Unknown option names raise :class:`TypeError`; bad values raise
:class:`ValueError` naming the option.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any

MiB = 1 << 20


@dataclass(frozen=True)
class Options:
    #: bytes a memtable may use before it is frozen and flushed to an L0 SST
    memtable_bytes: int = 64 * MiB
    #: frozen memtables waiting for flush before writers stall (backpressure)
    max_immutable_memtables: int = 2
    #: target uncompressed size of an SST data block
    block_bytes: int = 4096
    #: bloom filter bits per distinct key (0 disables the filter)
    bloom_bits_per_key: int = 10
    #: "zstd" or "none"
    compression: str = "zstd"
    #: zstd level for SST blocks
    compression_level: int = 1
    #: bytes of decoded blocks kept in memory
    block_cache_bytes: int = 64 * MiB
    #: "auto" (journal on local disk, objects elsewhere), "journal" or "object"
    wal: str = "auto"
    #: put the WAL journal in this local directory while SSTs live at the URL
    wal_dir: str | os.PathLike[str] | None = None
    #: open even though the WAL the last writer used is gone or elsewhere, or
    #: records are missing from it, or its newest journal segment is damaged (it
    #: is cut there): the acknowledged writes no SST has are lost (see
    #: docs/s3.md); without it such an open raises instead
    accept_wal_loss: bool = False
    #: on a local directory, open even while another live process or handle writes
    #: the store, fencing it (without it that open raises WriterActive); object
    #: stores cannot see a live writer, so opening there always fences
    takeover: bool = False
    #: non-durable writes buffered before the WAL writes them out
    wal_buffer_bytes: int = 1 * MiB
    #: run memtable flushes on a background thread
    background_flush: bool = True
    #: run compaction on a background thread (db.compact() works either way)
    background_compaction: bool = True
    #: L0 SSTs that trigger a merge into a sorted run
    l0_compaction_trigger: int = 4
    #: split compaction outputs into SSTs of about this many bytes
    sst_target_bytes: int = 16 * MiB
    #: L0 SSTs at which each write sleeps 1 ms so compaction can catch up
    l0_slowdown_ssts: int = 8
    #: L0 SSTs at which flushes wait for compaction (writers then stall)
    l0_max_ssts: int = 12
    #: seconds an SST replaced by compaction is kept for readers before deletion
    gc_grace_seconds: float = 60.0
    #: versions to keep beyond open snapshots: None (only what snapshots read; the
    #: persisted watermark, if any, stays), "all" (every version from now on), or a
    #: number of seconds (every version written that recently)
    retention: str | float | None = None
    #: fsync files and directories (turn off only for throwaway test data)
    fsync: bool = True
    #: seconds between fencing checks for non-durable writes on remote stores
    fence_check_interval: float = 0.5
    #: seconds a transaction may run; older ones fail at commit with TransactionExpired
    transaction_ttl: float = 60.0
    #: options passed to the fsspec filesystem (endpoint_url, key, secret, ...)
    storage_options: dict[str, Any] = field(default_factory=dict)
    #: seed for ids (SST names); None uses the system's randomness
    seed: int | None = None

    def __post_init__(self) -> None:
        def require(name: str, kinds: tuple[type, ...], label: str) -> None:
            v = getattr(self, name)
            if (isinstance(v, bool) and bool not in kinds) or not isinstance(v, kinds):
                raise TypeError(f"option {name} must be {label}, not {type(v).__name__}")

        for name in (
            "memtable_bytes",
            "max_immutable_memtables",
            "block_bytes",
            "block_cache_bytes",
            "wal_buffer_bytes",
            "bloom_bits_per_key",
            "compression_level",
            "l0_compaction_trigger",
            "sst_target_bytes",
            "l0_slowdown_ssts",
            "l0_max_ssts",
        ):
            require(name, (int,), "an int")
        for name in (
            "background_flush",
            "background_compaction",
            "fsync",
            "accept_wal_loss",
            "takeover",
        ):
            require(name, (bool,), "a bool")
        for name in ("compression", "wal"):
            require(name, (str,), "a str")
        require("fence_check_interval", (int, float), "a number")
        require("transaction_ttl", (int, float), "a number")
        require("gc_grace_seconds", (int, float), "a number")
        require("storage_options", (dict,), "a dict")
        if self.wal_dir is not None:
            require("wal_dir", (str, os.PathLike), "a path or None")
        if self.seed is not None:
            require("seed", (int,), "an int or None")
        for name in (
            "memtable_bytes",
            "max_immutable_memtables",
            "block_bytes",
            "block_cache_bytes",
            "wal_buffer_bytes",
            "sst_target_bytes",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"option {name} must be positive, got {getattr(self, name)}")
        if self.retention is not None:
            require("retention", (str, int, float), "None, 'all' or a number of seconds")
            if isinstance(self.retention, str) and self.retention != "all":
                raise ValueError(
                    f"option retention must be None, 'all' or seconds, not {self.retention!r}"
                )
            if not isinstance(self.retention, str) and self.retention <= 0:
                raise ValueError("option retention (seconds) must be positive")
        if not self.l0_compaction_trigger <= self.l0_slowdown_ssts <= self.l0_max_ssts:
            raise ValueError(
                "options must satisfy l0_compaction_trigger <= l0_slowdown_ssts <= l0_max_ssts"
            )
        if self.l0_compaction_trigger < 2:
            raise ValueError("option l0_compaction_trigger must be >= 2")
        if self.gc_grace_seconds < 0:
            raise ValueError("option gc_grace_seconds must be >= 0")
        if self.block_bytes > 16 * MiB:
            raise ValueError("option block_bytes must be at most 16 MiB")
        if self.bloom_bits_per_key < 0:
            raise ValueError("option bloom_bits_per_key must be >= 0")
        if self.compression not in ("zstd", "none"):
            raise ValueError(
                f"option compression must be 'zstd' or 'none', not {self.compression!r}"
            )
        if self.wal not in ("auto", "journal", "object"):
            raise ValueError(f"option wal must be 'auto', 'journal' or 'object', not {self.wal!r}")
        if self.transaction_ttl <= 0:
            raise ValueError("option transaction_ttl must be positive")
        if self.fence_check_interval < 0:
            raise ValueError("option fence_check_interval must be >= 0")

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> Options:
        reject_unknown(cls, kwargs)
        return cls(**kwargs)


def reject_unknown(options_class: type, kwargs: dict[str, Any]) -> None:
    """TypeError naming every keyword that is not a field of ``options_class``."""
    known = {f.name for f in fields(options_class)}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(
            f"unknown option{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)} "
            f"(known: {', '.join(sorted(known))})"
        )
