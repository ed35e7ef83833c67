"""A process-local object store: a dict guarded by a lock, truly atomic.

``memory://name`` URLs share one store per name within the process, so a test
can close a database and reopen it. fsspec's MemoryFileSystem is not used: its
create is check-then-write and it keeps one global namespace.
"""

from __future__ import annotations

import threading

from kvstore.objstore.base import Journal, RangeReader, check_name

_registry: dict[str, MemoryStore] = {}
_registry_lock = threading.Lock()


class MemoryStore:
    def __init__(self, label: str = "") -> None:
        self._objects: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self.label = label

    @classmethod
    def named(cls, name: str) -> MemoryStore:
        """The store registered under ``name`` (created on first use)."""
        with _registry_lock:
            store = _registry.get(name)
            if store is None:
                store = _registry[name] = cls(name)
            return store

    @staticmethod
    def drop(name: str) -> None:
        """Forget the named store (its contents are gone)."""
        with _registry_lock:
            _registry.pop(name, None)

    def put(self, name: str, data: bytes) -> None:
        check_name(name)
        with self._lock:
            self._objects[name] = bytes(data)

    def put_if_absent(self, name: str, data: bytes) -> None:
        check_name(name)
        with self._lock:
            if name in self._objects:
                raise FileExistsError(name)
            self._objects[name] = bytes(data)

    def get(self, name: str) -> bytes:
        with self._lock:
            try:
                return self._objects[name]
            except KeyError:
                raise FileNotFoundError(name) from None

    def get_range(self, name: str, start: int, length: int) -> bytes:
        return self.get(name)[start : start + length]

    def list(self, prefix: str = "") -> list[str]:
        with self._lock:
            return sorted(n for n in self._objects if n.startswith(prefix))

    def delete(self, name: str) -> None:
        with self._lock:
            self._objects.pop(name, None)

    def exists(self, name: str) -> bool:
        with self._lock:
            return name in self._objects

    def size(self, name: str) -> int:
        return len(self.get(name))

    def open_journal(self, name: str) -> Journal | None:
        return None

    def open_range_reader(self, name: str) -> RangeReader:
        return _BytesReader(self.get(name))

    def describe(self) -> str:
        return f"memory://{self.label}"

    # Test helpers -------------------------------------------------------
    def raw(self) -> dict[str, bytes]:
        """A copy of every object (for tests that corrupt or inspect bytes)."""
        with self._lock:
            return dict(self._objects)


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def read(self, offset: int, length: int) -> bytes:
        return self._data[offset : offset + length]

    def close(self) -> None:
        pass
