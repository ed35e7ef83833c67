"""The table-data step of a commit: every changed table rebased at the head.

Works from the intent alone: its table writes (:class:`TableIntent` values),
the final definition and base bytes of each touched table, the tables its
SERIALIZABLE reads looked at and its base files (``intent.base_files``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import kvstore
from lakehouse import codec, keys
from lakehouse.data.rebase import check_reads, rebase
from lakehouse.errors import IncompatibleConflict
from lakehouse.model import TableChange, TableDef, VersionInfo

if TYPE_CHECKING:
    from lakehouse.intent import CommitServices, TxnIntent


def _same_table(ktx: kvstore.Transaction, intent: TxnIntent, d: TableDef) -> None:
    """Rows belong to one incarnation of a table: a table dropped and created again
    under the same name meanwhile is another table (IncompatibleConflict)."""
    touched = intent.touched.get(("table", d.qualified_name))
    base = None if touched is None else touched.base_bytes
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


def _written_table(intent: TxnIntent, ns: str, t: str) -> TableDef | None:
    """The table's definition at commit (None: dropped later in the same transaction)."""
    touched = intent.touched.get(("table", f"{ns}.{t}"))
    d = None if touched is None else touched.final
    return d if isinstance(d, TableDef) else None


def rebase_all(
    services: CommitServices,
    ktx: kvstore.Transaction,
    intent: TxnIntent,
    records: Sequence[VersionInfo],
) -> tuple[list[tuple[bytes, bytes | None]], list[TableChange]]:
    """Keys to write and record entries for every table whose rows ``intent`` changes."""
    writes: list[tuple[bytes, bytes | None]] = []
    changes: list[TableChange] = []
    for (ns, t), w in sorted(intent.table_writes.items()):
        if w.is_empty():
            continue
        d = _written_table(intent, ns, t)
        if d is None:
            continue  # dropped later in the same transaction
        if records:
            _same_table(ktx, intent, d)
        reads = intent.data_reads.get((ns, t), ())
        base = intent.base_files(ns, t)
        kv, change = rebase(ktx, services.data, d, w, base, reads, records)
        writes.extend(kv)
        changes.append(dataclasses.replace(change, table_id=d.table_id))
    for (ns, t), reads in sorted(intent.data_reads.items()):
        wr = intent.table_writes.get((ns, t))
        if wr is not None and not wr.is_empty():
            continue  # checked with its writes above
        rd = intent.read_tables.get((ns, t))
        if rd is not None and records:
            check_reads(ktx, services.data, rd, intent.base_files(ns, t), reads, records)
    return writes, changes
