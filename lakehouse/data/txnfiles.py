"""Whole-table operations of a transaction: restore a table, clone a table.

Both re-add files of a version (older, or the transaction's own view) to a
table without copying them: the files belong to the versions that wrote
them, so the transaction never owns or deletes them (see
:mod:`lakehouse.data.buffer`).
"""

from __future__ import annotations

import uuid
from dataclasses import replace

from lakehouse.data import keyindex
from lakehouse.data.buffer import TableData
from lakehouse.data.table import file_key_id
from lakehouse.model import DataOp


def restore_table(buf: TableData, table: str, version: int) -> None:
    """The table's definition, files and deletion vectors as of ``version``."""
    defs = buf.defs
    defs.check_usable()
    ns, t = defs.qualified(table, "table name")
    with buf.ctx.at_version(version) as old:
        d = old.describe_table(table)
        old_files = old.file_states(table)
    cur = defs.lookup("table", ns, t)
    if cur is None:
        defs.check_free(ns, t)
    defs.set_table(ns, t, d)
    w = buf.write(ns, t)
    w.note(DataOp.RESTORE)
    for f, _ in buf.files(ns, t) if cur is not None else []:
        w.remove(file_key_id(f), f)
    for f, dv in old_files:
        w.removed.pop(file_key_id(f), None)
        w.add(f, owned=False, dv=dv)
    if d.primary_key:  # the index as the restored rows say
        keyindex.rebuild(buf, d, w)


def clone_table(buf: TableData, source: str, target: str, version: int | None) -> None:
    """A new table ``target`` sharing ``source``'s files (at ``version``, or now)."""
    defs = buf.defs
    defs.check_usable()
    sns, st = defs.qualified(source, "table name")
    ns, t = defs.qualified(target, "table name")
    if version is None:
        d = defs.describe_table(source)
        files = buf.files(sns, st)
        buf.note_read(d, None)
    else:
        with buf.ctx.at_version(version) as old:
            d = old.describe_table(source)
            files = old.file_states(source)
    defs.check_free(ns, t)
    table_id = uuid.UUID(int=buf.ctx.rng_bits(128), version=4).hex
    defs.set_table(ns, t, replace(d, namespace=ns, name=t, table_id=table_id))
    w = buf.write(ns, t)
    w.note(DataOp.APPEND)
    for f, dv in files:
        w.add(f, owned=False, dv=dv)
    if d.primary_key:  # a new table id: a new index
        keyindex.rebuild(buf, defs.describe_table(target), w)
