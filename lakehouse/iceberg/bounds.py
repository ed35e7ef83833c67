"""Column metrics of data files for Iceberg manifests, and Iceberg's single-value
serialization of bounds.

**Bounds.** Iceberg's single-value serialization (spec Appendix D) of the
file record's bounds (:mod:`lakehouse.data.stats`), decoded with the column's
type: timestamps and times in microseconds, dates in days (a lower bound
rounded down, an upper bound up), decimals as the unscaled two's-complement
big-endian integer in the fewest bytes. A bound is left out whenever it might
be wrong for some reader: a string bound holding a character above U+D7FF
(Java readers compare UTF-16 units, which order U+E000..U+FFFF above
supplementary characters, unlike UTF-8 and code points), a float bound that
is not exactly a float32, a value outside the Iceberg type's range.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from collections.abc import Callable, Sequence
from decimal import Decimal
from functools import lru_cache
from typing import Any, TypeAlias
from uuid import UUID

import pyarrow as pa

from lakehouse import partition_encoding as pe
from lakehouse.data.stats import stat_scalar
from lakehouse.iceberg.typemap import IcebergType, primitive_type, supported
from lakehouse.model import Column, DataFile

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_NS_PER_US = 1000
_NS_PER_DAY = 86_400 * 10**9
_US_PER_DAY = 86_400 * 10**6
_US_PER = {"s": 10**6, "ms": 10**3, "us": 1}
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_TZ = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DAY = _EPOCH.date().toordinal()


# -- single-value serialization -------------------------------------------------------------
def unscaled(v: int | Decimal, scale: int) -> int | None:
    """The unscaled integer of ``v`` at ``scale`` (None: not exact at that scale)."""
    try:
        return pe.unscaled(v, scale)
    except ValueError:
        return None


def bound_bytes(iceberg_type: IcebergType, value: Any) -> bytes | None:
    """Iceberg's binary single-value serialization of ``value`` (spec Appendix D),
    or None when ``value`` is not a value of ``iceberg_type``.

    Values: bool, int, float, Decimal, str, bytes, UUID as Python has them; a date
    as ``datetime.date`` or days, a time as ``datetime.time`` or microseconds, a
    timestamp as ``datetime`` (naive: UTC) or microseconds since the epoch.
    """
    if value is None or not isinstance(iceberg_type, str):
        return None
    t = iceberg_type
    try:
        if t == "boolean":
            return (b"\x01" if value else b"\x00") if isinstance(value, bool) else None
        if t in ("int", "long", "date", "time", "timestamp", "timestamptz"):
            n = long_value(t, value)
            if n is None:
                return None
            if t in ("int", "date"):
                return struct.pack("<i", n) if _INT32[0] <= n <= _INT32[1] else None
            return struct.pack("<q", n) if _INT64[0] <= n <= _INT64[1] else None
        if t in ("float", "double"):
            if isinstance(value, bool) or not isinstance(value, int | float):
                return None
            f = float(value)
            if math.isnan(f):
                return None
            if t == "double":
                return struct.pack("<d", f)
            b = struct.pack("<f", f)
            return b if struct.unpack("<f", b)[0] == f else None  # not a float32: none
        if t.startswith("decimal("):
            p, s = (int(x) for x in t[len("decimal(") : -1].split(","))
            if isinstance(value, bool) or not isinstance(value, int | Decimal):
                return None
            n = unscaled(value, s)
            if n is None or abs(n) >= 10**p:
                return None
            return pe.decimal_bytes(n)
        if t == "string":
            return value.encode("utf-8") if isinstance(value, str) else None
        if t == "uuid":
            if isinstance(value, UUID):
                return value.bytes
            return bytes(value) if isinstance(value, bytes) and len(value) == 16 else None
        if t == "binary":
            return bytes(value) if isinstance(value, bytes | bytearray | memoryview) else None
        if t.startswith("fixed["):
            if not isinstance(value, bytes | bytearray | memoryview):
                return None
            return bytes(value) if len(value) == int(t[len("fixed[") : -1]) else None
    except (ValueError, OverflowError, ArithmeticError, struct.error, UnicodeError):
        return None
    return None


def long_value(t: str, value: Any) -> int | None:
    """The integer Iceberg stores for an int/long/date/time/timestamp value: days of
    a date, microseconds of a time or timestamp (naive: UTC); None if not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if t == "date" and isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.toordinal() - _EPOCH_DAY
    if t == "time" and isinstance(value, dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 10**6 + value.microsecond
    if t in ("timestamp", "timestamptz") and isinstance(value, dt.datetime):
        epoch = _EPOCH if value.tzinfo is None else _EPOCH_TZ
        return (value - epoch) // dt.timedelta(microseconds=1)
    return None


# -- column metrics -----------------------------------------------------------------------------
def _div_out(n: int, d: int, upper: bool) -> int:
    """``n / d`` rounded outward: up for an upper bound, down for a lower one."""
    return -(-n // d) if upper else n // d


def _temporal_long(raw: Any, t: pa.DataType, upper: bool) -> int | None:
    """A stored temporal bound in Iceberg's unit (days of a date, else microseconds)."""
    ns = _nanos(raw)
    if ns is not _SLOW:  # straight from nanoseconds, as _fast_temporal does
        return _div_out(ns, _NS_PER_DAY if pa.types.is_date(t) else _NS_PER_US, upper)
    s = stat_scalar(raw, t, upper=upper)
    if s is None:
        return None
    n = s.value
    if not isinstance(n, int):
        return None
    if pa.types.is_date32(t):
        return n
    if pa.types.is_date64(t):
        return _div_out(n, 86_400_000, upper)
    return int(n * _US_PER[t.unit])


def _bound(raw: Any, t: pa.DataType, ice: str, upper: bool) -> bytes | None:
    if raw is None:
        return None
    if ice in ("date", "time", "timestamp", "timestamptz"):
        return bound_bytes(ice, _temporal_long(raw, t, upper))
    if type(raw) is int and ice in ("int", "long"):
        v: Any = raw  # as _fast_int/_fast_long: bound_bytes checks the Iceberg type's range
    else:
        s = stat_scalar(raw, t, upper=upper)
        if s is None:
            return None
        v = s.as_py()
    if ice == "string" and isinstance(v, str) and any(c > "\ud7ff" for c in v):
        return None  # code point and UTF-16 orders may differ: see the module docstring
    if ice in ("float", "double") and isinstance(v, float) and v == 0:
        v = 0.0 if upper else -0.0  # a zero bound covers both zeros
    return bound_bytes(ice, v)


# -- the common cases straight from the recorded JSON value ------------------------------------
_SLOW: Any = object()  # a fast encoder's "not mine: take the general path"
_PACK_I = struct.Struct("<i").pack
_PACK_Q = struct.Struct("<q").pack
_PACK_D = struct.Struct("<d").pack
_FastEncoder: TypeAlias = Callable[[Any, bool], Any]


def _fast_int(raw: Any, upper: bool) -> Any:
    if type(raw) is not int:
        return _SLOW
    return _PACK_I(raw) if _INT32[0] <= raw <= _INT32[1] else None


def _fast_long(raw: Any, upper: bool) -> Any:
    if type(raw) is not int:
        return _SLOW
    return _PACK_Q(raw) if _INT64[0] <= raw <= _INT64[1] else None


def _fast_string(raw: Any, upper: bool) -> Any:
    if type(raw) is not str:
        return _SLOW
    if not raw.isascii() and max(raw) > "\ud7ff":
        return None  # code point and UTF-16 orders may differ: see the module docstring
    return raw.encode("utf-8")


def _fast_double(raw: Any, upper: bool) -> Any:
    if type(raw) is not float:
        return _SLOW
    if not math.isfinite(raw):
        return None
    if raw == 0:
        raw = 0.0 if upper else -0.0  # a zero bound covers both zeros
    return _PACK_D(raw)


def _fast_boolean(raw: Any, upper: bool) -> Any:
    if type(raw) is not bool:
        return _SLOW
    return b"\x01" if raw else b"\x00"


def _nanos(raw: Any) -> Any:
    """The nanoseconds of a temporal bound recorded as ``["n", ns]`` (else _SLOW)."""
    if type(raw) is list and len(raw) == 2 and raw[0] == "n" and type(raw[1]) is int:
        return raw[1]
    return _SLOW


def _fast_temporal(unit_ns: int, pack: Callable[[int], bytes], lo: int, hi: int) -> _FastEncoder:
    """A temporal bound ``["n", ns]`` in units of ``unit_ns`` (days: date, micros: time and
    timestamps), rounded outward: down for a lower bound, up for an upper one."""

    def encode(raw: Any, upper: bool) -> Any:
        ns = _nanos(raw)
        if ns is _SLOW:
            return _SLOW
        n = _div_out(ns, unit_ns, upper)
        return pack(n) if lo <= n <= hi else None

    return encode


_fast_date = _fast_temporal(_NS_PER_DAY, _PACK_I, *_INT32)
_fast_micros = _fast_temporal(_NS_PER_US, _PACK_Q, *_INT64)


def _fast_none(raw: Any, upper: bool) -> Any:
    return _SLOW


def _fast_decimal(precision: int, scale: int) -> _FastEncoder:
    limit = 10**precision

    def encode(raw: Any, upper: bool) -> Any:
        if type(raw) is not list or len(raw) != 2 or raw[0] != "d" or type(raw[1]) is not str:
            return _SLOW
        try:
            n = pe.unscaled(Decimal(raw[1]), scale)
        except (ValueError, ArithmeticError):
            return None  # not a value of the column's type
        if abs(n) >= limit:
            return None
        return pe.decimal_bytes(n)

    return encode


_FAST: dict[str, _FastEncoder] = {
    "int": _fast_int,
    "long": _fast_long,
    "string": _fast_string,
    "double": _fast_double,
    "boolean": _fast_boolean,
    "date": _fast_date,
    "time": _fast_micros,
    "timestamp": _fast_micros,
    "timestamptz": _fast_micros,
}

#: (column id, Arrow type, Iceberg type, fast encoder) of the metric columns, by id
_Plan: TypeAlias = tuple[tuple[int, pa.DataType, str, _FastEncoder], ...]


@lru_cache(maxsize=64)
def _plan_of(columns: tuple[Column, ...], schema: pa.Schema) -> _Plan:
    out = []
    for cid, t in sorted(supported(columns, schema).items()):
        ice = primitive_type(t)
        if ice is None:
            continue
        fast = _FAST.get(ice, _fast_none)
        if pa.types.is_decimal(t):
            fast = _fast_decimal(t.precision, t.scale)
        out.append((cid, t, ice, fast))
    return tuple(out)


_last_plan: tuple[Sequence[Column], pa.Schema, _Plan] | None = None


def _plan(columns: Sequence[Column], schema: pa.Schema) -> _Plan:
    """The top-level primitive columns of the Iceberg schema, in id order, with how
    their bounds are encoded (cached: a table's files share their columns; the last
    table's by identity, as hashing a schema costs more than a file's metrics)."""
    global _last_plan
    last = _last_plan
    if last is not None and last[0] is columns and last[1] is schema:
        return last[2]
    plan = _plan_of(tuple(columns), schema)
    if type(columns) is tuple:  # a list could change under the same identity
        _last_plan = (columns, schema, plan)
    return plan


def file_metrics(f: DataFile, columns: Sequence[Column], schema: pa.Schema) -> dict[str, Any]:
    """The column metrics of data file ``f`` for its manifest entry:
    ``value_counts``, ``null_value_counts``, ``lower_bounds``, ``upper_bounds``,
    each a list of ``{"key": field id, "value": ...}`` in id order.

    Only top-level primitive columns of the Iceberg schema that the file holds get
    metrics (value count: the file's rows, nulls included); bounds come from the
    file's record and are left out when unknown or unsafe (see the module docstring).
    """
    held = {cid for cid, _ in f.columns}
    raw = {st[0]: st for st in f.raw_stats}
    rows = f.record_count
    values, nulls_out, lower, upper = [], [], [], []
    for cid, t, ice, fast in _plan(columns, schema):
        if cid not in held:
            continue
        values.append({"key": cid, "value": rows})
        st = raw.get(cid)
        if st is None:
            continue
        _, lo, hi, nulls = st
        if type(nulls) is int and nulls >= 0:
            nulls_out.append({"key": cid, "value": nulls})
        if lo is not None:
            b = fast(lo, False)
            if b is _SLOW:
                b = _bound(lo, t, ice, False)
            if b is not None:
                lower.append({"key": cid, "value": b})
        if hi is not None:
            b = fast(hi, True)
            if b is _SLOW:
                b = _bound(hi, t, ice, True)
            if b is not None:
                upper.append({"key": cid, "value": b})
    return {
        "value_counts": values,
        "null_value_counts": nulls_out,
        "lower_bounds": lower,
        "upper_bounds": upper,
    }
