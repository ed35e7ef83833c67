"""Read-only views of the whole lakehouse at one version (time travel).

A view is a kvstore :class:`~kvstore.Snapshot` at a sequence number where the
version's state is visible, plus the shared read calls of
:class:`~lakehouse.reads.ReadOps`. Opening one costs a few point reads no
matter how long the history is (see :meth:`Lakehouse.at_version`); reads then
cost what they cost at the latest version. Close it (or use ``with``) to
release the kvstore snapshot, which otherwise keeps old versions from being
compacted away until it is garbage-collected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import kvstore
from kvstore.objstore import ObjectStore
from lakehouse.data.table import FileState, LazyFiles
from lakehouse.errors import (
    ClosedError,
    DataFileMissing,
    LakehouseError,
    VersionExpired,
    one_hierarchy,
)
from lakehouse.pins import Pins, state_paths
from lakehouse.reads import ReadOps


@one_hierarchy
class LakehouseView(ReadOps):
    """The lakehouse as of :attr:`version` (read-only)."""

    def __init__(
        self,
        snapshot: kvstore.Snapshot,
        version: int,
        name_limit: int,
        check_open: Callable[[], None] | None = None,
        data: ObjectStore | None = None,
        data_url: str | None = None,
        oldest: Callable[[], int] | None = None,
        pins: Pins | None = None,
    ) -> None:
        self._snap = snapshot
        #: the lakehouse's oldest retained version now (a reader refreshes to know it)
        self._oldest = oldest
        self._data = data
        self._url = data_url
        self._owner_check = check_open
        self._name_limit = name_limit
        #: the lakehouse version this view shows
        self.version = version
        self._closed = False
        if pins is not None:  # expiry keeps the files it reads (see lakehouse.pins)
            self._pins = pins
            pins.add(self)

    @property
    def seq(self) -> int:
        """The kvstore sequence number the view reads at."""
        return self._snap.seq

    def _check_usable(self) -> None:
        if self._closed:
            raise ClosedError(f"the view of version {self.version} is closed")
        if self._owner_check is not None:
            self._owner_check()

    def _fetch(self, key: bytes) -> bytes | None:
        return self._snap.get(key)

    def _scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self._snap.scan_prefix(prefix)

    def _scan_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        return self._snap.scan(start, end)

    def files_by_id(self, table: str) -> Mapping[str, FileState]:
        """The table's live files at this version looked up by file id one at a time
        (two point reads each, no scan): for a caller that needs a few files of a
        table with many (the Iceberg metadata writer follows a version's record)."""
        d = self.describe_table(table)
        return LazyFiles(self._fetch, d.namespace, d.name)

    def raw_items(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The lakehouse's kvstore keys under ``prefix`` as of this version (rollback
        and export copy whole states with it; see :mod:`lakehouse.keys`)."""
        self._check_usable()
        return self._snap.scan_prefix(prefix)

    def _data_store(self) -> ObjectStore:
        if self._data is None:
            raise TypeError("this view has no data store")
        return self._data

    def _data_url(self) -> str | None:
        return self._url

    def pinned_paths(self) -> set[str] | None:
        """The data files (in the data directory) this view's version references, which
        expiry keeps while it is open (see lakehouse.pins); None once closed."""
        return None if self._closed else state_paths(self._snap)

    def _missing(self, exc: DataFileMissing) -> LakehouseError:
        if self._oldest is not None:
            oldest = self._oldest()
            if self.version < oldest:
                gone = f"data file {exc.path} was" if exc.path else "data files were"
                return VersionExpired(
                    f"version {self.version} has expired (the oldest retained version is "
                    f"{oldest}); its {gone} deleted"
                )
        return exc

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._snap.close()

    def __enter__(self) -> LakehouseView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<lakehouse view of version {self.version}{' closed' if self._closed else ''}>"
