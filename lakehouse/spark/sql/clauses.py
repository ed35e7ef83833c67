"""CREATE / ALTER clauses as the arguments of lakehouse calls: pure functions over
sqlglot trees (no Spark session, nothing written).

* :func:`spark_type_of`: a SQL column type as the Spark type it names
  (``BIGINT`` -> ``LongType``, ``VARCHAR(8)`` -> ``StringType``,
  ``TIMESTAMP_NTZ`` -> ``TimestampNTZType``...); :class:`ColumnSpec`
  turns it into the Arrow field ``lakehouse.spark.write`` would give a
  DataFrame column of that type (:func:`lakehouse.spark.types.arrow_type`), its
  ``COMMENT`` in the field metadata under ``comment`` (Spark's key).
* :func:`partition_item`: a ``PARTITIONED BY`` item in the lakehouse's
  spelling (``days(ts)`` -> ``day(ts)``, ``bucket(16, id)``, ``truncate(4, s)``).
* :func:`clauses`: a CREATE statement's ``TBLPROPERTIES``, ``COMMENT`` and
  ``PARTITIONED BY``; every clause the lakehouse has no use for (``USING``,
  ``LOCATION``, bucketing...) raises the ValueError of
  :func:`~lakehouse.spark.sql.names.unsupported` naming it.
* :func:`query_field`: a CTAS column (the query's type, nullable throughout).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T
from sqlglot import exp

from lakehouse.spark.sql.names import unsupported
from lakehouse.spark.types import arrow_type

_SIMPLE: dict[Any, T.DataType] = {
    exp.DataType.Type.BIGINT: T.LongType(),
    exp.DataType.Type.INT: T.IntegerType(),
    exp.DataType.Type.SMALLINT: T.ShortType(),
    exp.DataType.Type.TINYINT: T.ByteType(),
    exp.DataType.Type.BOOLEAN: T.BooleanType(),
    exp.DataType.Type.FLOAT: T.FloatType(),
    exp.DataType.Type.DOUBLE: T.DoubleType(),
    exp.DataType.Type.TEXT: T.StringType(),
    exp.DataType.Type.VARCHAR: T.StringType(),
    exp.DataType.Type.CHAR: T.StringType(),
    exp.DataType.Type.BINARY: T.BinaryType(),
    exp.DataType.Type.DATE: T.DateType(),
    exp.DataType.Type.TIMESTAMP: T.TimestampType(),
    exp.DataType.Type.TIMESTAMPTZ: T.TimestampType(),
    exp.DataType.Type.TIMESTAMPLTZ: T.TimestampType(),
    exp.DataType.Type.TIMESTAMPNTZ: T.TimestampNTZType(),
}
_TIME_TRANSFORMS = {"year", "month", "day", "hour", "years", "months", "days", "hours"}


def spark_type_of(dt: exp.Expression, column: str) -> T.DataType:
    """The Spark type a SQL type names; ValueError naming the column and the type."""
    if not isinstance(dt, exp.DataType):
        raise ValueError(f"column {column!r}: unsupported type {dt.sql(dialect='spark')}")
    kind = dt.this
    if kind in _SIMPLE:
        return _SIMPLE[kind]
    params: list[Any] = [p.this if isinstance(p, exp.DataTypeParam) else p for p in dt.expressions]
    if kind == exp.DataType.Type.DECIMAL:
        nums = [int(p.name) for p in params]
        precision, scale = (nums + [10, 0][len(nums) :])[:2] if nums else (10, 0)
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            raise ValueError(f"column {column!r}: invalid type {dt.sql(dialect='spark')}")
        return T.DecimalType(precision, scale)
    if kind == exp.DataType.Type.ARRAY and len(params) == 1:
        return T.ArrayType(spark_type_of(params[0], column), True)
    if kind == exp.DataType.Type.MAP and len(params) == 2:
        return T.MapType(spark_type_of(params[0], column), spark_type_of(params[1], column), True)
    if kind == exp.DataType.Type.STRUCT:
        fields = []
        for p in params:
            if not isinstance(p, exp.ColumnDef):
                raise ValueError(f"column {column!r}: invalid type {dt.sql(dialect='spark')}")
            spec = column_spec(p, f"{column}.{p.name}")
            if spec.comment is not None:
                raise unsupported(f"COMMENT on the nested field {column}.{p.name}")
            fields.append(T.StructField(spec.name, spec.type, spec.nullable))
        return T.StructType(fields)
    raise ValueError(f"column {column!r}: unsupported type {dt.sql(dialect='spark')}")


@dataclass
class ColumnSpec:
    name: str
    type: T.DataType
    nullable: bool = True
    comment: str | None = None
    primary_key: bool = False
    position: exp.Expression | None = field(default=None)

    def arrow(self) -> pa.Field:
        meta = {"comment": self.comment} if self.comment is not None else None
        return pa.field(self.name, arrow_type(self.type), self.nullable, metadata=meta)


def column_spec(c: exp.ColumnDef, label: str | None = None) -> ColumnSpec:
    label = label or c.name
    if c.args.get("kind") is None:
        raise ValueError(f"column {label!r} has no type")
    spec = ColumnSpec(c.name, spark_type_of(c.args["kind"], label))
    for con in c.args.get("constraints") or []:
        kind = con.args.get("kind") if isinstance(con, exp.ColumnConstraint) else con
        if isinstance(kind, exp.NotNullColumnConstraint) and not kind.args.get("allow_null"):
            spec.nullable = False
        elif isinstance(kind, exp.CommentColumnConstraint):
            spec.comment = kind.this.name
        elif isinstance(kind, exp.PrimaryKeyColumnConstraint):
            spec.primary_key = True
        else:
            raise unsupported(f"column constraint {con.sql(dialect='spark')} (column {label!r})")
    spec.position = c.args.get("position")
    return spec


def text_of(node: exp.Expression) -> str:
    """A property key or value as text: strings unquoted, ``true``/``false``, dotted names."""
    if isinstance(node, exp.Literal):
        return str(node.this)
    if isinstance(node, exp.Boolean):
        return "true" if node.this else "false"
    if isinstance(node, (exp.Var, exp.Identifier)):
        return str(node.name)
    if isinstance(node, (exp.Column, exp.Dot)):
        return ".".join(p.name for p in node.parts)
    return node.sql(dialect="spark")


def partition_item(node: exp.Expression) -> str:
    """One ``PARTITIONED BY`` item in the lakehouse's spelling (``day(ts)``, ``bucket(16, c)``)."""
    if isinstance(node, (exp.Identifier, exp.Column)):
        return str(node.name)
    if isinstance(node, exp.PartitionedByBucket):
        return f"bucket({node.expression.name}, {node.this.name})"
    if isinstance(node, exp.PartitionByTruncate):
        return f"truncate({node.expression.name}, {node.this.name})"
    if isinstance(node, exp.ColumnDef):
        raise unsupported(
            f"PARTITIONED BY with a column type ({node.sql(dialect='spark')})",
            "declare the column in the column list and name it in PARTITIONED BY",
        )
    fn = node.name if isinstance(node, exp.Anonymous) else node.key
    cols = list(node.find_all(exp.Column))
    if isinstance(node, exp.Func) and fn.lower() in _TIME_TRANSFORMS and len(cols) == 1:
        return f"{fn.lower()}({cols[0].name})"
    raise unsupported(f"PARTITIONED BY {node.sql(dialect='spark')}")


