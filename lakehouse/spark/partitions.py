"""Partitioned tables in Spark: each row's partition as a hidden column.

A write of a partitioned table computes every row's partition under the
table's current spec as one string column, :data:`PART_COL`, in Spark:

* identity, ``year``/``month``/``day``/``hour`` and ``truncate`` of the
  types Spark writes natively are Spark expressions (no Python), with
  Iceberg's semantics exactly (floor division on the UTC instant, code-point
  truncation of strings, ``v - pmod(v, W)`` for integers);
* ``bucket`` (Iceberg's Murmur3 is not Spark's ``hash``), truncate of a
  decimal and identity of a float are an Arrow UDF that runs
  :meth:`lakehouse.partition.Transform.apply` on each batch.

The writers group rows by that column (Spark's ``partitionBy``, which drops it
from the files, or the Python tasks), so each task writes one file per
partition, and the driver learns each file's partition from the column's
value (:func:`decode_key`) instead of reading the file back. The key text
uses only ``[0-9a-z_-]``, so Spark never escapes it in a directory name::

    field     null -> "n"
              int, bool, date (days), timestamp (its stored int), decimal
              (unscaled) -> "i" + decimal digits
              str / bytes -> "x" + lowercase hex of the UTF-8 / raw bytes
              float -> "f" + 16 hex of the IEEE double
    key       the fields joined by "_"     e.g. day(ts), country: "i19723_x5553"

Rows are repartitioned by the key before the write (a rebalancing exchange:
adaptive execution splits a huge partition over several tasks) unless the
DataFrame's partitioning already keeps each partition in one task (hash- or
range-partitioned by identity-partition columns only, or one task), or the
table property ``write.distribution-mode`` is ``"none"``.
"""

from __future__ import annotations

import datetime as dt
import logging
import struct
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakehouse.data import partitioning
from lakehouse.model import TableDef
from lakehouse.partition import PartitionSpec, Transform
from lakehouse.spark.session import is_connect
from lakehouse.spark.writer import quote_ident

log = logging.getLogger("lakehouse.spark")

#: the hidden column holding a row's partition key (never a file's column)
PART_COL = "_lh_part"

_DAY_US, _HOUR_US = 86_400_000_000, 3_600_000_000


