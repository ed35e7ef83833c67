"""Raw lakehouse state for tests that need what no operation writes.

A data-file record whose bytes are not a Parquet file (a tool, or an older
writer, can leave one) is put in a table's state through the public
``Transaction.apply_state``, the call rollback and export build versions with.
"""

from __future__ import annotations

from typing import Any

from lakehouse import codec, keys
from lakehouse.model import DataFile


def record_raw_file(lh: Any, txn: Any, table: str, file_id: str, f: DataFile) -> None:
    """Put data-file record ``f`` into ``table``'s state as given, checking no file."""
    ns, t = table.split(".")
    tk = keys.table_key(ns, t)
    d = lh.kvstore.get(tk)
    fk = keys.data_file_key(ns, t, file_id)
    txn.apply_state({tk: d, fk: codec.encode_data_file(f)}, current={tk: d})
