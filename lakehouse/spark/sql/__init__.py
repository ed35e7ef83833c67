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
``catalog``        ``SHOW`` / ``DESCRIBE`` / ``CALL system.*``
=================  ==========================================================
"""

from __future__ import annotations

from lakehouse.spark.sql.context import Context

__all__ = ["Context"]
