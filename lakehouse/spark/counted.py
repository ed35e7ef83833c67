"""DataFrames whose answers the driver already has: ``count()`` of a table read,
answered from the table's metadata, and the rows of a statement's result.

The DataFrame :func:`lakehouse.spark.read` returns (without ``where``) knows
its exact number of rows before any job: the scan plan has each data file's
row count and deletion vector, so the live rows are ``sum(rows - deleted)``.
Its ``count()`` returns that, as Delta answers ``COUNT(*)`` from its log
(``optimizeMetadataQuery``) and Spark a plain Parquet count from the
footers. Only that call on that object: every transformation (``where``,
``select``, ``groupBy(...).count()``, SQL over a view) returns an ordinary
DataFrame that counts its rows in Spark, and so does a cached one
(``df.cache().count()`` is how users materialise a cache).

A SQL statement's one-row result (``num_affected_rows``...) is a local
relation; :func:`with_rows` answers its ``collect()``, ``first()``,
``head()``, ``take()`` and ``count()`` from the values it was built from
(Spark's round trip for them costs as much as a small statement's planning).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, Row
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


def with_rows(frame: DataFrame, rows: Sequence[tuple[Any, ...]]) -> DataFrame:
    """``frame`` (a local relation of exactly ``rows``, in its column order) whose
    ``collect()``, ``first()``, ``head()``, ``take()`` and ``count()`` return those
    rows without a round trip to Spark; ``frame`` itself where it is not classic."""
    if type(frame) is not Classic:
        return frame
    return _Answered(frame, [Row(**dict(zip(frame.columns, r, strict=True))) for r in rows])


class _Answered(Classic):
    """A classic DataFrame of a few rows the driver holds."""

    def __init__(self, frame: DataFrame, rows: list[Row]) -> None:
        super().__init__(frame._jdf, frame.sparkSession)
        self._lh_rows = rows

    def collect(self) -> list[Row]:
        return list(self._lh_rows)

    def count(self) -> int:
        return len(self._lh_rows)

    def take(self, num: int) -> list[Row]:
        return list(self._lh_rows[: max(num, 0)])

    def head(self, n: int | None = None) -> Any:
        if n is None:
            return self._lh_rows[0] if self._lh_rows else None
        return self.take(n)

    def first(self) -> Row | None:
        return self._lh_rows[0] if self._lh_rows else None
