"""Arrow table schemas on the Spark side: type mapping and DataFrame matching.

Pure functions over types, no Spark job, so every decision is made on the
driver before any data moves:

* :func:`spark_type` maps a table column's Arrow type to the Spark type it
  reads and writes as (``int8`` → ``ByteType``, ``timestamp[us, tz=UTC]`` →
  ``TimestampType``, ``timestamp[us]`` → ``TimestampNTZType``, ...).
* :func:`jvm_writable` / :func:`jvm_readable`: whether Spark's own Parquet
  writer produces exactly that Arrow type, and whether its reader can read
  it. Tables whose every column is writable (and data on a local disk) take
  the JVM paths; others move data through Python tasks.
* :func:`safe_cast` is the widening rule (independent of
  ``spark.sql.ansi.enabled``): integers to wider integers, to ``double`` when
  they fit its 53-bit mantissa and to decimals with enough integer digits;
  ``float`` to ``double``; decimals to more integer digits and more scale;
  ``NULL`` to anything; nested types element by element.
* :func:`match_columns` is the DataFrame-vs-table matching of docs/api.md: one
  :class:`ColumnPlan` per table column, or ``ValueError`` naming the column.

::

    DataFrame (a int, total decimal(10,2), note string)     table (id long NOT NULL,
         │ match_columns                                        total decimal(12,2),
         ▼                                                      note string, qty int)
    id:    ValueError "missing, not nullable"   (if the DataFrame had no "id")
    total: cast decimal(10,2) → decimal(12,2)   (safe: more integer digits)
    qty:   null                                 (missing, nullable)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

_INT_RANK: dict[type, int] = {T.ByteType: 1, T.ShortType: 2, T.IntegerType: 3, T.LongType: 4}
_INT_DIGITS = {1: 3, 2: 5, 3: 10, 4: 19}
_INT_BITS = {1: 8, 2: 16, 3: 32, 4: 64}


def spark_type(at: pa.DataType, column: str = "?") -> T.DataType:
    """The Spark type of a table column of Arrow type ``at`` (TypeError if none)."""
    if pa.types.is_boolean(at):
        return T.BooleanType()
    if pa.types.is_int8(at):
        return T.ByteType()
    if pa.types.is_int16(at) or pa.types.is_uint8(at):
        return T.ShortType()
    if pa.types.is_int32(at) or pa.types.is_uint16(at):
        return T.IntegerType()
    if pa.types.is_int64(at) or pa.types.is_uint32(at):
        return T.LongType()
    if pa.types.is_uint64(at):
        return T.DecimalType(20, 0)
    if pa.types.is_float16(at) or pa.types.is_float32(at):
        return T.FloatType()
    if pa.types.is_float64(at):
        return T.DoubleType()
    if pa.types.is_decimal(at) and at.precision <= 38:
        return T.DecimalType(at.precision, at.scale)
    if pa.types.is_string(at) or pa.types.is_large_string(at) or pa.types.is_string_view(at):
        return T.StringType()
    if (
        pa.types.is_binary(at)
        or pa.types.is_large_binary(at)
        or pa.types.is_fixed_size_binary(at)
        or pa.types.is_binary_view(at)
    ):
        return T.BinaryType()
    if pa.types.is_date(at):
        return T.DateType()
    if pa.types.is_timestamp(at):
        return T.TimestampType() if at.tz is not None else T.TimestampNTZType()
    if pa.types.is_list(at) or pa.types.is_large_list(at) or pa.types.is_fixed_size_list(at):
        f = at.value_field
        return T.ArrayType(spark_type(f.type, column), f.nullable)
    if pa.types.is_map(at):
        return T.MapType(
            spark_type(at.key_type, column),
            spark_type(at.item_type, column),
            at.item_field.nullable,
        )
    if pa.types.is_struct(at):
        return T.StructType(
            [T.StructField(f.name, spark_type(f.type, column), f.nullable) for f in at]
        )
    if pa.types.is_null(at):
        return T.NullType()
    raise TypeError(f"column {column!r} has type {at}, which Spark cannot represent")


def spark_schema(schema: pa.Schema) -> T.StructType:
    """The Spark schema of a table's Arrow schema."""
    return T.StructType(
        [T.StructField(f.name, spark_type(f.type, f.name), f.nullable) for f in schema]
    )


