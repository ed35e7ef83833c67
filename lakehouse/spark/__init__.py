"""lakehouse.spark: PySpark reads and writes lakehouse tables (needs the ``spark`` extra).

The lakehouse store lives in the driver process; Spark executors write and
read the Parquet data files; the driver commits. Measured on PySpark 4.3, a
Python DataSource's ``commit()``, ``reader()`` and ``partitions()`` run in
Python workers the JVM starts, never in the driver's interpreter, so they
cannot reach the open store: the driver orchestrates every call itself.

>>> import lakehouse, lakehouse.spark as lhs                    # doctest: +SKIP
>>> spark = lhs.local_session()                                 # doctest: +SKIP
>>> lh = lakehouse.open("./lh")                                 # doctest: +SKIP
>>> lhs.write(lh, df, "sales.orders")                           # doctest: +SKIP
7
>>> lhs.read(lh, spark, "sales.orders", version=5).count()      # doctest: +SKIP
>>> lhs.delete(lh, spark, "sales.orders", "status = 'void'")    # doctest: +SKIP
>>> lhs.update(lh, spark, "sales.orders", "id = 7", {"qty": "qty + 1"})  # doctest: +SKIP
>>> lhs.merge(lh, changes, "sales.orders", on=["order_id"])     # doctest: +SKIP
>>> lhs.register_views(lh, spark, version=5)                    # doctest: +SKIP
>>> spark.sql("SELECT count(*) FROM `sales.orders@v5`")         # doctest: +SKIP
>>> lhs.sql(lh, spark, "SELECT count(*) FROM sales.orders VERSION AS OF 5")  # doctest: +SKIP

=====================  ===============================================================
module                 what it does
=====================  ===============================================================
``ops``                write / read / delete: plan on the driver, run the jobs,
                       record and commit
``update``             update by a Spark SQL condition and expressions: one scan;
                       few rows written by the driver (inlined), many by executors
``merge``              merge by key: a small source checked and written by the
                       driver after one matching job; on the primary key through
                       the key index (no target scan)
``merge_clauses``      merge by Delta's WHEN clauses (conditions, update / delete /
                       insert, first match wins): one join, then driver or executors
``merge_plan``         the WHEN clauses (``MergeClause``) checked, their names
                       resolved, the merge's actions DataFrame built (driver only)
``positions``          rows found by executors come back as one bitmap per
                       (file, 32,768 rows), decoded into roaring bitmaps
``types``              Arrow <-> Spark types, safe widening, DataFrame-vs-table matching
``writer``             executors write Parquet files (Spark's writer on local disk,
                       pyarrow in Python tasks elsewhere); retries leave no duplicate
``partitions``         partitioned tables: each row's partition as a hidden column
                       (Spark expressions, an Arrow UDF for bucket), the rebalance
``reader``             a scan plan as a DataFrame: Spark's Parquet reader, or
                       Python tasks on S3; inlined rows decoded on the driver
``deletions``          deletion vectors in the JVM scan: a row-index filter for a
                       few runs, else a broadcast anti-join with bucket bitmaps
``counted``            a read's own ``count()`` answered from the scan plan
``views``              temporary views ``ns.table`` / ``ns.table@vN`` for Spark SQL
``sql``                Spark SQL with lakehouse tables (package): queries with
                       ``VERSION``/``TIMESTAMP AS OF``, DML, DDL, ``SHOW``/``CALL``
``sql.query``          a query's lakehouse references -> ``read`` DataFrames, run
                       by ``spark.sql``
``sql.statements``     parse a text (sqlglot), dispatch each statement
``sql.session``        ``SqlSession``: ``BEGIN`` / ``COMMIT`` / ``ROLLBACK``
``location``           where the data directory is, as driver and tasks reach it
``jobs``               typed errors for failed jobs (:class:`SparkJobError`)
``session``            a local SparkSession with the settings the lakehouse needs
``bench``              write/read benchmark against plain ``df.write.parquet``;
                       ``--rowops`` (``bench_rowops``): delete, update, merge and
                       reads after deletes against plain Spark; ``--sql``
                       (``bench_sql``): SQL statements against the Python calls
=====================  ===============================================================

See docs/spark.md.
"""

from __future__ import annotations

from lakehouse.spark.jobs import SparkJobError
from lakehouse.spark.merge import merge
from lakehouse.spark.merge_clauses import MergeClause
from lakehouse.spark.ops import delete, read, write
from lakehouse.spark.session import SparkConfigError, configure, local_session
from lakehouse.spark.sql import SqlSession, sql
from lakehouse.spark.update import update
from lakehouse.spark.views import register_views

__all__ = [
    "MergeClause",
    "SparkConfigError",
    "SparkJobError",
    "SqlSession",
    "configure",
    "delete",
    "local_session",
    "merge",
    "read",
    "register_views",
    "sql",
    "update",
    "write",
]
