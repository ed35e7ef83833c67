"""The benchmark's adapter for SlateDB (see :mod:`kvstore.bench.adapters`).

A local directory through SlateDB's ``file:///`` object store; every call is
awaited on one asyncio event loop owned by the adapter, and the timed loops
are overridden to stay on that loop. The load awaits ``write(batch)`` then
flushes the WAL and the memtable; a durable put is ``put`` +
``flush_with_options(WAL)`` + ``await_durable()`` (awaiting the handle alone
waits for the 100 ms ``flush_interval``); the multi-threaded durable workload
runs that as concurrent tasks on the same loop. Note that SlateDB's local
object store (``object_store``'s LocalFileSystem) never calls fsync or
fdatasync (checked with strace): its "durable" means written to the OS page
cache, so its durable-put numbers carry no sync cost. Transactions:
``begin(IsolationLevel.SERIALIZABLE_SNAPSHOT)``, awaited
``get``/``put``/``commit``, retried on ``Error.Transaction``; durable adds the
WAL flush + ``await_durable()`` on the commit's handle. Not run on the
overwrite workload (1M single awaited puts at ~8k/s would take minutes).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Coroutine, Iterable, Iterator, Sequence
from typing import Any, ClassVar, cast

from kvstore.bench.adapters import CLOCK_EVERY, SERIALIZABLE, Pair, Store, T, incr


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
        return cast("bytes | None", self._run(self._db.get(key)))

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
                if not done % CLOCK_EVERY and time.perf_counter() >= deadline:
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