def _is_int_like(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_boolean(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_time(t)
        or pa.types.is_duration(t)
    )


# -- the key in Spark -----------------------------------------------------------------------
def _native(name: str, t: pa.DataType, tr: Transform) -> str | None:
    """Spark SQL text of the field's encoded value for a non-null source (None: not
    expressible natively; the Arrow UDF computes it)."""
    c = quote_ident(name)

    def ints(e: str) -> str:
        return f"concat('i', cast(({e}) as string))"

    def hexed(e: str) -> str:
        return f"concat('x', lower(hex({e})))"

    is_str = pa.types.is_string(t) or pa.types.is_large_string(t)
    is_bin = pa.types.is_binary(t) or pa.types.is_large_binary(t)
    ts = pa.types.is_timestamp(t) and t.unit == "us"
    if ts and t.tz is None:
        micros = f"timestampdiff(MICROSECOND, TIMESTAMP_NTZ'1970-01-01 00:00:00', {c})"
    elif ts and t.tz == "UTC":
        micros = f"unix_micros({c})"
    else:
        micros = ""
    if tr.name == "identity":
        if pa.types.is_integer(t):
            return ints(c)
        if pa.types.is_boolean(t):
            return ints(f"cast({c} as int)")
        if is_str or is_bin:
            return hexed(c)
        if pa.types.is_date32(t):
            return ints(f"unix_date({c})")
        if micros:
            return ints(micros)
        return None
    if tr.name == "truncate":
        w = int(tr.param or 1)
        if pa.types.is_integer(t):
            return ints(f"{c} - pmod({c}, {w})")
        if is_str or is_bin:
            return hexed(f"substring({c}, 1, {w})")
        return None
    if tr.name in ("year", "month", "day", "hour"):
        if pa.types.is_date32(t):
            days, date = f"unix_date({c})", c
        elif micros:
            days = f"(({micros}) - pmod({micros}, {_DAY_US})) div {_DAY_US}"
            date = f"date_from_unix_date({days})"
            if tr.name == "hour":
                return ints(f"(({micros}) - pmod({micros}, {_HOUR_US})) div {_HOUR_US}")
        else:
            return None
        if tr.name == "day":
            return ints(days)
        if tr.name == "month":
            return ints(f"(year({date}) - 1970) * 12 + month({date}) - 1")
        if tr.name == "year":
            return ints(f"year({date}) - 1970")
    return None


def encode_array(values: pa.Array, t: pa.DataType) -> pa.Array:
    """The encoded field text of each partition value (type ``t``; see module doc)."""
    if _is_int_like(t):
        if pa.types.is_boolean(t):
            ints = values.cast(pa.int8())
        elif pa.types.is_integer(t):
            ints = values
        else:
            ints = values.view(pa.int32() if t.bit_width == 32 else pa.int64())
        text = pc.binary_join_element_wise(pa.scalar("i"), ints.cast(pa.string()), "")
        return pc.fill_null(text, "n")

    def one(v: Any) -> str:
        if v is None:
            return "n"
        if isinstance(v, str):
            return "x" + v.encode("utf-8").hex()
        if isinstance(v, bytes):
            return "x" + v.hex()
        if isinstance(v, Decimal):
            return "i" + str(int(v.scaleb(t.scale)))
        if isinstance(v, float):
            return "f" + struct.pack(">d", v).hex()
        raise ValueError(f"cannot encode a partition value of type {t}")

    d = values.dictionary_encode()
    texts = pa.array([one(v) for v in d.dictionary.to_pylist()] + ["n"], pa.string())
    idx = pc.fill_null(d.indices, len(d.dictionary))
    return texts.take(idx)


def _udf(tr: Transform, source: pa.DataType) -> Any:
    """An Arrow UDF computing one field's encoded value (any transform, any type)."""
    result = tr.result_type(source)

    def run(values: pa.Array) -> pa.Array:
        arr = values.cast(source) if values.type != source else values
        out = tr.apply(arr)
        return encode_array(out if out.type == result else out.cast(result), result)

    from pyspark.sql.pandas.functions import arrow_udf

    # the type hints of ``run`` make it a scalar Arrow UDF (pyspark's stubs
    # want the type spelled out instead, which pyspark then warns about)
    return arrow_udf(run, "string")  # type: ignore[call-overload]


def key_column(d: TableDef) -> Column | None:
    """The partition key of each row under ``d``'s current spec (None: unpartitioned)."""
    spec = d.spec
    if spec.is_unpartitioned:
        return None
    names = d.names_by_id
    parts: list[Column] = []
    for pf in spec.fields:
        name = names[pf.source_id]
        t = d.schema.field(name).type
        native = _native(name, t, pf.transform)
        if native is not None:
            parts.append(F.coalesce(F.expr(native), F.lit("n")))
        else:
            parts.append(_udf(pf.transform, t)(F.col(quote_ident(name))))
    return parts[0] if len(parts) == 1 else F.concat_ws("_", *parts)


def decode_key(d: TableDef, key: str) -> tuple[Any, ...]:
    """The partition values (Python, as ``DataFile.partition`` holds them) of a key."""
    types = partitioning.result_types(d, d.spec)
    assert types is not None  # the current spec's source columns exist
    texts = key.split("_")
    if len(texts) != len(types):
        raise ValueError(f"partition key {key!r} does not match the spec of {d.qualified_name}")
    return tuple(_decode(s, t) for s, t in zip(texts, types))


def _decode(s: str, t: pa.DataType) -> Any:
    if s == "n":
        return None
    tag, body = s[0], s[1:]
    if tag == "x":
        raw = bytes.fromhex(body)
        return raw.decode("utf-8") if pa.types.is_string(t) or pa.types.is_large_string(t) else raw
    if tag == "f":
        return float(struct.unpack(">d", bytes.fromhex(body))[0])
    n = int(body)
    if pa.types.is_decimal(t):
        return Decimal(n).scaleb(-t.scale)
    if pa.types.is_boolean(t):
        return bool(n)
    if pa.types.is_integer(t):
        return n
    if pa.types.is_date32(t):
        return dt.date(1970, 1, 1) + dt.timedelta(days=n)
    storage = pa.int32() if t.bit_width == 32 else pa.int64()
    return pa.array([n], storage).view(t)[0].as_py()


# -- distribution ---------------------------------------------------------------------------
def identity_columns(d: TableDef, spec: PartitionSpec | None = None) -> set[str]:
    """Names of the columns the spec partitions by identity."""
    spec = spec or d.spec
    names = d.names_by_id
    return {names[f.source_id] for f in spec.fields if f.transform.name == "identity"}


def grouped(df: DataFrame, columns: set[str]) -> bool:
    """Whether ``df``'s rows of one partition are in one task already: one task, or
    hash/range partitioning by a subset of ``columns`` (identity partition columns).
    Read from Spark's physical plan; anything unexpected answers False, and so
    does a Spark Connect DataFrame (no JVM plan to read)."""
    if is_connect(df.sparkSession):
        return False
    try:
        # the physical plan before adaptive execution wraps it (whose partitioning
        # is unknown); a user's repartition is already an exchange in it
        part = df._jdf.queryExecution().sparkPlan().outputPartitioning()
        kind = str(part.getClass().getSimpleName())
        if kind.startswith("SinglePartition"):
            return True
        if kind == "HashPartitioning":
            exprs = part.expressions()
        elif kind == "RangePartitioning":
            exprs = part.ordering()
        else:
            return False
        names = set()
        for i in range(int(exprs.length())):
            e = exprs.apply(i)
            if kind == "RangePartitioning":
                e = e.child()
            if str(e.getClass().getSimpleName()) != "AttributeReference":
                return False
            names.add(str(e.name()))
        return bool(names) and names <= columns
    except Exception as exc:  # a private API moved: shuffle, always correct
        log.debug("could not read the DataFrame's partitioning: %s", exc)
        return False


#: table property choosing how a Spark write distributes rows (Iceberg's name):
#: ``"hash"`` (the default) repartitions by partition unless the DataFrame keeps
#: each partition in one task already; ``"none"`` writes the DataFrame's tasks as
#: they are (each still writes one file per partition it holds)
DISTRIBUTION_PROPERTY = "write.distribution-mode"


def distribution(d: TableDef) -> str:
    """The table's write distribution mode (ValueError for an unknown one)."""
    mode = str(d.properties.get(DISTRIBUTION_PROPERTY, "hash")).lower()
    if mode not in ("hash", "none"):
        raise ValueError(
            f"table property {DISTRIBUTION_PROPERTY}={mode!r} of {d.qualified_name}: "
            "use 'hash' or 'none'"
        )
    return mode


def distribute(df: DataFrame) -> DataFrame:
    """``df`` with the rows of each partition key together: a hash exchange by the
    key that adaptive execution rebalances (a partition far above the advisory
    size is split over several tasks instead of one task writing it all; small
    ones are coalesced)."""
    return df.hint("rebalance", PART_COL)


def with_key(df: DataFrame, d: TableDef, sort_first: Sequence[str] = ()) -> DataFrame:
    """``df`` (shaped as the table) plus :data:`PART_COL`, distributed so each
    partition's rows are in one task (see :func:`distribution`), sorted by
    ``sort_first``, the key and the table's sort keys within each task."""
    key = key_column(d)
    order = [*sort_first]
    if key is not None:
        df = df.withColumn(PART_COL, key)
        if distribution(d) == "hash" and not grouped(df, identity_columns(d)):
            df = distribute(df)
        order.append(PART_COL)
    order += [quote_ident(k) for k in d.sort_keys]
    if order:
        df = df.sortWithinPartitions(
            *[F.col(c if c.startswith("`") else quote_ident(c)) for c in order]
        )
    return df
