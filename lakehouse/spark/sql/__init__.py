"""Spark SQL over a lakehouse: :func:`sql` and :class:`SqlSession`.

Everything here runs on the driver: each statement is parsed with sqlglot's
Spark dialect; a query's lakehouse table references become the DataFrames
``lakehouse.spark.read`` gives (executors read the files) and Spark runs the
query; DML, DDL and lakehouse statements go through the Python calls
(``lakehouse.spark.write/delete/update/merge``, the lakehouse's own
transactions); anything naming no lakehouse object is handed to
``spark.sql`` unchanged.

=================  ==========================================================
module             what it does
=================  ==========================================================
``context``        :class:`Context`: lakehouse, SparkSession, open transaction
``names``          table names (``ns.t``) and the "unsupported" error
``query``          queries: lakehouse references -> DataFrames, run by Spark
``statements``     split a text into statements, dispatch each to its handler
``session``        :class:`SqlSession`: ``BEGIN`` / ``COMMIT`` / ``ROLLBACK``
``dml``            ``INSERT`` / ``DELETE`` / ``UPDATE``
``merge``          ``MERGE INTO``
``ddl``            ``CREATE`` / ``DROP`` / ``ALTER``
``clauses``        column types, ``PARTITIONED BY``, ``TBLPROPERTIES``, refused clauses
``catalog``        ``SHOW`` / ``DESCRIBE``
``history``        ``DESCRIBE HISTORY``: versions as Delta's operations
``values``         result frames of literals (no job), SQL literals
``procedures``     ``CALL system.rollback / compact / expire_versions``
``words``          a token cursor for statements sqlglot leaves as commands
=================  ==========================================================
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession

from lakehouse.spark.sql.context import Context
from lakehouse.spark.sql.session import SqlSession, run_text

__all__ = ["Context", "SqlSession", "sql"]


def sql(lh: Any, spark: SparkSession, text: str, *, txn: Any = None) -> DataFrame:
    """Run the Spark SQL statements of ``text`` (``;``-separated) over ``lh``; the
    last statement's result.

    Every statement is parsed before any runs (a syntax error anywhere:
    ValueError, nothing run). Lakehouse tables are named ``ns.t``; queries may
    time travel (``ns.t VERSION AS OF 7``, ``ns.t TIMESTAMP AS OF '...'`` in the
    Spark session's time zone). Without ``txn`` each statement commits on its own
    (a complete ``BEGIN ... COMMIT`` inside ``text`` commits once); with
    ``txn`` (a lakehouse Transaction) every statement joins it and nothing is
    committed here. ``BEGIN``/``COMMIT``/``ROLLBACK`` spanning calls need a
    :class:`SqlSession`.

    >>> lhs.sql(lh, spark, "SELECT count(*) FROM sales.orders VERSION AS OF 3")  # doctest: +SKIP
    """
    return run_text(lh, spark, text, txn=txn)
