"""Spark SQL over a lakehouse: temporary views named after its tables.

Python data sources get no ``VERSION AS OF`` (that needs a JVM catalog), and
Spark accepts only single-part names for temporary views, so a table
``sales.orders`` becomes the view `` `sales.orders` `` (one identifier, dot
included: quote it in SQL), and a version of it `` `sales.orders@v3` ``::

    register_views(lh, spark)              # `sales.orders` ... at the latest version
    register_views(lh, spark, version=3)   # `sales.orders@v3` ... at version 3
    spark.sql("SELECT count(*) FROM `sales.orders@v3`")

Time travel in SQL is then a choice of view name. The lakehouse's own views
(SQL text) are registered too when Spark can run them: table references
``ns.t`` in their SQL are rewritten (with sqlglot) to the matching view
names; a view whose SQL Spark rejects is skipped with a warning.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import SparkSession

from lakehouse.spark.location import location_of
from lakehouse.spark.reader import scan_frame
from lakehouse.spark.session import configure
from lakehouse.spark.writer import quote_ident

log = logging.getLogger("lakehouse.spark")


def view_name(table: str, version: int | None = None) -> str:
    """The temporary view name of ``"ns.table"`` (at ``version``), unquoted."""
    return table if version is None else f"{table}@v{version}"


def register_views(
    lh: Any,
    spark: SparkSession,
    *,
    version: int | None = None,
    timestamp: Any = None,
    namespaces: list[str] | None = None,
    sql_views: bool = True,
) -> list[str]:
    """Register a temporary view per table (and per lakehouse view) of ``lh``.

    Latest version: names ``ns.table``; with ``version`` (or ``timestamp``,
    resolved to the version current then): ``ns.table@vN``. Returns the view
    names registered (quote them in SQL: `` `ns.table` ``).
    """
    if version is not None and timestamp is not None:
        raise ValueError("give version or timestamp, not both")
    configure(spark)
    loc = location_of(lh)
    suffixed = version is not None or timestamp is not None
    view = (
        lh.at_time(timestamp)
        if timestamp is not None
        else lh.at_version(lh.version if version is None else version)
    )
    names: list[str] = []
    with view:
        at = view.version if suffixed else None
        wanted = view.list_namespaces() if namespaces is None else list(namespaces)
        for ns in wanted:
            for t in view.list_tables(ns):
                q = f"{ns}.{t}"
                frame = scan_frame(spark, view.scan_plan(q), view.describe_table(q).schema, loc)
                frame.createOrReplaceTempView(quote_ident(view_name(q, at)))
                names.append(view_name(q, at))
        if sql_views:
            for ns in wanted:
                for v in view.list_views(ns):
                    q = f"{ns}.{v}"
                    d = view.describe_view(q)
                    if _register_sql(spark, view_name(q, at), d.sql, at):
                        names.append(view_name(q, at))
    return names


def _register_sql(spark: SparkSession, name: str, sql: str, version: int | None) -> bool:
    try:
        import sqlglot
        from sqlglot import exp

        from lakehouse.spark.sqltext import canonical

        tree = sqlglot.parse_one(canonical(sql) or sql, read="spark")  # 'it''s': one literal

        def rename(node: Any) -> Any:
            if isinstance(node, exp.Table) and node.db and not node.catalog:
                ident = exp.to_identifier(view_name(f"{node.db}.{node.name}", version), quoted=True)
                return exp.Table(this=ident, alias=node.args.get("alias"))
            return node

        body = tree.transform(rename).sql(dialect="spark")
        spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {quote_ident(name)} AS {body}")
        return True
    except Exception as exc:  # the view's SQL is not something this Spark can run
        log.warning("lakehouse view %s not registered in Spark: %s", name, str(exc)[:200])
        return False
