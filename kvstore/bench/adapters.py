"""One small adapter per store, all behind :class:`Store`.

Each adapter maps the benchmark's few operations onto its store's ordinary
API. Optional packages are imported in :meth:`Store.open`, so this module
imports without them; :meth:`Store.missing` says why a store cannot run.

Durability as each adapter implements it (``durability`` on each class):

* kvstore: ``put(durable=True)`` (WAL fsync, group commit); the load writes
  ``durable=False`` batches and ends with ``db.flush()``.
* sqlite3: WAL journal mode. Durable writes use ``synchronous=FULL`` (the WAL
  is fsynced at every commit; ``NORMAL`` would not be durable in WAL mode);
  the load uses ``synchronous=OFF`` and ends with ``synchronous=FULL`` plus
  ``wal_checkpoint(TRUNCATE)``, which fsyncs the WAL and the database file.
  One connection per thread, 64 MiB page cache (kvstore's block cache size).
* LMDB: the load opens the environment with ``sync=False`` and ends with
  ``env.sync(True)``; durable writes use ``sync=True`` (one write transaction
  per put, fdatasync at commit; writers serialize on LMDB's writer lock).
* RocksDB (rocksdict, raw mode, default options): the load writes batches
  with the WAL on and no sync, then ``flush()`` + ``flush_wal(sync=True)``;
  durable puts use ``WriteOptions.sync = True``.
* SlateDB (local directory through its ``file:///`` object store): every call
  is awaited on one asyncio event loop owned by the adapter. The load awaits
  ``write(batch)`` then flushes the WAL and the memtable; a durable put is
  ``put`` + ``flush_with_options(WAL)`` + ``await_durable()`` (awaiting the
  handle alone waits for the 100 ms ``flush_interval``); the multi-threaded
  durable workload runs that as concurrent tasks on the same loop. Note that
  SlateDB's local object store (``object_store``'s LocalFileSystem) never
  calls fsync or fdatasync (checked with strace): its "durable" means written
  to the OS page cache, so its durable-put numbers carry no sync cost.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sqlite3
import threading
import time
from collections.abc import Coroutine, Iterable, Iterator, Sequence
from typing import Any, ClassVar, TypeVar, cast

Pair = tuple[bytes, bytes]
T = TypeVar("T")

#: how often (in operations) a cheap loop looks at the clock
_CLOCK_EVERY = 256


class Store:
    """The operations the workloads need, on one store at ``path``."""

    name: ClassVar[str]
    package: ClassVar[str]
    durability: ClassVar[str]

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
        counts = [0] * len(streams)
        errors: list[BaseException] = []
        barrier = threading.Barrier(len(streams))

        def worker(i: int) -> None:
            try:
                barrier.wait()
                counts[i] = self.put_durable_many(streams[i], deadline)
            except BaseException as exc:  # surfaced in the calling thread
                errors.append(exc)

        threads = [
            threading.Thread(target=worker, args=(i,), name=f"bench-put-{i}")
            for i in range(len(streams))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return sum(counts)


class KvStore(Store):
    name = "kvstore"
    package = "kvstore"
    durability = "put(durable=True): WAL fsync with group commit; load: durable=False + flush()"

    def open(self, *, bulk: bool = False) -> None:
        import kvstore

        self._kv = kvstore
        self._db = kvstore.open(self.path)

    def close(self) -> None:
        self._db.close()

    def write_batch(self, pairs: Sequence[Pair]) -> None:
        batch = self._kv.WriteBatch()
        for key, value in pairs:
            batch.put(key, value)
        self._db.write(batch, durable=False)

    def finish_load(self) -> None:
        self._db.flush()

    def put_durable(self, key: bytes, value: bytes) -> None:
        self._db.put(key, value)

    def get(self, key: bytes) -> bytes | None:
        return self._db.get(key)

    def scan(self) -> Iterator[Pair]:
        return self._db.scan()


class SqliteStore(Store):
    name = "sqlite3"
    package = "sqlite3"
    durability = (
        "WAL mode; durable: synchronous=FULL; load: synchronous=OFF, then FULL + "
        "wal_checkpoint(TRUNCATE); a connection per thread"
    )

    def open(self, *, bulk: bool = False) -> None:
        os.makedirs(self.path, exist_ok=True)
        self._file = os.path.join(self.path, "kv.sqlite")
        self._sync = "OFF" if bulk else "FULL"
        self._local = threading.local()
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

    def get(self, key: bytes) -> bytes | None:
        row = self._conn().execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def scan(self) -> Iterator[Pair]:
        return iter(self._conn().execute("SELECT k, v FROM kv ORDER BY k"))


class LmdbStore(Store):
    name = "lmdb"
    package = "lmdb"
    durability = "durable: sync=True, a write txn per put; load: sync=False, then env.sync(True)"

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
    durability = "durable: WriteOptions.sync=True; load: WAL without sync, then flush + flush_wal"

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
        "object store never fsyncs, so its durable writes carry no sync cost"
    )

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

    def put_durable_threads(self, streams: Sequence[Iterable[Pair]], deadline: float) -> int:
        async def body() -> int:
            counts = await asyncio.gather(*(self._put_durable_many(s, deadline) for s in streams))
            return sum(counts)

        return self._run(body())


#: every store the benchmark knows, in table order (kvstore first)
STORES: dict[str, type[Store]] = {
    cls.name: cls for cls in (KvStore, SqliteStore, LmdbStore, RocksStore, SlateDBStore)
}
