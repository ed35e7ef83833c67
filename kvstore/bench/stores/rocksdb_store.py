"""The benchmark's adapter for RocksDB (rocksdict; see :mod:`kvstore.bench.adapters`).

Raw mode, default options. The load writes batches with the WAL on and no
sync, then ``flush()`` + ``flush_wal(sync=True)``; durable puts use
``WriteOptions.sync = True``; non-durable single puts use the default
``WriteOptions`` (WAL, no sync). rocksdict has no (optimistic) transactions,
so the transaction workloads are n/a.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import ClassVar, cast

from kvstore.bench.adapters import Pair, Store


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