def arrow_frame(spark: Any, rows: pa.Table) -> Any:
    """``rows`` (Arrow, built on the driver) as a DataFrame of their own schema, also
    when there are none: Spark Connect cannot infer a schema from zero rows."""
    return spark.createDataFrame(rows, spark_schema(rows.schema))


def arrow_type(dt: T.DataType) -> pa.DataType:
    """The Arrow type Spark hands to and expects back from ``mapInArrow``."""
    if isinstance(dt, T.TimestampType):
        return pa.timestamp("us", tz="UTC")
    if isinstance(dt, T.TimestampNTZType):
        return pa.timestamp("us")
    if isinstance(dt, T.ArrayType):
        return pa.list_(pa.field("element", arrow_type(dt.elementType), dt.containsNull))
    if isinstance(dt, T.MapType):
        return pa.map_(arrow_type(dt.keyType), arrow_type(dt.valueType))
    if isinstance(dt, T.StructType):
        return pa.struct([pa.field(f.name, arrow_type(f.dataType), f.nullable) for f in dt])
    simple: dict[type, pa.DataType] = {
        T.BooleanType: pa.bool_(),
        T.ByteType: pa.int8(),
        T.ShortType: pa.int16(),
        T.IntegerType: pa.int32(),
        T.LongType: pa.int64(),
        T.FloatType: pa.float32(),
        T.DoubleType: pa.float64(),
        T.StringType: pa.string(),
        T.BinaryType: pa.binary(),
        T.DateType: pa.date32(),
        T.NullType: pa.null(),
    }
    if isinstance(dt, T.DecimalType):
        return pa.decimal128(dt.precision, dt.scale)
    try:
        return simple[type(dt)]
    except KeyError:
        raise TypeError(f"no Arrow type for Spark type {dt.simpleString()}") from None


def arrow_schema(schema: T.StructType) -> pa.Schema:
    return pa.schema([pa.field(f.name, arrow_type(f.dataType), f.nullable) for f in schema])


def jvm_writable(at: pa.DataType) -> bool:
    """Spark's Parquet writer produces exactly this Arrow type (as pyarrow reads it)."""
    return (
        pa.types.is_boolean(at)
        or (pa.types.is_signed_integer(at))
        or pa.types.is_float32(at)
        or pa.types.is_float64(at)
        or (pa.types.is_decimal128(at) and at.precision <= 38)
        or pa.types.is_string(at)
        or pa.types.is_binary(at)
        or pa.types.is_date32(at)
        or (pa.types.is_timestamp(at) and at.unit == "us" and at.tz in (None, "UTC"))
    )


def jvm_readable(at: pa.DataType) -> bool:
    """Spark's Parquet reader reads a column stored with this Arrow type."""
    if pa.types.is_timestamp(at):
        return at.unit in ("ms", "us")
    if pa.types.is_large_string(at) or pa.types.is_large_binary(at):
        return True
    if pa.types.is_list(at) or pa.types.is_large_list(at):
        return jvm_readable(at.value_type)
    if pa.types.is_struct(at):
        return all(jvm_readable(f.type) for f in at)
    if pa.types.is_map(at):
        return jvm_readable(at.key_type) and jvm_readable(at.item_type)
    return jvm_writable(at)


def _int_rank(dt: T.DataType) -> int:
    return _INT_RANK.get(type(dt), 0)


