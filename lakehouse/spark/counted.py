"""``count()`` of a table read, answered from the table's metadata.

The DataFrame :func:`lakehouse.spark.read` returns (without ``where``) knows
its exact number of rows before any job: the scan plan has each data file's
row count and deletion vector, so the live rows are ``sum(rows - deleted)``.
Its ``count()`` returns that, as Delta answers ``COUNT(*)`` from its log
(``optimizeMetadataQuery``) and Spark a plain Parquet count from the
footers. Only that call on that object: every transformation (``where``,
``select``, ``groupBy(...).count()``, SQL over a view) returns an ordinary
DataFrame that counts its rows in Spark, and so does a cached one
(``df.cache().count()`` is how users materialise a cache).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.classic.dataframe import DataFrame as Classic


def with_live_count(frame: DataFrame, files: Sequence[Any]) -> DataFrame:
    """``frame`` (the rows of ``files``, the scan plan it was built from) with a
    ``count()`` from the plan; ``frame`` itself where it is not a classic DataFrame
    (Spark Connect's has no JVM object to wrap: its ``count()`` runs in Spark)."""
    if type(frame) is not Classic:
        return frame
    live = sum(int(f.rows) - len(f.deleted) for f in files)
    return _Counted(frame, live)


class _Counted(Classic):
    """A classic DataFrame whose own ``count()`` is known without a job."""

    def __init__(self, frame: DataFrame, live: int) -> None:
        super().__init__(frame._jdf, frame.sparkSession)
        self._lh_live = live

    def count(self) -> int:
        if self.is_cached:  # materialise the cache, as a count on it is meant to
            return int(super().count())
        return self._lh_live
