"""The table-data step of a commit: every changed table rebased at the head."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import kvstore
from lakehouse import codec, keys
from lakehouse.data.rebase import check_reads, rebase
from lakehouse.data.table import FileState, LazyFiles
from lakehouse.errors import IncompatibleConflict
from lakehouse.model import TableChange, TableDef, VersionInfo

if TYPE_CHECKING:
    from lakehouse.services import LakehouseServices, TransactionState


def _same_table(ktx: kvstore.Transaction, txn: TransactionState, d: TableDef) -> None:
    """Rows belong to one incarnation of a table: a table dropped and created again
    under the same name meanwhile is another table (IncompatibleConflict)."""
    base = txn._base_bytes.get(("table", d.qualified_name))
    if base is None:
        return  # created by this transaction
    raw = ktx.get(keys.table_key(d.namespace, d.name))
    head = None if raw is None else codec.decode_def(raw)
    if not isinstance(head, TableDef) or head.table_id != d.table_id:
        raise IncompatibleConflict(
            f"table {d.qualified_name} was dropped (and maybe created again) after this "
            "transaction began; its row changes cannot apply to another table",
            objects=(("table", d.qualified_name),),
        )


def _base(txn: TransactionState, ns: str, t: str) -> Mapping[str, FileState]:
    """The table's files at the transaction's begin version: loaded already if a read
    needed them all, else looked up one by one."""
    loaded = txn._base_file_cache.get((ns, t))
    if loaded is not None:
        return loaded
    return LazyFiles(txn._snap.get, ns, t)


def rebase_all(
    lh: LakehouseServices,
    ktx: kvstore.Transaction,
    txn: TransactionState,
    records: Sequence[VersionInfo],
) -> tuple[list[tuple[bytes, bytes | None]], list[TableChange]]:
    """Keys to write and record entries for every table whose rows ``txn`` changed."""
    writes: list[tuple[bytes, bytes | None]] = []
    changes: list[TableChange] = []
    for (ns, t), w in sorted(txn._table_writes.items()):
        if w.is_empty():
            continue
        d = txn._lookup("table", ns, t)
        if not isinstance(d, TableDef):
            continue  # dropped later in the same transaction
        if records:
            _same_table(ktx, txn, d)
        reads = txn._data_reads.get((ns, t), [])
        kv, change = rebase(ktx, lh._data, d, w, _base(txn, ns, t), reads, records)
        writes.extend(kv)
        changes.append(dataclasses.replace(change, table_id=d.table_id))
    for (ns, t), reads in sorted(txn._data_reads.items()):
        wr = txn._table_writes.get((ns, t))
        if wr is not None and not wr.is_empty():
            continue  # checked with its writes above
        d = txn._lookup("table", ns, t)
        if isinstance(d, TableDef) and records:
            check_reads(ktx, lh._data, d, _base(txn, ns, t), reads, records)
    return writes, changes
