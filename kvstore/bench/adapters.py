"""The interface between the workloads and the stores: :class:`Store`.

The workloads (:mod:`kvstore.bench.loads`, :mod:`kvstore.bench.writes`,
:mod:`kvstore.bench.txns`) call only the few operations declared here; each
store maps them onto its ordinary API in one small adapter under
:mod:`kvstore.bench.stores`, which also holds the registry (``STORES``). This
module owns those operations with their default timed loops (SlateDB's adapter
overrides them to stay on its event loop), the row groups only some stores run
(:data:`ROW_GROUPS`, see :attr:`Store.not_run`), the isolation level names and
the counter update of the read-modify-write workloads. Optional packages are
imported in :meth:`Store.open`, so every adapter imports without them;
:meth:`Store.missing` says why a store cannot run.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, ClassVar, TypeVar

Pair = tuple[bytes, bytes]
T = TypeVar("T")

#: how often (in operations) a cheap loop looks at the clock
CLOCK_EVERY = 256

#: isolation levels of the transaction workloads
SNAPSHOT = "snapshot"
SERIALIZABLE = "serializable"

#: rows that only some stores run, by group (see :attr:`Store.not_run`)
ROW_GROUPS: dict[str, tuple[str, ...]] = {
    "txn_rmw": ("txn_rmw", "txn_rmw_durable"),
    "txn_hot_snapshot": ("txn_hot_snapshot", "txn_hot_snapshot_aborts"),
    "txn_hot_serializable": ("txn_hot_serializable", "txn_hot_serializable_aborts"),
    "txn_open": ("txn_open0", "txn_open100"),
    "overwrite": ("overwrite", "overwrite_max_ms", "get_after_overwrite"),
    "compact": ("space_amp", "get_after_compact", "get_fresh"),
}


KVSTORE_ONLY = "kvstore only"
HOT_ONLY = "kvstore only (sqlite3 for comparison)"


def incr(counter: bytes | None) -> bytes:
    """The read-modify-write workloads' update: a decimal counter plus one."""
    return b"%d" % (int(counter or b"0") + 1)


