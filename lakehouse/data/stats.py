"""Column statistics of data files: footer bounds, their stored form, their user form.

A data-file record (:mod:`lakehouse.data.record`) carries per column id
``[column id, min, max, null count]``: a lower and an upper bound of the
column's non-null values in the file (either may be None: unknown) and the
number of nulls (None: unknown). Every orderable type has bounds: integers
of every width, floats, decimals, strings, binary, booleans, dates, times,
timestamps (with and without a time zone) and durations.

Bounds are JSON values, tagged where JSON has no type for them::

    int, str, bool, float      as is (NaN and infinities are not recorded)
    ["n", n]                   a date, time, timestamp or duration as an integer
                               count of nanoseconds (since 1970-01-01 for dates and
                               timestamps, since midnight for times; UTC for a
                               timestamp with a time zone, as Arrow stores it)
    ["d", "12.50"]             a decimal, as text
    ["b", "<base64>"]          binary
    ["i", n]                   (older records) a temporal value as the integer
                               Arrow stores for the column's type (a time64[ns]
                               upper bound came from a datetime.time, so it is
                               widened by 999 ns)

so the bounds decode with the column's type (:func:`stat_scalar`) whatever
unit the Parquet file stored them in. Strings keep at most
:data:`PREFIX_CHARS` characters and binary values :data:`PREFIX_BYTES`
bytes: a truncated lower bound is still a lower bound; a truncated upper
bound is rounded *up* (its last character that can be is incremented, the
rest dropped), and when none can be (every character is U+10FFFF, every
byte 0xFF) the file has no upper bound for that column.

The footer's bounds are read with the Parquet logical type, not through
Python objects (``datetime.time`` has no nanoseconds), and a bound the
footer does not give, or gives as NaN, is left unknown: pruning with
unknown bounds reads more files, never fewer.
"""

from __future__ import annotations

import base64
import binascii
import decimal
import json
import math
import struct
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.model import ColumnStats, DataFile

#: characters of a string bound kept in a record
PREFIX_CHARS = 64
#: bytes of a binary bound kept in a record
PREFIX_BYTES = 64

_NS_PER = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
_PARQUET_UNIT = {"seconds": "s", "milliseconds": "ms", "microseconds": "us", "nanoseconds": "ns"}
_NS_PER_DAY = 86_400 * 10**9
_BAD = (
    pa.ArrowException,
    ValueError,
    TypeError,
    OverflowError,
    ArithmeticError,
    decimal.DecimalException,
    binascii.Error,
)


# -- the stored form ------------------------------------------------------------------
def encode_stat(value: Any) -> Any:
    """A bound as a JSON value (None when it cannot be recorded exactly)."""
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
        if _is_temporal(t):
            ns = _scalar_ns(value)
            return None if ns is None else ["n", ns]
        return encode_stat(value.as_py())
    return None


def stat_scalar(value: Any, type_: pa.DataType, *, upper: bool = False) -> pa.Scalar | None:
    """A stored bound as a scalar of ``type_`` (None when it does not fit).

    ``upper``: the bound is an upper bound, so a temporal value between two
    values of ``type_``'s unit rounds up (a lower bound rounds down).
    """
    if value is None:
        return None
    try:
        if isinstance(value, list):
            tag, body = value
            if tag == "n":
                if not _is_temporal(type_) or isinstance(body, bool) or not isinstance(body, int):
                    return None
                return pa.scalar(_from_ns(body, type_, upper), type_)
            if tag == "i":
                if isinstance(body, bool) or not isinstance(body, int):
                    return None
                if upper and pa.types.is_time64(type_) and type_.unit == "ns":
                    body += 999  # older records took it from a datetime.time: microseconds
                return pa.scalar(body, type_)
            if tag == "d":
                return _scalar(decimal.Decimal(body), type_)
            if tag == "b":
                return _scalar(base64.b64decode(body, validate=True), type_)
            return None
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if _is_temporal(type_):
            return None  # temporal bounds are always tagged
        if isinstance(value, bool) != pa.types.is_boolean(type_):
            return None
        return _scalar(value, type_)
    except _BAD:
        return None


