"""lakehouse: a TrinityLake-style lakehouse whose tree and versions live in kvstore.

>>> import lakehouse, pyarrow as pa
>>> lh = lakehouse.open("memory://doc-lakehouse")
>>> with lh.begin() as txn:
...     txn.create_namespace("sales")
...     txn.create_table("sales.orders", pa.schema([("id", pa.int64())]))
>>> lh.version
1
>>> lh.at_version(0).list_namespaces()
[]
>>> lh.close()

See ``docs/lakehouse.md`` for the key layout, the commit protocol, time
travel, rollback, export and expiration.
"""

from __future__ import annotations

from lakehouse.data.scan import ScanFile
from lakehouse.errors import (
    AlreadyExists,
    ClosedError,
    CommitConflict,
    CorruptionError,
    DataFileMissing,
    DuplicateKey,
    FencedError,
    IncompatibleConflict,
    LakehouseError,
    MergeKeyError,
    NamespaceNotEmpty,
    NotFound,
    ReadOnlyError,
    RetryableConflict,
    StorageError,
    TransactionExpired,
    VersionExpired,
    WriterActive,
)
from lakehouse.lakehouse import Lakehouse, open
from lakehouse.model import (
    Column,
    ColumnStats,
    CompactResult,
    DataFile,
    Isolation,
    LakehouseDef,
    MergeResult,
    NamespaceDef,
    ObjectChange,
    TableChange,
    TableDef,
    TableStats,
    VersionInfo,
    ViewDef,
)
from lakehouse.options import Options
from lakehouse.reader import LakehouseReader, open_reader
from lakehouse.txn import Transaction
from lakehouse.view import LakehouseView

__all__ = [
    "AlreadyExists",
    "ClosedError",
    "Column",
    "ColumnStats",
    "CommitConflict",
    "CompactResult",
    "CorruptionError",
    "DataFile",
    "DataFileMissing",
    "DuplicateKey",
    "FencedError",
    "IncompatibleConflict",
    "Isolation",
    "Lakehouse",
    "LakehouseDef",
    "LakehouseError",
    "LakehouseReader",
    "LakehouseView",
    "MergeKeyError",
    "MergeResult",
    "NamespaceDef",
    "NamespaceNotEmpty",
    "NotFound",
    "ObjectChange",
    "Options",
    "ReadOnlyError",
    "RetryableConflict",
    "ScanFile",
    "StorageError",
    "TableChange",
    "TableDef",
    "TableStats",
    "Transaction",
    "TransactionExpired",
    "VersionExpired",
    "VersionInfo",
    "ViewDef",
    "WriterActive",
    "open",
    "open_reader",
]

__version__ = "0.1.0"
