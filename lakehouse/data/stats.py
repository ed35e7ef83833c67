"""Column statistics of data files: footer bounds, their stored form, their user form.

A data-file record (:mod:`lakehouse.data.record`) carries per column id
``[column id, min, max, null count]``. Footer statistics are JSON values,
tagged where JSON has no type for them::

    int, str, bool, float      as is (NaN and infinities are not recorded)
    ["i", n]                   the integer behind a date, time, timestamp or duration
    ["d", "12.50"]             a decimal, as text
    ["b", "<base64>"]          binary

so the bounds decode exactly with the column's type (:func:`stat_scalar`).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import math
from typing import Any

import pyarrow as pa

from lakehouse.model import ColumnStats, DataFile


# -- statistics values -----------------------------------------------------------
def encode_stat(value: Any) -> Any:
    """A footer bound as a JSON value (None when it cannot be recorded exactly)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        return ["d", str(value)] if value.is_finite() else None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return ["b", base64.b64encode(bytes(value)).decode("ascii")]
    if isinstance(value, pa.Scalar):
        if not value.is_valid:
            return None
        t = value.type
        if pa.types.is_temporal(t):
            return ["i", value.cast(pa.int64()).as_py()]
        return encode_stat(value.as_py())
    return None


def stat_scalar(value: Any, type_: pa.DataType) -> pa.Scalar | None:
    """A stored bound as a scalar of ``type_`` (None when it does not fit)."""
    if value is None:
        return None
    try:
        if isinstance(value, list):
            tag, body = value
            if tag == "i":
                return pa.scalar(int(body), pa.int64()).cast(type_)
            if tag == "d":
                return pa.scalar(decimal.Decimal(body)).cast(type_)
            if tag == "b":
                return pa.scalar(base64.b64decode(body), pa.binary()).cast(type_)
            return None
        return pa.scalar(value).cast(type_)
    except (pa.ArrowException, ValueError, TypeError, decimal.DecimalException, binascii.Error):
        return None


def user_stats(f: DataFile, names: dict[int, tuple[str, pa.DataType]]) -> dict[str, ColumnStats]:
    """``f``'s bounds keyed by the table's current column names, as Python values."""
    out: dict[str, ColumnStats] = {}
    for cid, lo, hi, nulls in f.raw_stats:
        if cid not in names:
            continue
        name, typ = names[cid]
        a, b = stat_scalar(lo, typ), stat_scalar(hi, typ)
        out[name] = ColumnStats(
            None if a is None else a.as_py(), None if b is None else b.as_py(), nulls
        )
    return out


def footer_stats(
    metadata: Any, ids: dict[str, int], types: dict[str, pa.DataType]
) -> tuple[tuple[int, Any, Any, int | None], ...]:
    """Per column id ``(min, max, null count)`` over every row group of a Parquet footer.

    ``ids`` maps the top-level column names of the file to column ids. Nested
    columns and columns whose bounds are missing or inexact get no bounds
    (only their null count when every row group has one).
    """
    out: list[tuple[int, Any, Any, int | None]] = []
    schema = metadata.schema
    by_name: dict[str, int] = {}
    for j in range(metadata.num_columns):
        path = schema.column(j).path
        if "." not in path:
            by_name[path] = j
    for name, cid in ids.items():
        jj = by_name.get(name)
        if jj is None:
            out.append((cid, None, None, None))
            continue
        lo: Any = None
        hi: Any = None
        nulls: int | None = 0
        bounded = True
        for r in range(metadata.num_row_groups):
            col = metadata.row_group(r).column(jj)
            st = col.statistics if col.is_stats_set else None
            if st is None:
                bounded, nulls = False, None
                break
            if nulls is not None:
                nulls = nulls + st.null_count if st.has_null_count else None
            if col.num_values == 0 or (st.has_null_count and st.null_count == col.num_values):
                continue  # all nulls: no bounds needed
            if not st.has_min_max:
                bounded = False
                continue
            a = _typed(st.min, types[name])
            b = _typed(st.max, types[name])
            if a is None or b is None:
                bounded = False
                continue
            lo = a if lo is None or a < lo else lo
            hi = b if hi is None or b > hi else hi
        if not bounded or lo is None:
            lo = hi = None
        typ = types[name]
        out.append((cid, _encode_bound(lo, typ), _encode_bound(hi, typ), nulls))
    return tuple(out)


def _typed(value: Any, type_: pa.DataType) -> Any:
    """A footer statistic as a value comparable within its column, or None."""
    if value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if pa.types.is_timestamp(type_) and isinstance(value, dt.datetime):
        if value.tzinfo is None and type_.tz is not None:
            value = value.replace(tzinfo=dt.UTC)
        try:
            return pa.scalar(value, type_).cast(pa.int64()).as_py()
        except (pa.ArrowException, ValueError, TypeError, OverflowError):
            return None
    if pa.types.is_temporal(type_):
        try:
            return pa.scalar(value, type_).cast(pa.int64()).as_py()
        except (pa.ArrowException, ValueError, TypeError, OverflowError):
            return None
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return value if isinstance(value, str) else None
    if isinstance(value, (int, float, decimal.Decimal, bytes, bool)):
        return value
    return None


def _encode_bound(value: Any, type_: pa.DataType) -> Any:
    if pa.types.is_temporal(type_) and isinstance(value, int):
        return ["i", value]
    return encode_stat(value)


__all__ = ["encode_stat", "footer_stats", "stat_scalar", "user_stats"]
