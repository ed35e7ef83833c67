"""The one read surface: ``get`` / ``scan`` / ``scan_prefix`` with their checks.

:class:`kvstore.DB`, :class:`~kvstore.snapshot.Snapshot`,
:class:`~kvstore.txn.Transaction`, :class:`~kvstore.reader.Reader` and its
snapshots all read through :class:`ReadSurface`: a subclass says which
state and seq it reads (:meth:`ReadSurface._view`, which also raises when
the read is refused) and may add to a scan (:meth:`ReadSurface._scan`:
a transaction merges its own writes and records the range).
"""

from __future__ import annotations

from collections.abc import Iterator

from kvstore import _validate
from kvstore import readpath as rp


class ReadSurface:
    __slots__ = ()

    def _view(self) -> tuple[rp.State, int]:
        """The state and seq to read, after the checks that may refuse the read."""
        raise NotImplementedError

    def _scan(
        self, state: rp.State, start: bytes | None, end: bytes | None, reverse: bool, seq: int
    ) -> Iterator[tuple[bytes, bytes]]:
        return rp.scan(state, start, end, reverse, seq)

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key`` in this view, or None."""
        state, seq = self._view()
        return rp.get(state, _validate.key(key), seq)

    def scan(
        self, start: bytes | None = None, end: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs with ``start <= key < end``, ascending or descending."""
        state, seq = self._view()
        s = _validate.bound(start, "start")
        e = _validate.bound(end, "end")
        return self._scan(state, s, e, _validate.flag(reverse, "reverse"), seq)

    def scan_prefix(self, prefix: bytes, *, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs for keys starting with ``prefix``."""
        p = _validate.bound(prefix, "prefix")
        if p is None:
            raise TypeError("prefix must be bytes, not None")
        return self.scan(p or None, _validate.prefix_end(p) if p else None, reverse=reverse)
