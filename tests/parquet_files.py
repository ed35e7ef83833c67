"""Tables whose writes make Parquet files, for tests whose point is the files.

Small writes are inlined by default (API.md "Table layout",
:mod:`lakehouse.data.inline`): their rows live in the kvstore, in no file in
storage. A test about data files in storage (garbage collection, orphans,
damage to a file's bytes, ranged reads, file counts, compaction inputs)
creates its table with ``properties=PARQUET`` or calls :func:`parquet_only`,
so that every write still makes a Parquet file; the assertion stays what it
was.
"""

from __future__ import annotations

from typing import Any

#: table properties that turn inlining off
PARQUET = {"inline.max_rows": "0"}


def parquet_only(h: Any, *tables: str) -> None:
    """Turn inlining off for ``tables`` of lakehouse ``h`` (one commit)."""
    with h.begin() as txn:
        for t in tables:
            txn.alter_table(t, set_properties=PARQUET)