def safe_cast(src: T.DataType, dst: T.DataType) -> bool:
    """Whether every value of ``src`` converts to ``dst`` exactly (no overflow, no rounding)."""
    if src == dst or isinstance(src, T.NullType):
        return True
    if isinstance(src, (T.CharType, T.VarcharType)) and isinstance(dst, T.StringType):
        return True
    rs, rd = _int_rank(src), _int_rank(dst)
    if rs:
        if rd:
            return rs <= rd
        if isinstance(dst, T.DoubleType):
            return _INT_BITS[rs] <= 32
        if isinstance(dst, T.FloatType):
            return _INT_BITS[rs] <= 16
        if isinstance(dst, T.DecimalType):
            return dst.precision - dst.scale >= _INT_DIGITS[rs]
        return False
    if isinstance(src, T.FloatType):
        return isinstance(dst, T.DoubleType)
    if isinstance(src, T.DecimalType) and isinstance(dst, T.DecimalType):
        return dst.scale >= src.scale and dst.precision - dst.scale >= src.precision - src.scale
    if isinstance(src, T.ArrayType) and isinstance(dst, T.ArrayType):
        return safe_cast(src.elementType, dst.elementType)
    if isinstance(src, T.MapType) and isinstance(dst, T.MapType):
        return safe_cast(src.keyType, dst.keyType) and safe_cast(src.valueType, dst.valueType)
    if isinstance(src, T.StructType) and isinstance(dst, T.StructType):
        return [f.name for f in src] == [f.name for f in dst] and all(
            safe_cast(a.dataType, b.dataType) for a, b in zip(src, dst)
        )
    return False


def _same_ignoring_nullability(a: T.DataType, b: T.DataType) -> bool:
    if isinstance(a, T.ArrayType) and isinstance(b, T.ArrayType):
        return _same_ignoring_nullability(a.elementType, b.elementType)
    if isinstance(a, T.MapType) and isinstance(b, T.MapType):
        return _same_ignoring_nullability(a.keyType, b.keyType) and _same_ignoring_nullability(
            a.valueType, b.valueType
        )
    if isinstance(a, T.StructType) and isinstance(b, T.StructType):
        return [f.name for f in a] == [f.name for f in b] and all(
            _same_ignoring_nullability(x.dataType, y.dataType) for x, y in zip(a, b)
        )
    return bool(a == b)


@dataclass(frozen=True)
class ColumnPlan:
    """How one table column is produced from the DataFrame."""

    name: str
    type: T.DataType
    #: "keep" (same type), "cast" (safe widening) or "null" (missing, nullable)
    action: str
    #: the table column is not nullable but the DataFrame's may hold nulls
    check_not_null: bool = False


def match_columns(df_schema: T.StructType, table: pa.Schema, table_name: str) -> list[ColumnPlan]:
    """Match a DataFrame schema to a table schema by column name (see module doc).

    Raises ValueError naming the column for an unknown column, a missing
    non-nullable one, a column given twice, or a type that cannot be cast
    safely; TypeError for a table column Spark cannot represent.
    """
    given: dict[str, T.StructField] = {}
    for f in df_schema.fields:
        if f.name in given:
            raise ValueError(f"column {f.name!r} appears twice in the DataFrame")
        given[f.name] = f
    names = set(table.names)
    for name in given:
        if name not in names:
            hint = [n for n in table.names if n.lower() == name.lower()]
            extra = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise ValueError(
                f"column {name!r} of the DataFrame is not a column of {table_name}{extra}; "
                f"its columns are {table.names}"
            )
    plans: list[ColumnPlan] = []
    for field in table:
        dst = spark_type(field.type, field.name)
        src = given.get(field.name)
        if src is None:
            if not field.nullable:
                raise ValueError(
                    f"column {field.name!r} of {table_name} is missing from the DataFrame "
                    "and is not nullable"
                )
            plans.append(ColumnPlan(field.name, dst, "null"))
            continue
        if _same_ignoring_nullability(src.dataType, dst):
            action = "keep"
        elif safe_cast(src.dataType, dst):
            action = "cast"
        else:
            raise ValueError(
                f"column {field.name!r}: the DataFrame's {src.dataType.simpleString()} cannot "
                f"be cast safely to {dst.simpleString()} ({field.type} in {table_name})"
            )
        needs_check = not field.nullable and (src.nullable or isinstance(src.dataType, T.NullType))
        plans.append(ColumnPlan(field.name, dst, action, needs_check))
    return plans


def describe(plans: list[ColumnPlan]) -> dict[str, Any]:
    """A compact summary (for logs): which columns were cast or filled with nulls."""
    return {
        "cast": [p.name for p in plans if p.action == "cast"],
        "null": [p.name for p in plans if p.action == "null"],
        "checked": [p.name for p in plans if p.check_not_null],
    }
