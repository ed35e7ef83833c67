"""A view of an object store restricted to the names under one prefix.

The lakehouse opened on a store instance keeps its data files under
``lakehouse-data/`` of that store; the kvstore only ever touches its own
``manifest/``, ``wal/`` and ``sst/`` names beside them.
"""

from __future__ import annotations

from kvstore.objstore.base import Journal, ObjectStore, RangeReader


class PrefixStore:
    """A view of ``inner`` restricted to names under ``prefix``."""

    def __init__(self, inner: ObjectStore, prefix: str) -> None:
        self.inner = inner
        self.prefix = prefix

    def put(self, name: str, data: bytes) -> None:
        self.inner.put(self.prefix + name, data)

    def put_if_absent(self, name: str, data: bytes) -> None:
        self.inner.put_if_absent(self.prefix + name, data)

    def get(self, name: str) -> bytes:
        return self.inner.get(self.prefix + name)

    def get_range(self, name: str, start: int, length: int) -> bytes:
        return self.inner.get_range(self.prefix + name, start, length)

    def list(self, prefix: str = "") -> list[str]:
        n = len(self.prefix)
        return [name[n:] for name in self.inner.list(self.prefix + prefix)]

    def delete(self, name: str) -> None:
        self.inner.delete(self.prefix + name)

    def exists(self, name: str) -> bool:
        return self.inner.exists(self.prefix + name)

    def size(self, name: str) -> int:
        return self.inner.size(self.prefix + name)

    def open_journal(self, name: str) -> Journal | None:
        return None

    def open_range_reader(self, name: str) -> RangeReader:
        return self.inner.open_range_reader(self.prefix + name)

    def describe(self) -> str:
        return f"{self.inner.describe()}/{self.prefix}"