@dataclass
class Options:
    """What a CREATE statement's clauses (``properties`` in sqlglot's tree) ask for."""

    properties: dict[str, str] = field(default_factory=dict)
    partition_by: list[str] | None = None
    temporary: bool = False


def clauses(tree: exp.Create, what: str) -> Options:
    out = Options()
    props = tree.args.get("properties")
    for p in props.expressions if props is not None else []:
        if isinstance(p, exp.Property) and type(p) is exp.Property:  # TBLPROPERTIES item
            out.properties[text_of(p.this)] = text_of(p.args["value"])
        elif isinstance(p, exp.PartitionedByProperty):
            out.partition_by = [partition_item(e) for e in p.this.expressions]
        elif isinstance(p, exp.SchemaCommentProperty):
            out.properties["comment"] = text_of(p.this)
        elif isinstance(p, exp.TemporaryProperty):
            out.temporary = True
        elif isinstance(p, exp.FileFormatProperty):
            word = "STORED AS" if p.args.get("hive_format") else "USING"
            raise unsupported(
                f"{word} {p.this.name}", f"lakehouse {what}s are always lakehouse tables"
            )
        elif isinstance(p, exp.LocationProperty):
            raise unsupported("LOCATION", "the lakehouse places its data files itself")
        elif isinstance(p, exp.ClusteredByProperty):
            raise unsupported(
                "CLUSTERED BY ... INTO n BUCKETS", "use PARTITIONED BY (bucket(n, column))"
            )
        elif isinstance(p, exp.ClusterProperty):
            raise unsupported("CLUSTER BY", "use PARTITIONED BY")
        elif isinstance(p, (exp.RowFormatDelimitedProperty, exp.RowFormatSerdeProperty)):
            raise unsupported("ROW FORMAT", "lakehouse tables are Parquet")
        elif isinstance(p, exp.OptionsProperty):
            raise unsupported("OPTIONS", "use TBLPROPERTIES")
        else:
            raise unsupported(f"{p.sql(dialect='spark')} in CREATE {what.upper()}")
    return out


def has_clause(tree: exp.Create, kind: type[exp.Expression]) -> bool:
    """Whether a CREATE statement has a clause of sqlglot class ``kind``."""
    props = tree.args.get("properties")
    return props is not None and any(isinstance(p, kind) for p in props.expressions)


def query_field(f: T.StructField) -> pa.Field:
    """A CTAS column: the query's type, nullable at every level (Spark's ``asNullable``)."""
    if isinstance(f.dataType, T.NullType):
        raise ValueError(
            f"column {f.name!r} of the query has no type (NULL): cast it, e.g. CAST(NULL AS STRING)"
        )
    try:
        return pa.field(f.name, arrow_type(_nullable(f.dataType)), True)
    except TypeError:
        raise ValueError(
            f"column {f.name!r}: a lakehouse table cannot hold Spark's {f.dataType.simpleString()}"
        ) from None


def _nullable(dt: T.DataType) -> T.DataType:
    if isinstance(dt, T.ArrayType):
        return T.ArrayType(_nullable(dt.elementType), True)
    if isinstance(dt, T.MapType):
        return T.MapType(_nullable(dt.keyType), _nullable(dt.valueType), True)
    if isinstance(dt, T.StructType):
        return T.StructType([T.StructField(f.name, _nullable(f.dataType), True) for f in dt])
    return dt


def set_properties(action: exp.AlterSet) -> dict[str, str] | None:
    found = action.expressions
    if len(found) != 1 or not isinstance(found[0], exp.Properties) or len(action.args) > 1:
        return None
    return {text_of(p.this): text_of(p.args["value"]) for p in found[0].expressions}
