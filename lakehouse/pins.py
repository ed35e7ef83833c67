"""Pins: the data files that open views and transactions of this process read.

``expire_versions`` queues the files only expired versions reference and
deletes each once its grace has passed, unless a reader of this process still
needs it: an open view (``at_version``, ``at_time``, the head view of
``lh.read``), an open transaction (its base version) or a streamed read
(``scan_batches``, whose view may be closed before the stream is read) or a
full ``export`` copying an old version's files. They are *holders* (a
``version`` and a public ``pinned_paths()``); each registers itself here when
it is made (views and transactions get ``pins=`` at construction), as a
kvstore snapshot pins its seq. A deletion pass asks :meth:`Pins.paths` for the
files the holders at expired versions reference (a holder at a retained
version references no queued file) and skips them::

    at_version(v) / begin() ── register ──▶ Pins ◀── paths(below=oldest) ── deletion pass
    close() / commit() / garbage collection ─┘ (a closed holder pins nothing)

The registry keeps holders weakly, so one that is dropped without ``close()``
stops pinning when it is garbage-collected. Making a holder and registering it
happen under :attr:`Pins.lock` together with taking its kvstore snapshot; a
deletion pass lists the holders under the same lock after the new oldest
version is committed. So either a holder is listed, or its snapshot already
shows the new oldest version (and at that version it references no queued
file). A transaction that brings back files of an older version (a restore,
a clone at a version, a rollback) does not pin them: its commit fails with
``RetryableConflict`` if that version expired (:mod:`lakehouse.commit`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import Protocol

import kvstore
from lakehouse import codec, keys


class Holder(Protocol):
    """A view, transaction or stream that reads one version's data files."""

    @property
    def version(self) -> int: ...
    def pinned_paths(self) -> set[str] | None:
        """Data files it may still read (None once closed)."""
        ...


class Pins:
    """The holders of one open lakehouse (see the module docstring)."""

    def __init__(self) -> None:
        #: held while a holder's snapshot is taken and it is registered
        self.lock = threading.RLock()
        self._holders: weakref.WeakSet[Holder] = weakref.WeakSet()

    def add(self, holder: Holder) -> None:
        with self.lock:
            self._holders.add(holder)

    def paths(self, below: int) -> set[str]:
        """Files pinned by open holders of versions older than ``below``."""
        with self.lock:
            holders = [h for h in self._holders if h.version < below]
        out: set[str] = set()
        for h in holders:
            paths = h.pinned_paths()
            if paths:
                out |= paths
        return out


class StreamPin:
    """The files of one streamed read, pinned until the stream ends or is dropped."""

    def __init__(self, version: int, paths: Iterable[str]) -> None:
        self.version = version
        self._paths: set[str] | None = set(paths)

    def pinned_paths(self) -> set[str] | None:
        return self._paths

    def release(self) -> None:
        self._paths = None


def state_paths(snap: kvstore.Snapshot) -> set[str] | None:
    """Paths of the data files (in the data directory) a version's state references,
    read through its kvstore snapshot; None when the snapshot was closed meanwhile."""
    try:
        return {
            f.path
            for k, v in snap.scan_prefix(keys.STATE_PREFIX)
            if keys.is_data_file_key(k)
            for f in [codec.decode_data_file(v)]
            if f.is_stored
        }
    except kvstore.ClosedError:
        return None
