"""The object-store boundary: the only interface through which the engine does I/O.

Six calls carry every commit protocol of the store::

    put(name, data)              create or replace, atomically (readers see old or new)
    put_if_absent(name, data)    create only if missing, atomically; FileExistsError
                                 otherwise. Manifests, WAL objects and SSTs are all
                                 created this way, which is what fences old writers.
    get(name) / get_range(...)   whole object or a byte range; FileNotFoundError
    list(prefix)                 sorted names under a prefix
    delete(name)                 idempotent

Stores that live on a real local filesystem can also offer an append-only
*journal* (``open_journal``): the write-ahead log then costs one ``write`` and
one ``fdatasync`` per commit group instead of one object per group.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


class DurabilityUnknown(OSError):
    """The object was written, but making it durable failed (a directory fsync):
    it is readable now and may be gone after a power loss. Reading it back
    cannot settle that; the caller must not rely on it."""


class Journal(Protocol):
    """An append-only file: ``append`` writes, ``sync`` makes it durable.

    A journal may preallocate space ahead of what was appended: while it is
    open, and after a crash, the file can hold zero bytes after the last
    append (the WAL decoder cuts them). ``close`` leaves exactly the appended
    bytes.
    """

    name: str

    def append(self, data: bytes) -> None: ...

    def sync(self) -> None: ...

    def close(self) -> None: ...


class RangeReader(Protocol):
    """Random access to one immutable object (an SST)."""

    def read(self, offset: int, length: int) -> bytes: ...

    def close(self) -> None: ...

    # Optional: ``view() -> memoryview | None``, the whole object in memory
    # (a local file's read-only mapping), for point reads without copies.


@runtime_checkable
class ObjectStore(Protocol):
    """What every backend implements. Names are relative, ``/``-separated."""

    def put(self, name: str, data: bytes) -> None: ...

    def put_if_absent(self, name: str, data: bytes) -> None: ...

    def get(self, name: str) -> bytes: ...

    def get_range(self, name: str, start: int, length: int) -> bytes: ...

    def list(self, prefix: str = "") -> list[str]: ...

    def delete(self, name: str) -> None: ...

    def exists(self, name: str) -> bool: ...

    def size(self, name: str) -> int: ...

    def open_journal(self, name: str) -> Journal | None:
        """Create a new append-only journal, or None when the store cannot append."""
        ...

    def open_range_reader(self, name: str) -> RangeReader: ...

    def describe(self) -> str: ...


class SimpleRangeReader:
    """A :class:`RangeReader` that issues ``get_range`` calls."""

    def __init__(self, store: ObjectStore, name: str) -> None:
        self._store = store
        self._name = name

    def read(self, offset: int, length: int) -> bytes:
        return self._store.get_range(self._name, offset, length)

    def close(self) -> None:
        pass


def check_name(name: str) -> str:
    """Reject names that could escape the store root."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"object name must be a non-empty str, got {name!r}")
    parts = name.split("/")
    if (
        name.startswith("/")
        or any(p in ("", ".", "..") for p in parts[:-1])
        or parts[-1]
        in (
            ".",
            "..",
        )
    ):
        raise ValueError(f"invalid object name {name!r}")
    return name
