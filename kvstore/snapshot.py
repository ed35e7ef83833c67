"""Snapshots: consistent read views pinned at a sequence number.

A snapshot registers its seq in the database's :class:`SeqRegistry`; flushes
and compactions keep every version a registered seq can read (see
:func:`kvstore.iterators.retain`). Running transactions register the same
way. A snapshot that is never closed is released when garbage-collected.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING

from kvstore import _validate
from kvstore import readpath as rp
from kvstore.errors import ClosedError

if TYPE_CHECKING:
    from kvstore.db import DB


class SeqRegistry:
    """Sequence numbers pinned by open snapshots (a multiset: seq -> count > 0)."""

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self.lock = threading.Lock()

    def add(self, seq: int) -> None:
        """Pin ``seq``; caller holds :attr:`lock`."""
        counts = self._counts
        counts[seq] = counts.get(seq, 0) + 1

    def remove(self, seq: int) -> None:
        counts = self._counts
        lock = self.lock
        lock.acquire()  # not `with`: this runs once per transaction (see DB._commit)
        try:
            n = counts.get(seq, 0) - 1
            if n > 0:
                counts[seq] = n
            else:
                counts.pop(seq, None)
        finally:
            lock.release()

    def seqs(self) -> list[int]:
        return sorted(self._counts)

    def __len__(self) -> int:
        return sum(self._counts.values())


class Snapshot:
    """A consistent, read-only view of the database at :attr:`seq`."""

    def __init__(self, db: DB, seq: int) -> None:
        self._db = db
        self.seq = seq
        self._closed = False
        self._finalizer = weakref.finalize(self, db._snapshots.remove, seq)

    def _check(self) -> None:
        if self._closed:
            raise ClosedError("the snapshot is closed")
        self._db._check_readable(self.seq)  # closed? fenced past what is durable?

    def get(self, key: bytes) -> bytes | None:
        self._check()
        return rp.get(self._db._state, _validate.key(key), self.seq)

    def scan(
        self, start: bytes | None = None, end: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        self._check()
        s = _validate.bound(start, "start")
        e = _validate.bound(end, "end")
        return rp.scan(self._db._state, s, e, _validate.flag(reverse, "reverse"), self.seq)

    def scan_prefix(self, prefix: bytes, *, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        p = _validate.bound(prefix, "prefix")
        if p is None:
            raise TypeError("prefix must be bytes, not None")
        return self.scan(p or None, _validate.prefix_end(p) if p else None, reverse=reverse)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._finalizer()

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<kvstore.Snapshot seq={self.seq}{' closed' if self._closed else ''}>"