class Store:
    """The operations the workloads need, on one store at ``path``."""

    name: ClassVar[str]
    package: ClassVar[str]
    durability: ClassVar[str]
    #: row groups (keys of :data:`ROW_GROUPS`) this store does not run, with why
    not_run: ClassVar[dict[str, str]] = {
        "txn_hot_snapshot": HOT_ONLY,
        "txn_hot_serializable": HOT_ONLY,
        "txn_open": KVSTORE_ONLY,
        "compact": KVSTORE_ONLY,
    }

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def missing(cls) -> str | None:
        """Why this store cannot run here (its package is missing), or None."""
        if importlib.util.find_spec(cls.package) is None:
            return f"package {cls.package!r} is not installed"
        return None

    # -- primitives every adapter implements --------------------------------
    def open(self, *, bulk: bool = False) -> None:
        """Open (creating) the store; ``bulk`` opens it for a non-durable load."""
        raise NotImplementedError

    def open_for_load(self) -> None:
        """Open for the batched load workload (default: ``open(bulk=True)``)."""
        self.open(bulk=True)

    def close(self) -> None:
        raise NotImplementedError

    def write_batch(self, pairs: Sequence[Pair]) -> None:
        """Write ``pairs`` atomically, without waiting for durability."""
        raise NotImplementedError

    def finish_load(self) -> None:
        """Make everything written so far durable and flushed to the store's files."""
        raise NotImplementedError

    def put_durable(self, key: bytes, value: bytes) -> None:
        """Write one key and return once it is on stable storage. Thread-safe."""
        raise NotImplementedError

    def get(self, key: bytes) -> bytes | None:
        raise NotImplementedError

    def scan(self) -> Iterator[Pair]:
        """Every pair in key order."""
        raise NotImplementedError

    def rmw(
        self,
        k1: bytes,
        k2: bytes,
        *,
        durable: bool,
        isolation: str = SERIALIZABLE,
        pause: bool = False,
    ) -> bool:
        """One transaction: read ``k1`` and ``k2``, write each back plus one (:func:`incr`).

        True when it committed, False when it aborted on a conflict (then
        nothing of it was written). ``pause`` yields the GIL
        (``time.sleep(0)``) between operations, so threads interleave.
        Durability follows ``durable`` where the store decides it per commit,
        else how the store was opened (``open(bulk=not durable)``).
        """
        raise NotImplementedError

    def put_nondurable(self, key: bytes, value: bytes) -> None:
        """One non-durable put (the overwrite workload); :meth:`end_puts` finishes a series."""
        raise NotImplementedError

    def end_puts(self) -> None:
        """Commit what :meth:`put_nondurable` left pending (not a durability point)."""

    def compact(self) -> int:
        """Flush and merge everything into one sorted run; the live table bytes after."""
        raise NotImplementedError

    def begin_readers(self, keys: Sequence[bytes]) -> list[Any]:
        """Begin one SERIALIZABLE transaction per key, each reading its key; left open."""
        raise NotImplementedError

    def stats(self) -> dict[str, Any]:
        """The store's own counters after a workload ({} when it has none worth noting)."""
        return {}

    def end_readers(self, txns: list[Any]) -> int:
        """Roll back :meth:`begin_readers`' transactions; how many were still running."""
        raise NotImplementedError

    # -- timed loops (SlateDB overrides them to run on its event loop) ------
    def load(self, batches: Iterable[Sequence[Pair]], deadline: float) -> int:
        """Write every batch (stopping early at ``deadline``), then finish; keys written."""
        n = 0
        for batch in batches:
            self.write_batch(batch)
            n += len(batch)
            if time.perf_counter() >= deadline:
                break
        self.finish_load()
        return n

    def get_many(self, keys: Sequence[bytes], deadline: float) -> tuple[int, int]:
        """Point-get ``keys`` in order until ``deadline``; (gets done, keys found)."""
        get = self.get
        done = found = 0
        for key in keys:
            if get(key) is not None:
                found += 1
            done += 1
            if not done % CLOCK_EVERY and time.perf_counter() >= deadline:
                break
        return done, found

    def scan_all(self, deadline: float) -> int:
        """Iterate the whole store (stopping early at ``deadline``); pairs seen."""
        n = 0
        for _ in self.scan():
            n += 1
            if not n % 4096 and time.perf_counter() >= deadline:
                break
        return n

    def put_durable_many(self, pairs: Iterable[Pair], deadline: float) -> int:
        """Durable puts one after another until ``deadline``; puts done."""
        n = 0
        for key, value in pairs:
            self.put_durable(key, value)
            n += 1
            if time.perf_counter() >= deadline:
                break
        return n

    def put_durable_threads(self, streams: Sequence[Iterable[Pair]], deadline: float) -> int:
        """One thread per stream doing durable puts until ``deadline``; total puts."""
        return sum(
            _threads(len(streams), lambda i: self.put_durable_many(streams[i], deadline), "put")
        )

    def rmw_many(
        self,
        key_pairs: Iterable[tuple[bytes, bytes]],
        deadline: float,
        *,
        durable: bool,
        isolation: str = SERIALIZABLE,
        pause: bool = False,
    ) -> tuple[int, int]:
        """:meth:`rmw` on each pair, retried until it commits, until ``deadline``.

        Returns (commits, aborts); a retry cut short by the deadline counts
        its aborts but no commit.
        """
        rmw = self.rmw
        clock = time.perf_counter
        commits = aborts = 0
        for k1, k2 in key_pairs:
            while not rmw(k1, k2, durable=durable, isolation=isolation, pause=pause):
                aborts += 1
                if clock() >= deadline:
                    return commits, aborts
            commits += 1
            if clock() >= deadline:
                break
        return commits, aborts

    def rmw_threads(
        self,
        streams: Sequence[Iterable[tuple[bytes, bytes]]],
        deadline: float,
        *,
        isolation: str,
    ) -> tuple[int, int]:
        """One thread per stream doing non-durable :meth:`rmw_many` with pauses; totals."""
        results = _threads(
            len(streams),
            lambda i: self.rmw_many(
                streams[i], deadline, durable=False, isolation=isolation, pause=True
            ),
            "rmw",
        )
        return sum(c for c, _ in results), sum(a for _, a in results)

    def put_many_max(self, pairs: Iterable[Pair], deadline: float) -> tuple[int, float]:
        """Non-durable single puts until ``deadline``: (puts, slowest single put in seconds)."""
        put = self.put_nondurable
        clock = time.perf_counter
        n = 0
        worst = 0.0
        for key, value in pairs:
            t0 = clock()
            put(key, value)
            dt = clock() - t0
            if dt > worst:
                worst = dt
            n += 1
            if not n % CLOCK_EVERY and clock() >= deadline:
                break
        t0 = clock()
        self.end_puts()
        return n, max(worst, clock() - t0)


def _threads(n: int, fn: Callable[[int], T], what: str) -> list[T]:
    """``fn(0) .. fn(n-1)`` on ``n`` threads started together; their results in order."""
    results: list[Any] = [None] * n
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def worker(i: int) -> None:
        try:
            barrier.wait()
            results[i] = fn(i)
        except BaseException as exc:  # surfaced in the calling thread
            errors.append(exc)

    threads = [
        threading.Thread(target=worker, args=(i,), name=f"bench-{what}-{i}") for i in range(n)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
