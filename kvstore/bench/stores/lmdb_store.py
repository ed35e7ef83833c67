"""The benchmark's adapter for LMDB (the ``lmdb`` package; see :mod:`kvstore.bench.adapters`).

The load opens the environment with ``sync=False`` and ends with
``env.sync(True)``; durable writes use ``sync=True`` (one write transaction per
put, fdatasync at commit; writers serialize on LMDB's writer lock).
Transactions: one write transaction (LMDB's single writer makes it
serializable), ``sync`` as for puts; non-durable single puts: a write
transaction per put with ``sync=False``. Point gets run in one read
transaction, LMDB's idiom.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

from kvstore.bench.adapters import CLOCK_EVERY, SERIALIZABLE, Pair, Store, incr


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
                if not done % CLOCK_EVERY and time.perf_counter() >= deadline:
                    break
            return done, found

    def scan(self) -> Iterator[Pair]:
        with self._env.begin() as txn:
            yield from txn.cursor().iternext()