def user_stats(f: DataFile, names: dict[int, tuple[str, pa.DataType]]) -> dict[str, ColumnStats]:
    """``f``'s bounds keyed by the table's current column names, as Python values."""
    out: dict[str, ColumnStats] = {}
    for cid, lo, hi, nulls in f.raw_stats:
        if cid not in names:
            continue
        name, typ = names[cid]
        a, b = stat_scalar(lo, typ), stat_scalar(hi, typ, upper=True)
        out[name] = ColumnStats(_py(a), _py(b), nulls)
    return out


def _py(s: pa.Scalar | None) -> Any:
    """``s`` as a Python value; None when Python has none (a date past year 9999)."""
    try:
        return None if s is None else s.as_py()
    except _BAD:
        return None


# -- from a Parquet footer --------------------------------------------------------------
def footer_stats(
    metadata: Any, ids: dict[str, int], types: dict[str, pa.DataType]
) -> tuple[tuple[int, Any, Any, int | None], ...]:
    """Per column id ``(min, max, null count)`` over every row group of a Parquet footer.

    ``ids`` maps the top-level column names of the file to column ids,
    ``types`` gives their Arrow types in the file. Nested columns get
    nothing; a bound a row group does not give leaves the column without
    that bound (the null count is kept when every row group has one).
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
        typ = types[name]
        lo: Any = None
        hi: Any = None
        lo_known = hi_known = True
        nulls: int | None = 0
        for r in range(metadata.num_row_groups):
            col = metadata.row_group(r).column(jj)
            st = col.statistics if col.is_stats_set else None
            if st is None:
                lo_known = hi_known = False
                nulls = None
                break
            if nulls is not None:
                nulls = nulls + st.null_count if st.has_null_count else None
            if col.num_values == 0 or (st.has_null_count and st.null_count == col.num_values):
                continue  # all nulls: no bounds needed
            a, b = _typed(st, typ, "min"), _typed(st, typ, "max")
            if a is None:
                lo_known = False
            elif lo_known:
                lo = a if lo is None or a < lo else lo
            if b is None:
                hi_known = False
            elif hi_known:
                hi = b if hi is None or b > hi else hi
        if not lo_known:
            lo = None
        if not hi_known:
            hi = None
        out.append((cid, _encode_bound(lo, typ, False), _encode_bound(hi, typ, True), nulls))
    return tuple(out)


#: a Parquet writer drops a column chunk's min and max when either is longer than
#: this many bytes (Arrow's default ``max_statistics_size``)
MAX_STATISTICS_BYTES = 4096


def arrow_stats(
    table: pa.Table, ids: dict[str, int]
) -> tuple[tuple[int, Any, Any, int | None], ...]:
    """What :func:`footer_stats` gives for the Parquet file
    :func:`lakehouse.data.files.encode_parquet` writes of ``table``, computed from
    the Arrow columns (inlined batches have no footer; their bounds prune alike).

    The footer's rules, followed here: NaN is never a bound, a zero minimum is
    -0.0 and a zero maximum +0.0, an infinite bound is none, a string or binary
    bound longer than :data:`MAX_STATISTICS_BYTES` drops both bounds, a date64 is
    stored as whole days (truncated), and nested and null-typed columns get
    nothing (not even a null count).
    """
    out: list[tuple[int, Any, Any, int | None]] = []
    for name, cid in ids.items():
        col = table.column(name)
        typ = col.type
        if pa.types.is_nested(typ) or pa.types.is_null(typ):
            out.append((cid, None, None, None))
            continue
        nulls = col.null_count
        try:
            lo, hi = _arrow_bounds(col.combine_chunks() if col.num_chunks != 1 else col.chunk(0))
        except _BAD:
            lo = hi = None
        out.append((cid, _encode_bound(lo, typ, False), _encode_bound(hi, typ, True), nulls))
    return tuple(out)


def _arrow_bounds(arr: pa.Array) -> tuple[Any, Any]:
    """The footer's min and max of ``arr`` as :func:`_typed` reads them (None: none)."""
    typ = arr.type
    if _is_temporal(typ):
        wide = pa.int32() if typ.bit_width == 32 else pa.int64()
        mm = pc.min_max(arr.view(wide))
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if lo is None or hi is None:
            return None, None
        if pa.types.is_date64(typ):  # written as date32: whole days, toward zero
            return _days(lo) * _NS_PER_DAY, _days(hi) * _NS_PER_DAY
        per = _ns_per(typ)
        return lo * per, hi * per
    if pa.types.is_floating(typ):
        if pa.types.is_float16(typ):
            arr = arr.cast(pa.float32())
        arr = arr.filter(pc.invert(pc.is_nan(arr)))
        mm = pc.min_max(arr)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if lo is None or hi is None:
            return None, None
        lo = -0.0 if lo == 0 else lo
        hi = 0.0 if hi == 0 else hi
        return (lo if math.isfinite(lo) else None), (hi if math.isfinite(hi) else None)
    if pa.types.is_string_view(typ):
        arr = arr.cast(pa.large_string())
    elif pa.types.is_binary_view(typ):
        arr = arr.cast(pa.large_binary())
    elif pa.types.is_decimal32(typ) or pa.types.is_decimal64(typ):
        arr = arr.cast(pa.decimal128(typ.precision, typ.scale))
    elif not (
        pa.types.is_integer(typ)
        or pa.types.is_boolean(typ)
        or pa.types.is_decimal(typ)
        or _is_string(typ)
        or _is_binary(typ)
    ):
        return None, None
    mm = pc.min_max(arr)
    lo, hi = mm["min"].as_py(), mm["max"].as_py()
    if lo is None or hi is None:
        return None, None
    if isinstance(lo, (str, bytes)):
        size = len(lo.encode()) if isinstance(lo, str) else len(lo)
        hsize = len(hi.encode()) if isinstance(hi, str) else len(hi)
        if max(size, hsize) > MAX_STATISTICS_BYTES:
            return None, None
    if isinstance(lo, decimal.Decimal) and not (lo.is_finite() and hi.is_finite()):
        return None, None
    return lo, hi


