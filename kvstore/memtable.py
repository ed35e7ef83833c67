"""The sorted in-memory table that receives every write.

Layout: a dict ``key -> [(seq, value), ...]`` (versions in commit order, so
the newest is last) plus a :class:`SortedList` of the distinct keys. Point
reads are one dict lookup; scans walk the sorted keys.

Writers apply under the database's commit lock, so versions of a key are
appended in increasing seq order. Readers take no lock for point reads; range
iterators re-seek in chunks under the memtable's own small lock, which keeps
them correct while writers insert new keys concurrently (a SortedList may not
be iterated while it is modified).

Memory accounting (:attr:`size`) charges each version its key and value
bytes plus a fixed Python overhead, so ``memtable_bytes`` bounds real memory.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from sortedcontainers import SortedList

from kvstore.format.sst import Entry

ENTRY_OVERHEAD = 160
VERSION_OVERHEAD = 90
_CHUNK = 256


class Memtable:
    def __init__(self, wal_start: int) -> None:
        self._versions: dict[bytes, list[tuple[int, bytes | None]]] = {}
        self._keys = SortedList()
        self._lock = threading.Lock()
        self.wal_start = wal_start  # first WAL segment/object id holding its writes
        self.size = 0
        self.min_seq = 0
        self.max_seq = 0
        self.entries = 0

    def __len__(self) -> int:
        return len(self._versions)

    def apply(self, seq: int, keys: list[bytes], values: list[bytes | None]) -> None:
        """Add one write (keys unique within it). Caller holds the commit lock."""
        versions = self._versions
        new_keys = []
        added = 0
        for key, value in zip(keys, values):
            vlen = 0 if value is None else len(value)
            existing = versions.get(key)
            if existing is None:
                versions[key] = [(seq, value)]
                new_keys.append(key)
                added += len(key) + vlen + ENTRY_OVERHEAD
            else:
                existing.append((seq, value))
                added += vlen + VERSION_OVERHEAD
        if new_keys:
            with self._lock:
                if len(new_keys) == 1:
                    self._keys.add(new_keys[0])
                else:
                    self._keys.update(new_keys)
        self.size += added
        self.entries += len(keys)
        if not self.min_seq:
            self.min_seq = seq
        self.max_seq = seq

    def get(self, key: bytes, read_seq: int) -> Entry | None:
        versions = self._versions.get(key)
        if versions is None:
            return None
        for seq, value in reversed(versions):
            if seq <= read_seq:
                return (key, seq, value)
        return None

    def iter_forward(self, start: bytes | None, end: bytes | None) -> Iterator[Entry]:
        keys = self._keys
        versions = self._versions
        cur = start
        inclusive = True
        while True:
            with self._lock:
                if cur is None:
                    i = 0
                else:
                    i = keys.bisect_left(cur) if inclusive else keys.bisect_right(cur)
                chunk = list(keys.islice(i, i + _CHUNK))
            if not chunk:
                return
            for key in chunk:
                if end is not None and key >= end:
                    return
                for seq, value in reversed(versions[key]):
                    yield (key, seq, value)
            cur = chunk[-1]
            inclusive = False

    def iter_reverse(self, start: bytes | None, end: bytes | None) -> Iterator[Entry]:
        keys = self._keys
        versions = self._versions
        cur = end
        while True:
            with self._lock:
                j = len(keys) if cur is None else keys.bisect_left(cur)
                chunk = list(keys.islice(max(0, j - _CHUNK), j))
            if not chunk:
                return
            for key in reversed(chunk):
                if start is not None and key < start:
                    return
                for seq, value in reversed(versions[key]):
                    yield (key, seq, value)
            cur = chunk[0]

    def iter_all(self) -> Iterator[Entry]:
        """Every version in internal order (key asc, seq desc); for flushing."""
        return self.iter_forward(None, None)

    def _check(self) -> None:
        """Assert the invariants (tests call this after random operations)."""
        assert list(self._keys) == sorted(self._versions), "key index out of sync"
        for key, versions in self._versions.items():
            seqs = [s for s, _ in versions]
            assert seqs == sorted(set(seqs)), f"versions of {key!r} out of order"
