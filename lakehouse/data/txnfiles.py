"""A transaction's data files and whole-table operations (restore, clone).

Files a transaction writes are *owned* by it from the moment their name is
chosen: registered as in flight with the lakehouse (so
``remove_orphan_files`` never takes them), and deleted again if the
transaction does not commit. Files it adopts (written by Spark executors)
become owned the same way. Files it re-adds (restore, clone) belong to
older versions and are never deleted by it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from kvstore.objstore import ObjectStore
from lakehouse.data import files as datafiles
from lakehouse.data.conform import conform
from lakehouse.data.pages import check_pages
from lakehouse.data.scan import fetch
from lakehouse.data.table import TableWrite, file_key_id
from lakehouse.errors import CorruptionError
from lakehouse.model import Column, DataFile, TableDef

if TYPE_CHECKING:
    from lakehouse.services import TransactionState

log = logging.getLogger("lakehouse")


def write_data_file(txn: TransactionState, d: TableDef, rows: Any, w: TableWrite) -> DataFile:
    """Write ``rows`` as a new Parquet file of table ``d`` (durable before this returns)."""
    data, footer = datafiles.encode_parquet(rows)
    _, path = txn._new_file_name(d)
    f = datafiles.describe_footer(path, len(data), footer, rows.schema, d.columns, data)
    w.owned.append(path)  # before the write: a failed put may still leave bytes
    txn._ctx.inflight.add(path)
    store = txn._ctx.data
    getattr(store, "put_new", store.put_if_absent)(path, data)  # durable before the commit
    w.add(f, owned=False)
    return f


def adopt_data_file(
    txn: TransactionState, d: TableDef, path: str, w: TableWrite, key_cols: Sequence[Column] = ()
) -> tuple[DataFile, pa.Table | None]:
    """Register a Parquet file someone else wrote under the data directory; with
    ``key_cols``, also return its rows' values of those columns (merge keys)."""
    if not isinstance(path, str) or path.startswith("/") or "://" in path:
        raise ValueError(f"data file paths are relative to the data directory, not {path!r}")
    data = fetch(txn._ctx.data, path)
    pf = datafiles.open_parquet(data, path)  # the footer, parsed once
    conform(pf.schema_arrow.empty_table(), d.schema, f"data file {path}")
    check_pages(data, pf.metadata, path)  # damaged since its write: not recorded as sound
    try:  # the checksums of the bytes in hand (one read of the file, on this process)
        f = datafiles.describe_footer(
            path, len(data), pf.metadata, pf.schema_arrow, d.columns, data
        )
    except ValueError as exc:
        raise CorruptionError(f"data file {path} cannot be adopted: {exc}") from None
    keys = None
    if key_cols:
        schema = pa.schema([d.schema.field(c.name) for c in key_cols])
        keys = datafiles.read_file(data, f, key_cols, schema, None)
    w.add(f, owned=True)
    txn._ctx.inflight.add(path)
    return f, keys


def _delete_all(store: ObjectStore, paths: list[str], what: str) -> None:
    """Delete ``paths`` (best effort: what fails is left for remove_orphan_files)."""
    for path in paths:
        try:
            store.delete(path)
        except OSError as exc:
            log.warning("could not delete %s (%s): %s", path, what, exc)
    paths.clear()


def discard(store: ObjectStore, writes: Iterable[TableWrite]) -> None:
    """Delete the files of a transaction that did not commit."""
    for w in writes:
        _delete_all(store, w.owned, "written by an aborted transaction")


def discard_superseded(store: ObjectStore, writes: Iterable[TableWrite]) -> None:
    """After a commit: delete the files the transaction wrote and then dropped itself."""
    for w in writes:
        _delete_all(store, w.superseded, "written and dropped by the same transaction")


def restore_table(txn: TransactionState, table: str, version: int) -> None:
    """The table's definition, files and deletion vectors as of ``version``."""
    txn._check_usable()
    ns, t = txn._qualified(table, "table name")
    with txn._ctx.at_version(version) as old:
        d = old.describe_table(table)
        old_files = old.file_states(table)
    cur = txn._lookup("table", ns, t)
    if cur is None:
        txn._check_free(ns, t)
    txn._touch("table", ns, t).final = d
    w = txn._table_write(ns, t)
    w.note("restore")
    for f, _ in txn._table_files(ns, t) if cur is not None else []:
        w.remove(file_key_id(f), f)
    for f, dv in old_files:
        w.removed.pop(file_key_id(f), None)
        w.add(f, owned=False, dv=dv)


def clone_table(txn: TransactionState, source: str, target: str, version: int | None) -> None:
    """A new table ``target`` sharing ``source``'s files (at ``version``, or now)."""
    txn._check_usable()
    sns, st = txn._qualified(source, "table name")
    ns, t = txn._qualified(target, "table name")
    if version is None:
        d = txn.describe_table(source)
        files = txn._table_files(sns, st)
        txn._note_data_read(d, None)
    else:
        with txn._ctx.at_version(version) as old:
            d = old.describe_table(source)
            files = old.file_states(source)
    txn._check_free(ns, t)
    table_id = uuid.UUID(int=txn._ctx.rng_bits(128), version=4).hex
    txn._touch("table", ns, t).final = replace(d, namespace=ns, name=t, table_id=table_id)
    w = txn._table_write(ns, t)
    w.note("append")
    for f, dv in files:
        w.add(f, owned=False, dv=dv)
