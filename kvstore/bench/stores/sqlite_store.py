"""The benchmark's adapter for sqlite3 (see :mod:`kvstore.bench.adapters`).

WAL journal mode. Durable writes use ``synchronous=FULL`` (the WAL is fsynced
at every commit; ``NORMAL`` would not be durable in WAL mode); the load uses
``synchronous=OFF`` and ends with ``synchronous=FULL`` plus
``wal_checkpoint(TRUNCATE)``, which fsyncs the WAL and the database file. One
connection per thread, 64 MiB page cache (kvstore's block cache size).
Transactions: ``BEGIN IMMEDIATE`` ... ``COMMIT`` (writers take the lock up
front, so they wait instead of aborting); ``synchronous=FULL`` when durable,
``OFF`` when not. Non-durable single puts: one ``INSERT OR REPLACE`` each, a
``COMMIT`` every 1000.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from typing import ClassVar

from kvstore.bench.adapters import KVSTORE_ONLY, SERIALIZABLE, Pair, Store, incr


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
        "txn_open": KVSTORE_ONLY,
        "compact": KVSTORE_ONLY,
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
