"""Small results and SQL text built from Python values, shared by the statements
that answer from the lakehouse's metadata (``SHOW``, ``DESCRIBE``, ``DESCRIBE
HISTORY``, ``CALL``).

Runs on the driver. :func:`local_frame` turns rows into a DataFrame that Spark
holds as a local relation (a SQL ``VALUES`` of literals, answered without a
job, so it works under Spark Connect too); :func:`sql_value` and
:func:`sql_string` spell Python values as Spark SQL literals; :func:`ddl_name`
spells a column name as DDL writes it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from lakehouse.spark.sql.context import Context
from lakehouse.spark.writer import quote_ident

_S = T.StringType()
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def local_frame(ctx: Context, schema: T.StructType, rows: list[tuple[Any, ...]]) -> DataFrame:
    """``rows`` as a DataFrame of ``schema`` that Spark holds as a local relation: a
    SQL ``VALUES`` of literals, which Spark's driver answers without a job (a
    DataFrame created from Python objects costs a job each time it is fetched).
    Values: None, str, bool, int, an aware datetime (timestamp) and dict[str, str]."""
    names = ", ".join(quote_ident(f.name) for f in schema)
    if not rows:
        cols = ", ".join(
            f"CAST(NULL AS {f.dataType.simpleString()}) AS {quote_ident(f.name)}" for f in schema
        )
        return ctx.spark.sql(f"SELECT {cols} WHERE FALSE")
    values = ", ".join(
        "(" + ", ".join(sql_value(v, f.dataType) for v, f in zip(row, schema)) + ")" for row in rows
    )
    return ctx.spark.sql(f"SELECT * FROM VALUES {values} AS v({names})")


def text_frame(
    ctx: Context, columns: Sequence[str | T.StructField], rows: list[tuple[Any, ...]]
) -> DataFrame:
    """:func:`local_frame` with columns given by name (a nullable string) or as a
    StructField."""
    fields = [c if isinstance(c, T.StructField) else T.StructField(c, _S, True) for c in columns]
    return local_frame(ctx, T.StructType(fields), rows)


def sql_value(v: Any, dt: T.DataType) -> str:
    """A Spark SQL literal of ``v``, cast to ``dt``."""
    to = dt.simpleString()
    if v is None:
        return f"CAST(NULL AS {to})"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return f"CAST({v} AS {to})"
    if isinstance(v, str):
        return sql_string(v)
    if isinstance(v, datetime):
        micros = (v - _EPOCH) // timedelta(microseconds=1)
        return f"timestamp_micros({micros})"
    if isinstance(v, dict):
        if not v:
            return f"CAST(map() AS {to})"
        inner = ", ".join(f"{sql_string(str(k))}, {sql_string(str(x))}" for k, x in v.items())
        return f"map({inner})"
    raise TypeError(f"no SQL literal for a result value of type {type(v).__name__}")


def sql_string(text: str) -> str:
    """``text`` as a Spark SQL string literal (``'it\\'s'``)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def ddl_name(name: str) -> str:
    """A column name as DDL writes it: bare when it is a plain identifier, else
    backquoted (:func:`~lakehouse.spark.writer.quote_ident`)."""
    return name if _PLAIN.fullmatch(name) else quote_ident(name)
