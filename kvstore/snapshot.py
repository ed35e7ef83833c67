"""Snapshots: consistent read views pinned at a sequence number.

A snapshot pins its seq in the engine's
:class:`~kvstore.engine.retention.SeqRegistry`; flushes and compactions keep
every version a pinned seq can read (see :func:`kvstore.iterators.retain`).
Running transactions pin the same way. A snapshot that is never closed is
released when garbage-collected.
"""

from __future__ import annotations

import weakref

from kvstore import readpath as rp
from kvstore.engine.protocol import Engine
from kvstore.errors import ClosedError
from kvstore.reads import ReadSurface


class Snapshot(ReadSurface):
    """A consistent, read-only view of the database at :attr:`seq`."""

    __slots__ = ("__weakref__", "_closed", "_engine", "_finalizer", "seq")

    def __init__(self, engine: Engine, seq: int) -> None:
        self._engine = engine
        self.seq = seq
        self._closed = False
        self._finalizer = weakref.finalize(self, engine.release, seq)

    def _view(self) -> tuple[rp.State, int]:
        if self._closed:
            raise ClosedError("the snapshot is closed")
        engine = self._engine
        engine.check_readable(self.seq)  # closed? fenced past what is durable?
        return engine.state, self.seq

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
