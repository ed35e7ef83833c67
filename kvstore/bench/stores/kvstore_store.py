"""The benchmark's adapter for kvstore itself (see :mod:`kvstore.bench.adapters`).

Durable puts are ``put(durable=True)`` (WAL fsync, group commit); the load
opens the store with background compaction off, writes ``durable=False``
batches and ends with ``db.compact()`` (flush, then merge everything into one
sorted run), timed as part of the load. Transactions:
``db.transaction(Isolation.SERIALIZABLE)`` (or SNAPSHOT), ``commit(durable=...)``,
retried on ``TransactionConflict``. kvstore runs every row, including the
kvstore-only ones (long-open transactions, ``compact()``), and reports its own
counters (:meth:`KvStore.stats`) for the notes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from kvstore.bench.adapters import SERIALIZABLE, Pair, Store, incr


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
        running: int = sum(t.status == "open" for t in txns)
        running = min(running, int(self._db.stats()["transactions_running"]))
        for t in txns:
            t.rollback()
        return running

    def get(self, key: bytes) -> bytes | None:
        return self._db.get(key)

    def scan(self) -> Iterator[Pair]:
        return self._db.scan()
