"""One small adapter per store, all behind :class:`Store`.

Each adapter maps the benchmark's few operations onto its store's ordinary
API. Optional packages are imported in :meth:`Store.open`, so this module
imports without them; :meth:`Store.missing` says why a store cannot run.

Durability as each adapter implements it (``durability`` on each class):

* kvstore: ``put(durable=True)`` (WAL fsync, group commit); the load writes
  ``durable=False`` batches and ends with ``db.compact()`` (flush, then merge
  everything into one sorted run), timed as part of the load. Transactions:
  ``db.transaction(Isolation.SERIALIZABLE)``, ``commit(durable=...)``,
  retried on ``TransactionConflict``.
* sqlite3: WAL journal mode. Durable writes use ``synchronous=FULL`` (the WAL
  is fsynced at every commit; ``NORMAL`` would not be durable in WAL mode);
  the load uses ``synchronous=OFF`` and ends with ``synchronous=FULL`` plus
  ``wal_checkpoint(TRUNCATE)``, which fsyncs the WAL and the database file.
  One connection per thread, 64 MiB page cache (kvstore's block cache size).
  Transactions: ``BEGIN IMMEDIATE`` ... ``COMMIT`` (writers take the lock up
  front, so they wait instead of aborting); ``synchronous=FULL`` when durable,
  ``OFF`` when not. Non-durable single puts: one ``INSERT OR REPLACE`` each, a
  ``COMMIT`` every 1000.
* LMDB: the load opens the environment with ``sync=False`` and ends with
  ``env.sync(True)``; durable writes use ``sync=True`` (one write transaction
  per put, fdatasync at commit; writers serialize on LMDB's writer lock).
  Transactions: one write transaction (LMDB's single writer makes it
  serializable), ``sync`` as for puts; non-durable single puts: a write
  transaction per put with ``sync=False``.
* RocksDB (rocksdict, raw mode, default options): the load writes batches
  with the WAL on and no sync, then ``flush()`` + ``flush_wal(sync=True)``;
  durable puts use ``WriteOptions.sync = True``; non-durable single puts use
  the default ``WriteOptions`` (WAL, no sync). rocksdict has no (optimistic)
  transactions, so the transaction workloads are n/a.
* SlateDB (local directory through its ``file:///`` object store): every call
  is awaited on one asyncio event loop owned by the adapter. The load awaits
  ``write(batch)`` then flushes the WAL and the memtable; a durable put is
  ``put`` + ``flush_with_options(WAL)`` + ``await_durable()`` (awaiting the
  handle alone waits for the 100 ms ``flush_interval``); the multi-threaded
  durable workload runs that as concurrent tasks on the same loop. Note that
  SlateDB's local object store (``object_store``'s LocalFileSystem) never
  calls fsync or fdatasync (checked with strace): its "durable" means written
  to the OS page cache, so its durable-put numbers carry no sync cost.
  Transactions: ``begin(IsolationLevel.SERIALIZABLE_SNAPSHOT)``, awaited
  ``get``/``put``/``commit``, retried on ``Error.Transaction``; durable adds
  the WAL flush + ``await_durable()`` on the commit's handle. Not run on the
  overwrite workload (1M single awaited puts at ~8k/s would take minutes).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from typing import Any, ClassVar, TypeVar, cast

Pair = tuple[bytes, bytes]
T = TypeVar("T")

#: how often (in operations) a cheap loop looks at the clock
_CLOCK_EVERY = 256

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

_KVSTORE_ONLY = "kvstore only"
_HOT_ONLY = "kvstore only (sqlite3 for comparison)"


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
        "txn_hot_snapshot": _HOT_ONLY,
        "txn_hot_serializable": _HOT_ONLY,
        "txn_open": _KVSTORE_ONLY,
        "compact": _KVSTORE_ONLY,
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
            if not done % _CLOCK_EVERY and time.perf_counter() >= deadline:
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
            if not n % _CLOCK_EVERY and clock() >= deadline:
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


class KvStore(Store):
    name = "kvstore"
    package = "kvstore"
    durability = (
        "put(durable=True): WAL fsync with group commit; load: durable=False batches with "
        "background compaction off, then db.compact() (flush + merge into one sorted run, "
        "timed as part of the load); "
        "txns: db.transaction(SERIALIZABLE), commit(durable=...), retried on TransactionConflict"
    )
    not_run: ClassVar[dict[str, str]] = {}

    def open(self, *, bulk: bool = False, **options: Any) -> None:
        import kvstore

        self._kv = kvstore
        self._db = kvstore.open(self.path, **options)

    def open_for_load(self) -> None:
        """As RocksDB's PrepareForBulkLoad: no background compaction while loading;
        finish_load() then merges everything once (timed as part of the load)."""
        self.open(background_compaction=False)

    def close(self) -> None:
        self._db.close()

    def write_batch(self, pairs: Sequence[Pair]) -> None:
        self._db.write(self._kv.WriteBatch().put_many(pairs), durable=False)

    def finish_load(self) -> None:
        self._db.compact()

    def put_durable(self, key: bytes, value: bytes) -> None:
        self._db.put(key, value)

    def rmw(
        self,
        k1: bytes,
        k2: bytes,
        *,
        durable: bool,
        isolation: str = SERIALIZABLE,
        pause: bool = False,
    ) -> bool:
        kv = self._kv
        level = kv.Isolation.SERIALIZABLE if isolation == SERIALIZABLE else kv.Isolation.SNAPSHOT
        nap = time.sleep
        try:
            with self._db.transaction(level) as t:
                a = t.get(k1)
                if pause:
                    nap(0)
                b = t.get(k2)
                if pause:
                    nap(0)
                t.put(k1, incr(a))
                if pause:
                    nap(0)
                t.put(k2, incr(b))
                if pause:
                    nap(0)
                t.commit(durable=durable)
        except kv.TransactionConflict:
            return False
        return True

    def put_nondurable(self, key: bytes, value: bytes) -> None:
        self._db.put(key, value, durable=False)

    def compact(self) -> int:
        self._db.compact()
        st = self._db.stats()
        return int(st["sorted_run_bytes"] + st["l0_bytes"])

    def stats(self) -> dict[str, Any]:
        return dict(self._db.stats())

    def begin_readers(self, keys: Sequence[bytes]) -> list[Any]:
        txns = []
        for k in keys:
            t = self._db.transaction(self._kv.Isolation.SERIALIZABLE)
            t.get(k)
            txns.append(t)
        return txns

    def end_readers(self, txns: list[Any]) -> int:
        running = sum(t.status == "open" for t in txns)
        running = min(running, int(self._db.stats()["transactions_running"]))
        for t in txns:
            t.rollback()
        return running

    def get(self, key: bytes) -> bytes | None:
        return self._db.get(key)

    def scan(self) -> Iterator[Pair]:
        return self._db.scan()


class SqliteStore(Store):
    name = "sqlite3"
    package = "sqlite3"
    durability = (
        "WAL mode; durable: synchronous=FULL; load: synchronous=OFF, then FULL + "
        "wal_checkpoint(TRUNCATE); a connection per thread; txns: BEGIN IMMEDIATE .. COMMIT "
        "(writers wait for the lock, never abort), synchronous FULL (durable) or OFF; "
        "overwrite: one INSERT OR REPLACE per put, COMMIT every 1000, synchronous=OFF"
    )
    not_run: ClassVar[dict[str, str]] = {
        "txn_hot_snapshot": "sqlite3 has no snapshot-isolation writers",
        "txn_open": _KVSTORE_ONLY,
        "compact": _KVSTORE_ONLY,
    }
    #: puts per transaction in the overwrite workload
    PUTS_PER_COMMIT = 1000

    def open(self, *, bulk: bool = False) -> None:
        os.makedirs(self.path, exist_ok=True)
        self._file = os.path.join(self.path, "kv.sqlite")
        self._sync = "OFF" if bulk else "FULL"
        self._local = threading.local()
        self._pending = 0
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._conn().execute(
            "CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID"
        )

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self._file, timeout=60, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self._sync}")
            conn.execute("PRAGMA cache_size=-65536")
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()

    def write_batch(self, pairs: Sequence[Pair]) -> None:
        conn = self._conn()
        conn.execute("BEGIN")
        conn.executemany("INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)", pairs)
        conn.execute("COMMIT")

    def finish_load(self) -> None:
        conn = self._conn()
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def put_durable(self, key: bytes, value: bytes) -> None:
        self._conn().execute("INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)", (key, value))

    def rmw(
        self,
        k1: bytes,
        k2: bytes,
        *,
        durable: bool,
        isolation: str = SERIALIZABLE,
        pause: bool = False,
    ) -> bool:
        # durability is the connection's synchronous setting: open(bulk=not durable)
        conn = self._conn()
        ex = conn.execute
        nap = time.sleep
        ex("BEGIN IMMEDIATE")
        try:
            a = ex("SELECT v FROM kv WHERE k = ?", (k1,)).fetchone()
            if pause:
                nap(0)
            b = ex("SELECT v FROM kv WHERE k = ?", (k2,)).fetchone()
            if pause:
                nap(0)
            ex("INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)", (k1, incr(a and a[0])))
            if pause:
                nap(0)
            ex("INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)", (k2, incr(b and b[0])))
            if pause:
                nap(0)
            ex("COMMIT")
        except BaseException:
            if conn.in_transaction:
                ex("ROLLBACK")
            raise
        return True

    def put_nondurable(self, key: bytes, value: bytes) -> None:
        conn = self._conn()
        if not conn.in_transaction:
            conn.execute("BEGIN")
        conn.execute("INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)", (key, value))
        self._pending += 1
        if self._pending >= self.PUTS_PER_COMMIT:
            conn.execute("COMMIT")
            self._pending = 0

    def end_puts(self) -> None:
        conn = self._conn()
        if conn.in_transaction:
            conn.execute("COMMIT")
        self._pending = 0

    def get(self, key: bytes) -> bytes | None:
        row = self._conn().execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def scan(self) -> Iterator[Pair]:
        return iter(self._conn().execute("SELECT k, v FROM kv ORDER BY k"))


class LmdbStore(Store):
    name = "lmdb"
    package = "lmdb"
    durability = (
        "durable: sync=True, a write txn per put; load: sync=False, then env.sync(True); "
        "txns: one write txn (single writer), sync=True (durable) or False; "
        "overwrite: a write txn per put, sync=False"
    )

    def open(self, *, bulk: bool = False) -> None:
        import lmdb

        self._env = lmdb.open(self.path, map_size=1 << 34, sync=not bulk, metasync=not bulk)

    def close(self) -> None:
        self._env.close()

    def write_batch(self, pairs: Sequence[Pair]) -> None:
        with self._env.begin(write=True) as txn:
            txn.cursor().putmulti(pairs)

    def finish_load(self) -> None:
        self._env.sync(True)

    def put_durable(self, key: bytes, value: bytes) -> None:
        with self._env.begin(write=True) as txn:
            txn.put(key, value)

    def rmw(
        self,
        k1: bytes,
        k2: bytes,
        *,
        durable: bool,
        isolation: str = SERIALIZABLE,
        pause: bool = False,
    ) -> bool:
        # durability is the environment's sync flag: open(bulk=not durable)
        with self._env.begin(write=True) as txn:
            a = txn.get(k1)
            b = txn.get(k2)
            txn.put(k1, incr(a))
            txn.put(k2, incr(b))
        return True

    def put_nondurable(self, key: bytes, value: bytes) -> None:
        with self._env.begin(write=True) as txn:  # opened with sync=False (bulk)
            txn.put(key, value)

    def get(self, key: bytes) -> bytes | None:
        with self._env.begin() as txn:
            return txn.get(key)

    def get_many(self, keys: Sequence[bytes], deadline: float) -> tuple[int, int]:
        with self._env.begin() as txn:  # LMDB's idiom: many reads in one read txn
            done = found = 0
            for key in keys:
                if txn.get(key) is not None:
                    found += 1
                done += 1
                if not done % _CLOCK_EVERY and time.perf_counter() >= deadline:
                    break
            return done, found

    def scan(self) -> Iterator[Pair]:
        with self._env.begin() as txn:
            yield from txn.cursor().iternext()


class RocksStore(Store):
    name = "rocksdb"
    package = "rocksdict"
    durability = (
        "durable: WriteOptions.sync=True; load: WAL without sync, then flush + flush_wal; "
        "overwrite: put with default WriteOptions (WAL, no sync); "
        "transactions n/a (rocksdict has no optimistic transactions)"
    )
    not_run: ClassVar[dict[str, str]] = {
        **Store.not_run,
        "txn_rmw": "rocksdict has no optimistic transactions",
    }

    def open(self, *, bulk: bool = False) -> None:
        import rocksdict

        self._rd = rocksdict
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        self._db = rocksdict.Rdict(self.path, opts)
        self._sync = rocksdict.WriteOptions()
        self._sync.sync = True

    def close(self) -> None:
        self._db.close()

    def write_batch(self, pairs: Sequence[Pair]) -> None:
        batch = self._rd.WriteBatch(raw_mode=True)
        for key, value in pairs:
            batch.put(key, value)
        self._db.write(batch)

    def finish_load(self) -> None:
        self._db.flush(True)
        self._db.flush_wal(True)

    def put_durable(self, key: bytes, value: bytes) -> None:
        self._db.put(key, value, self._sync)

    def put_nondurable(self, key: bytes, value: bytes) -> None:
        self._db.put(key, value)

    def get(self, key: bytes) -> bytes | None:
        return self._db.get(key)

    def scan(self) -> Iterator[Pair]:
        return cast(Iterator[Pair], iter(self._db.items()))


class SlateDBStore(Store):
    name = "slatedb"
    package = "slatedb"
    durability = (
        "one asyncio loop, each op awaited; durable: put + flush(WAL) + "
        "await_durable; load: write(batch), then flush WAL and memtable; its local "
        "object store never fsyncs, so its durable writes carry no sync cost; txns: "
        "begin(SERIALIZABLE_SNAPSHOT), awaited get/put/commit, retried on Error.Transaction, "
        "durable: + flush(WAL) + await_durable on the commit's handle"
    )
    not_run: ClassVar[dict[str, str]] = {
        **Store.not_run,
        "overwrite": "not run: 1M single awaited puts (~8k/s) would take minutes",
    }

    def open(self, *, bulk: bool = False) -> None:
        from slatedb import uniffi as sdb

        self._sdb = sdb
        self._loop = asyncio.new_event_loop()
        store = sdb.ObjectStore.resolve("file:///")
        self._db = self._run(sdb.DbBuilder(os.path.abspath(self.path), store).build())
        self._wal = sdb.FlushOptions(flush_type=sdb.FlushType.WAL)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        try:
            self._run(self._db.shutdown())
        finally:
            self._loop.close()

    # primitives (untimed paths and tests); the timed loops below stay on the loop
    def write_batch(self, pairs: Sequence[Pair]) -> None:
        self._run(self._write(pairs))

    def finish_load(self) -> None:
        self._run(self._finish())

    def put_durable(self, key: bytes, value: bytes) -> None:
        self._run(self._put_durable(key, value))

    def get(self, key: bytes) -> bytes | None:
        return self._run(self._db.get(key))

    def scan(self) -> Iterator[Pair]:
        return iter(self._run(self._scan_pairs()))

    def rmw(
        self,
        k1: bytes,
        k2: bytes,
        *,
        durable: bool,
        isolation: str = SERIALIZABLE,
        pause: bool = False,
    ) -> bool:
        return self._run(self._rmw(k1, k2, durable, isolation))

    # async bodies
    async def _write(self, pairs: Sequence[Pair]) -> None:
        batch = self._sdb.WriteBatch()
        for key, value in pairs:
            batch.put(key, value)
        await self._db.write(batch)

    async def _finish(self) -> None:
        await self._db.flush_with_options(self._wal)
        await self._db.flush_with_options(
            self._sdb.FlushOptions(flush_type=self._sdb.FlushType.MEM_TABLE)
        )

    async def _put_durable(self, key: bytes, value: bytes) -> None:
        handle = await self._db.put(key, value)
        await self._db.flush_with_options(self._wal)
        await handle.await_durable()

    async def _rmw(self, k1: bytes, k2: bytes, durable: bool, isolation: str) -> bool:
        sdb = self._sdb
        level = (
            sdb.IsolationLevel.SERIALIZABLE_SNAPSHOT
            if isolation == SERIALIZABLE
            else sdb.IsolationLevel.SNAPSHOT
        )
        txn = await self._db.begin(level)
        try:
            a = await txn.get(k1)
            b = await txn.get(k2)
            await txn.put(k1, incr(a))
            await txn.put(k2, incr(b))
            handle = await txn.commit()
        except sdb.Error.Transaction:
            return False
        if durable and handle is not None:
            await self._db.flush_with_options(self._wal)
            await handle.await_durable()
        return True

    async def _iterator(self) -> Any:
        everything = self._sdb.KeyRange(
            start=None, start_inclusive=False, end=None, end_inclusive=False
        )
        return await self._db.scan(everything)

    async def _scan_pairs(self) -> list[Pair]:
        it = await self._iterator()
        out: list[Pair] = []
        while rows := await it.next_batch(1024):
            out.extend((r.key, r.value) for r in rows)
        return out

    # timed loops
    def load(self, batches: Iterable[Sequence[Pair]], deadline: float) -> int:
        async def body() -> int:
            n = 0
            for batch in batches:
                await self._write(batch)
                n += len(batch)
                if time.perf_counter() >= deadline:
                    break
            await self._finish()
            return n

        return self._run(body())

    def get_many(self, keys: Sequence[bytes], deadline: float) -> tuple[int, int]:
        async def body() -> tuple[int, int]:
            get = self._db.get
            done = found = 0
            for key in keys:
                if await get(key) is not None:
                    found += 1
                done += 1
                if not done % _CLOCK_EVERY and time.perf_counter() >= deadline:
                    break
            return done, found

        return self._run(body())

    def scan_all(self, deadline: float) -> int:
        async def body() -> int:
            it = await self._iterator()
            n = 0
            while rows := await it.next_batch(1024):
                n += len(rows)
                if time.perf_counter() >= deadline:
                    break
            return n

        return self._run(body())

    async def _put_durable_many(self, pairs: Iterable[Pair], deadline: float) -> int:
        n = 0
        for key, value in pairs:
            await self._put_durable(key, value)
            n += 1
            if time.perf_counter() >= deadline:
                break
        return n

    def put_durable_many(self, pairs: Iterable[Pair], deadline: float) -> int:
        return self._run(self._put_durable_many(pairs, deadline))

    def rmw_many(
        self,
        key_pairs: Iterable[tuple[bytes, bytes]],
        deadline: float,
        *,
        durable: bool,
        isolation: str = SERIALIZABLE,
        pause: bool = False,
    ) -> tuple[int, int]:
        async def body() -> tuple[int, int]:
            commits = aborts = 0
            for k1, k2 in key_pairs:
                while not await self._rmw(k1, k2, durable, isolation):
                    aborts += 1
                    if time.perf_counter() >= deadline:
                        return commits, aborts
                commits += 1
                if time.perf_counter() >= deadline:
                    break
            return commits, aborts

        return self._run(body())

    def put_durable_threads(self, streams: Sequence[Iterable[Pair]], deadline: float) -> int:
        async def body() -> int:
            counts = await asyncio.gather(*(self._put_durable_many(s, deadline) for s in streams))
            return sum(counts)

        return self._run(body())


#: every store the benchmark knows, in table order (kvstore first)
STORES: dict[str, type[Store]] = {
    cls.name: cls for cls in (KvStore, SqliteStore, LmdbStore, RocksStore, SlateDBStore)
}
