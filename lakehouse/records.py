"""The cache of version records.

A version record never changes once committed (expiration deletes it, it
never rewrites it), so a process can keep every record it has decoded. The
commit protocol reads the records of the versions it rebases over, time
travel binary-searches them by creation time and ``history()`` lists them:
all of it through this cache, bounded by :data:`MAX` entries (cleared whole
when full; a record is one point read away).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from lakehouse import codec, keys
from lakehouse.errors import CorruptionError
from lakehouse.model import VersionInfo

#: records kept before the cache is cleared
MAX = 200_000


class RecordCache:
    """Decoded :class:`VersionInfo` by version number; safe to share between threads."""

    def __init__(self, limit: int = MAX) -> None:
        self._limit = limit
        self._records: dict[int, VersionInfo] = {}
        self._lock = threading.Lock()

    def get(self, version: int, read: Callable[[bytes], bytes | None]) -> VersionInfo:
        """Record ``version``, decoded once and then served from memory."""
        rec = self._records.get(version)
        if rec is None:
            raw = read(keys.record_key(version))
            if raw is None:
                raise CorruptionError(f"version record {version} is missing")
            rec = codec.decode_record(raw)
            self.remember(rec)
        return rec

    def peek(self, version: int) -> VersionInfo | None:
        return self._records.get(version)

    def remember(self, rec: VersionInfo) -> None:
        with self._lock:
            if len(self._records) >= self._limit:
                self._records.clear()
            self._records[rec.version] = rec

    def forget_before(self, version: int) -> None:
        """Drop the records of versions older than ``version`` (expired)."""
        with self._lock:
            for v in [v for v in self._records if v < version]:
                del self._records[v]

    def __len__(self) -> int:
        return len(self._records)
