"""A fault-injecting wrapper around any store, for crash and error tests.

Every mutation (``put``, ``put_if_absent``, ``delete``, journal ``append``) is
numbered from 1. The wrapper can:

* ``crash_before=k``: raise :class:`SimulatedCrash` instead of performing the
  k-th mutation, and from then on fail *every* call, as if the process had
  died. With ``torn=True`` the k-th mutation, if it is a journal append, first
  writes a prefix of its bytes (a torn write), and if it is a put, leaves a
  prefix of the object under a temp-like name that no reader lists.
* ``fail_before=k``: raise ``OSError`` instead of the k-th mutation only (the
  store keeps working; the caller must cope).
* ``error_after=k``: perform the k-th mutation, then raise ``OSError`` (an
  ambiguous outcome: the write happened but the caller was told it failed).

``SimulatedCrash`` derives from BaseException so library ``except Exception``
blocks cannot swallow it. Reopen the *inner* store to see what survived.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kvstore.objstore.base import Journal, ObjectStore, RangeReader


class SimulatedCrash(BaseException):
    """The injected crash point was reached; the 'process' is dead."""


class FaultyStore:
    def __init__(
        self,
        inner: ObjectStore,
        *,
        crash_before: int | None = None,
        fail_before: int | None = None,
        error_after: int | None = None,
        torn: bool = False,
        on_mutation: Callable[[int, str, str], None] | None = None,
    ) -> None:
        self.inner = inner
        self.crash_before = crash_before
        self.fail_before = fail_before
        self.error_after = error_after
        self.torn = torn
        self.on_mutation = on_mutation
        self.mutations = 0
        self.crashed = False
        self.log: list[tuple[int, str, str]] = []
        self._lock = threading.Lock()
        # Epoch cells only where the inner store has them: the engine asks
        # ``getattr(store, "open_epoch_cell", None)``, and an opener returning
        # None would look like a store with cells that cannot open one.
        opener = getattr(inner, "open_epoch_cell", None)
        if opener is not None:
            self.open_epoch_cell = opener

    #: present only when the inner store has epoch cells (see __init__)
    open_epoch_cell: Callable[[str], Any]

    @property
    def supports_journal(self) -> bool:
        return bool(getattr(self.inner, "supports_journal", False))

    # -- fault logic --------------------------------------------------------
    def _check_alive(self) -> None:
        if self.crashed:
            raise SimulatedCrash("store used after the simulated crash")

    def _mutation(self, op: str, name: str, torn_action: Callable[[], None] | None = None) -> int:
        with self._lock:
            self._check_alive()
            self.mutations += 1
            k = self.mutations
            self.log.append((k, op, name))
            if self.on_mutation is not None:
                self.on_mutation(k, op, name)
            if self.crash_before is not None and k == self.crash_before:
                self.crashed = True
                if self.torn and torn_action is not None:
                    torn_action()
                raise SimulatedCrash(f"crash before mutation {k}: {op} {name}")
            if self.fail_before is not None and k == self.fail_before:
                raise OSError(f"injected failure before mutation {k}: {op} {name}")
            return k

    def _after(self, k: int, op: str, name: str) -> None:
        if self.error_after is not None and k == self.error_after:
            raise OSError(f"injected error after mutation {k}: {op} {name}")

    # -- mutations ------------------------------------------------------------
    def put(self, name: str, data: bytes) -> None:
        k = self._mutation("put", name)
        self.inner.put(name, data)
        self._after(k, "put", name)

    def put_if_absent(self, name: str, data: bytes) -> None:
        k = self._mutation("put_if_absent", name)
        self.inner.put_if_absent(name, data)
        self._after(k, "put_if_absent", name)

    def delete(self, name: str) -> None:
        k = self._mutation("delete", name)
        self.inner.delete(name)
        self._after(k, "delete", name)

    # -- reads ----------------------------------------------------------------
    def get(self, name: str) -> bytes:
        self._check_alive()
        return self.inner.get(name)

    def get_range(self, name: str, start: int, length: int) -> bytes:
        self._check_alive()
        return self.inner.get_range(name, start, length)

    def list(self, prefix: str = "") -> list[str]:
        self._check_alive()
        return self.inner.list(prefix)

    def exists(self, name: str) -> bool:
        self._check_alive()
        return self.inner.exists(name)

    def size(self, name: str) -> int:
        self._check_alive()
        return self.inner.size(name)

    def open_range_reader(self, name: str) -> RangeReader:
        self._check_alive()
        return _CheckedReader(self, self.inner.open_range_reader(name))

    def open_journal(self, name: str) -> Journal | None:
        k = self._mutation("create_journal", name)
        journal = self.inner.open_journal(name)
        self._after(k, "create_journal", name)
        return None if journal is None else _FaultyJournal(self, journal)

    def describe(self) -> str:
        return f"faulty({self.inner.describe()})"


class _CheckedReader:
    def __init__(self, owner: FaultyStore, inner: RangeReader) -> None:
        self._owner = owner
        self._inner = inner

    def read(self, offset: int, length: int) -> bytes:
        self._owner._check_alive()
        return self._inner.read(offset, length)

    def close(self) -> None:
        self._inner.close()


class _FaultyJournal:
    def __init__(self, owner: FaultyStore, inner: Journal) -> None:
        self._owner = owner
        self._inner = inner
        self.name = inner.name

    def append(self, data: bytes) -> None:
        def torn() -> None:
            self._inner.append(data[: max(1, len(data) // 2)])

        k = self._owner._mutation("append", self.name, torn)
        self._inner.append(data)
        self._owner._after(k, "append", self.name)

    def sync(self) -> None:
        self._owner._check_alive()
        self._inner.sync()

    def close(self) -> None:
        self._inner.close()
