"""Internal entries: the engine-wide types every layer passes around.

An *internal entry* is one version of one key::

    Entry := (key: bytes, seq: int, value: bytes | None)     value None = a tombstone

Every source of entries (memtable, SST, sorted run, compaction) keeps them in
*internal order*: key ascending, then seq descending (newest version first),
so the first entry at or after ``(key, read_seq)`` is the version a read at
``read_seq`` sees. :class:`Columns` holds the same entries in the same order
as three parallel lists, for the bulk paths (flush, compaction, ``build_sst``)
that would otherwise make one tuple per entry.

Limits. A key is 1 to :data:`MAX_KEY_LEN` bytes (the SST and its index store
key lengths as u16; public calls check it, ``build_sst`` raises ``ValueError``
above it). There is no separate value constant: a value must be shorter than
``0xFFFFFFFF`` bytes (that length marks a tombstone in an SST data block) and
fit in one WAL frame (``kvstore/format/wal.py``).

This module depends on nothing else in :mod:`kvstore`, so any layer may
import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

#: the longest key, in bytes (SST key lengths are u16)
MAX_KEY_LEN = 0xFFFF

#: one version of one key: ``(key, seq, value)``; ``value is None`` is a tombstone
Entry = tuple[bytes, int, "bytes | None"]


class Columns(NamedTuple):
    """Internal entries in order as three parallel lists (no tuple per entry,
    so nothing for the cyclic GC to track while a large SST is built)."""

    keys: list[bytes]
    seqs: list[int]
    values: list[bytes | None]

    @classmethod
    def concat(cls, parts: Sequence[tuple[list[bytes], list[int], list[bytes | None]]]) -> Columns:
        """The parts' columns one after another (the only part itself when alone)."""
        if len(parts) == 1:
            return cls(*parts[0])
        return cls(
            [k for p in parts for k in p[0]],
            [s for p in parts for s in p[1]],
            [v for p in parts for v in p[2]],
        )