def _days(ms: int) -> int:
    """Whole days of ``ms`` milliseconds, truncated toward zero (as Arrow writes date64)."""
    return ms // 86_400_000 if ms >= 0 else -(-ms // 86_400_000)


def _typed(st: Any, type_: pa.DataType, which: str) -> Any:
    """One footer bound as a value comparable within its column, or None.

    Temporal values become integer nanoseconds, read from the physical
    value and the Parquet logical type's unit; others are the Python value
    pyarrow decodes, checked against the column's type.
    """
    try:
        if not st.has_min_max:
            return None
        if _is_temporal(type_):
            return _footer_ns(st, type_, which)
        value = st.min if which == "min" else st.max
    except _BAD:  # e.g. a string bound that is not UTF-8
        return None
    if value is None:
        return None
    if pa.types.is_boolean(type_):
        return value if isinstance(value, bool) else None
    if isinstance(value, bool):
        return None
    if pa.types.is_integer(type_):
        return value if isinstance(value, int) else None
    if pa.types.is_floating(type_):
        if pa.types.is_float16(type_) and isinstance(value, bytes) and len(value) == 2:
            value = struct.unpack("<e", value)[0]  # pyarrow gives float16 bounds as raw bytes
        if isinstance(value, int):
            value = float(value)
        if not isinstance(value, float) or math.isnan(value):
            return None
        # an infinite lower bound says nothing more than none (same for +inf above)
        if (which == "min" and value == -math.inf) or (which == "max" and value == math.inf):
            return None
        return value if math.isfinite(value) else None
    if pa.types.is_decimal(type_):
        return value if isinstance(value, decimal.Decimal) and value.is_finite() else None
    if _is_string(type_):
        return value if isinstance(value, str) else None
    if _is_binary(type_):
        return bytes(value) if isinstance(value, (bytes, bytearray)) else None
    return None


