"""Every store the benchmark knows: one adapter module each, and the registry.

:data:`STORES` maps a store's name to its adapter class, in table order
(kvstore first): kvstore (:mod:`.kvstore_store`), sqlite3 (:mod:`.sqlite_store`),
LMDB (:mod:`.lmdb_store`), RocksDB through rocksdict (:mod:`.rocksdb_store`)
and SlateDB (:mod:`.slatedb_store`). Each module's docstring says how its
adapter maps durability and transactions onto that store's own API (the
one-line ``durability`` the report prints is on each class); the interface
they all implement is :class:`kvstore.bench.adapters.Store`.
"""

from __future__ import annotations

from kvstore.bench.adapters import Store
from kvstore.bench.stores.kvstore_store import KvStore
from kvstore.bench.stores.lmdb_store import LmdbStore
from kvstore.bench.stores.rocksdb_store import RocksStore
from kvstore.bench.stores.slatedb_store import SlateDBStore
from kvstore.bench.stores.sqlite_store import SqliteStore

__all__ = ["STORES", "KvStore", "LmdbStore", "RocksStore", "SlateDBStore", "SqliteStore"]

#: every store the benchmark knows, in table order (kvstore first)
STORES: dict[str, type[Store]] = {
    cls.name: cls for cls in (KvStore, SqliteStore, LmdbStore, RocksStore, SlateDBStore)
}