def _footer_ns(st: Any, type_: pa.DataType, which: str) -> int | None:
    raw = st.min_raw if which == "min" else st.max_raw
    if isinstance(raw, bool) or not isinstance(raw, int):
        return None  # INT96 timestamps and other physical forms: no bounds
    logical = json.loads(st.logical_type.to_json())
    kind = logical.get("Type")
    if kind == "Date":
        return raw * _NS_PER_DAY
    if kind in ("Time", "Timestamp"):
        unit = _PARQUET_UNIT.get(logical.get("timeUnit", ""))
        return None if unit is None else raw * _NS_PER[unit]
    if kind == "None" and pa.types.is_duration(type_):
        return raw * _NS_PER[type_.unit]  # Arrow's duration: an INT64 in the type's unit
    return None


def _encode_bound(value: Any, type_: pa.DataType, upper: bool) -> Any:
    if value is None:
        return None
    if _is_temporal(type_):
        return ["n", value] if isinstance(value, int) else None
    if isinstance(value, str):
        return _round_up_str(value) if upper else value[:PREFIX_CHARS]
    if isinstance(value, bytes):
        if pa.types.is_fixed_size_binary(type_):
            return encode_stat(value) if len(value) <= PREFIX_BYTES else None
        short = _round_up_bytes(value) if upper else value[:PREFIX_BYTES]
        return encode_stat(short)
    return encode_stat(value)


# -- truncation ------------------------------------------------------------------------------
def _round_up_str(s: str) -> str | None:
    """The shortest-kept upper bound of ``s``: ``s`` itself if short, else a larger prefix."""
    if len(s) <= PREFIX_CHARS:
        return s
    for i in range(PREFIX_CHARS - 1, -1, -1):
        c = ord(s[i])
        if c < 0x10FFFF:
            c += 1
            if 0xD800 <= c <= 0xDFFF:  # surrogates are not characters of a str from UTF-8
                c = 0xE000
            return s[:i] + chr(c)
    return None


def _round_up_bytes(b: bytes) -> bytes | None:
    if len(b) <= PREFIX_BYTES:
        return b
    for i in range(PREFIX_BYTES - 1, -1, -1):
        if b[i] < 0xFF:
            return b[:i] + bytes([b[i] + 1])
    return None


# -- helpers -------------------------------------------------------------------------------
def _is_temporal(t: pa.DataType) -> bool:
    return bool(pa.types.is_temporal(t)) and not pa.types.is_interval(t)


def _is_string(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def _is_binary(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    )


def _ns_per(t: pa.DataType) -> int:
    """Nanoseconds per unit of the integer Arrow stores for temporal type ``t``."""
    if pa.types.is_date32(t):
        return _NS_PER_DAY
    if pa.types.is_date64(t):
        return _NS_PER["ms"]
    return _NS_PER[t.unit]


def _scalar_ns(value: pa.Scalar) -> int | None:
    t = value.type
    try:
        storage = pa.int32() if t.bit_width == 32 else pa.int64()
        n = pa.array([value], t).view(storage)[0].as_py()
    except _BAD:
        return None
    return None if n is None else int(n) * _ns_per(t)


def _from_ns(ns: int, type_: pa.DataType, upper: bool) -> int:
    per = _ns_per(type_)
    return -(-ns // per) if upper else ns // per


def _scalar(value: Any, type_: pa.DataType) -> pa.Scalar:
    if _is_string(type_) and not isinstance(value, str):
        raise TypeError("not a string")
    if _is_binary(type_) and not isinstance(value, bytes):
        raise TypeError("not bytes")
    if pa.types.is_integer(type_) and not isinstance(value, int):
        raise TypeError("not an integer")  # no float or decimal bound on an integer column
    return pa.scalar(value, type_)


__all__ = [
    "PREFIX_BYTES",
    "PREFIX_CHARS",
    "encode_stat",
    "footer_stats",
    "stat_scalar",
    "user_stats",
]
