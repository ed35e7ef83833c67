"""Pruning files by column bounds, in Python, from a predicate's terms.

A read with a ``where`` opens only the files that may hold a matching row.
The predicate's terms (:mod:`lakehouse.terms`, derived from its SQL by
:mod:`lakehouse.data.sql_terms`) are facts every matching row satisfies;
a file's record carries, per column, a lower and an upper bound of its
non-null values and its null count (:mod:`lakehouse.data.stats`). A file
is skipped when one term is false for every row its bounds allow::

    term            the file may match when                 (lo, hi: its bounds)
    c = v           lo <= v <= hi
    c in (vs)       some v with lo <= v <= hi
    c < v, c <= v   lo < v, lo <= v
    c > v, c >= v   hi > v, hi >= v
    c is null       it may hold a null (null count unknown or > 0, or no column c)
    c not null      not every row is null; comparisons need that too

A missing bound allows everything on its side; a bound that cannot be
compared with the term's value (another kind of value, a naive against an
aware time) keeps the file. Bounds are decoded with the column's current
type by :func:`lakehouse.data.stats.stat_scalar`, so truncated string
bounds, temporal units and decimals mean what the footer stored; temporal
values are compared as integer nanoseconds (Python's ``datetime`` stops at
microseconds), others as their ``as_py()`` values.

Decoding is the costly part (a few microseconds a bound), and file records
are immutable and shared between reads (:func:`lakehouse.data.record.decode_file`
caches them by their bytes), so each record keeps its decoded bounds, per
column id and type, for as long as it lives (:data:`_DECODED`, keyed by the
record's identity and dropped with it). Planning a read then costs well
under a microsecond per file and term.
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
import weakref
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa

from lakehouse.data.stats import stat_scalar
from lakehouse.model import Column, DataFile
from lakehouse.terms import Term

__all__ = ["prune"]

#: bounds of one column in one file: (lower, upper, null count, absent from the file)
Bounds = tuple[Any, Any, int | None, bool]

_NS_PER = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
_NS_PER_DAY = 86_400 * 10**9
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class _Incomparable(Exception):
    """A term value that cannot be compared with the column's bounds."""


def prune(
    files: Sequence[DataFile], terms: Sequence[Term], columns: Sequence[Column], schema: pa.Schema
) -> list[int]:
    """Indexes of the ``files`` whose bounds allow a row satisfying every term.

    ``columns`` are the table's current columns (terms name them), ``schema``
    gives their types. A term on a column not in ``columns``, or with a value
    that cannot be compared with the column's bounds, prunes nothing.
    """
    checks = _checks(terms, columns, schema)
    if not checks:
        return list(range(len(files)))
    keep = []
    for i, f in enumerate(files):
        decoded = _decoded(f)
        for key, cid, typ, allows in checks:
            b = decoded.get(key)
            if b is None:
                b = decoded[key] = _decode(f, cid, typ)
            try:
                if not allows(b, f.record_count):
                    break
            except (TypeError, ValueError, ArithmeticError):  # bounds we cannot compare
                continue
        else:
            keep.append(i)
    return keep


# -- terms as tests of one file's bounds ------------------------------------------------------
Allows = Callable[[Bounds, int], bool]


def _checks(
    terms: Sequence[Term], columns: Sequence[Column], schema: pa.Schema
) -> list[tuple[str, int, pa.DataType, Allows]]:
    """Per term: (cache key, column id, column type, its test of a file's bounds)."""
    by_name = {c.name: c for c in columns}
    out = []
    for term in terms:
        c = by_name.get(term.column)
        if c is None or c.name not in schema.names:
            continue
        typ = schema.field(c.name).type
        try:
            out.append((f"{c.id}/{typ}", c.id, typ, _allows(term, typ)))
        except (_Incomparable, TypeError, ValueError, ArithmeticError):
            continue
    return out


def _allows(term: Term, typ: pa.DataType) -> Allows:
    """A test of one file's bounds of ``term``'s column: may a row satisfy ``term``?"""
    op = term.op
    if op == "is_null":
        return lambda b, rows: b[3] or b[2] is None or b[2] > 0
    if op == "not_null":
        return lambda b, rows: not _all_null(b, rows)
    keys = [_key(v, typ) for v in term.values]
    if op == "in":
        if not keys:
            raise _Incomparable("no values")
        keys = sorted(set(keys))
        return lambda b, rows: not _all_null(b, rows) and _any_between(keys, b[0], b[1])
    if len(keys) != 1:
        raise _Incomparable(f"{op} takes one value")
    v = keys[0]
    tests: dict[str, Allows] = {
        "=": lambda b, rows: (
            not _all_null(b, rows) and (b[0] is None or b[0] <= v) and (b[1] is None or v <= b[1])
        ),
        "<": lambda b, rows: not _all_null(b, rows) and (b[0] is None or b[0] < v),
        "<=": lambda b, rows: not _all_null(b, rows) and (b[0] is None or b[0] <= v),
        ">": lambda b, rows: not _all_null(b, rows) and (b[1] is None or b[1] > v),
        ">=": lambda b, rows: not _all_null(b, rows) and (b[1] is None or b[1] >= v),
    }
    if op not in tests:
        raise _Incomparable(f"unknown op {op!r}")
    return tests[op]


def _all_null(b: Bounds, rows: int) -> bool:
    return b[3] or (b[2] is not None and b[2] == rows and rows > 0)


def _any_between(keys: list[Any], lo: Any, hi: Any) -> bool:
    """Whether a value of the sorted ``keys`` lies in ``[lo, hi]`` (None: unbounded)."""
    i = 0 if lo is None else bisect.bisect_left(keys, lo)
    return i < len(keys) and (hi is None or keys[i] <= hi)


def _key(value: Any, typ: pa.DataType) -> Any:
    """A term value in the form bounds of ``typ`` are compared in (_Incomparable if none)."""
    if value is None:
        raise _Incomparable("null")
    if pa.types.is_boolean(typ):
        if isinstance(value, bool):
            return value
    elif pa.types.is_integer(typ):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif pa.types.is_floating(typ):
        if pa.types.is_float16(typ):
            raise _Incomparable("float16")
        if isinstance(value, float) and value == value:  # not NaN
            return value
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) <= 1 << 53:
            return float(value)
    elif pa.types.is_decimal(typ):
        if isinstance(value, Decimal) and value.is_finite():
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return Decimal(value)
    elif pa.types.is_string(typ) or pa.types.is_large_string(typ):
        if isinstance(value, str):
            return value
    elif pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        if isinstance(value, bytes):
            return value
    elif pa.types.is_timestamp(typ):
        if isinstance(value, dt.datetime) and (value.tzinfo is None) == (typ.tz is None):
            return _datetime_ns(value)
    elif pa.types.is_date(typ):
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            return (value - _EPOCH.date()).days * _NS_PER_DAY
    elif pa.types.is_time(typ):
        if isinstance(value, dt.time) and value.tzinfo is None:
            us = ((value.hour * 60 + value.minute) * 60 + value.second) * 10**6 + value.microsecond
            return us * 1000 + getattr(value, "nanosecond", 0)
    elif pa.types.is_duration(typ) and isinstance(value, dt.timedelta):
        ns = getattr(value, "value", None)  # a pandas Timedelta: nanoseconds
        if isinstance(ns, int):
            return ns
        return ((value.days * 86_400 + value.seconds) * 10**6 + value.microseconds) * 1000
    raise _Incomparable(f"{type(value).__name__} value for a {typ} column")


def _datetime_ns(value: dt.datetime) -> int:
    ns = getattr(value, "value", None)  # a pandas Timestamp: nanoseconds since the epoch (UTC)
    if isinstance(ns, int) and hasattr(value, "nanosecond"):
        return ns
    delta = value - (_EPOCH if value.tzinfo is None else _EPOCH_UTC)
    return ((delta.days * 86_400 + delta.seconds) * 10**6 + delta.microseconds) * 1000


# -- decoded bounds, kept with each record ----------------------------------------------------
#: id(record) -> (weak reference to it, its decoded bounds by "<column id>/<type>"); an
#: entry goes when its record is collected, so an id reused later never finds it
_DECODED: dict[int, tuple[weakref.ref[DataFile], dict[str, Bounds]]] = {}


def _decoded(f: DataFile) -> dict[str, Bounds]:
    key = id(f)
    entry = _DECODED.get(key)
    if entry is not None and entry[0]() is f:
        return entry[1]
    cache: dict[str, Bounds] = {}
    try:
        ref = weakref.ref(f, lambda _, key=key: _DECODED.pop(key, None))  # type: ignore[misc]
    except TypeError:  # no weak references: decode on every call
        return cache
    _DECODED[key] = (ref, cache)
    return cache


def _decode(f: DataFile, cid: int, typ: pa.DataType) -> Bounds:
    """Column ``cid``'s bounds in ``f`` read as ``typ``."""
    if f.columns and all(cid != c for c, _ in f.columns):
        return (None, None, f.record_count, True)  # the file predates the column
    for sid, lo, hi, nulls in f.raw_stats:
        if sid == cid:
            return (_bound(lo, typ, False), _bound(hi, typ, True), nulls, False)
    return (None, None, None, False)


def _bound(raw: Any, typ: pa.DataType, upper: bool) -> Any:
    if type(raw) is _PLAIN.get(typ.id):
        # stored as its Python value: what stat_scalar(...).as_py() gives, without
        # building a scalar (4 us), when it fits the type
        if isinstance(raw, int) and not isinstance(raw, bool):
            if _fits(raw, typ):
                return raw
        elif not isinstance(raw, float) or math.isfinite(raw):
            return raw
    s = stat_scalar(raw, typ, upper=upper)
    if s is None or not s.is_valid:
        return None
    try:
        if pa.types.is_temporal(typ):
            if pa.types.is_date32(typ):
                return s.value * _NS_PER_DAY
            if pa.types.is_date64(typ):
                return s.value * _NS_PER["ms"]
            return s.value * _NS_PER[typ.unit]
        value = s.as_py()
    except (pa.ArrowException, ValueError, TypeError, OverflowError, AttributeError, KeyError):
        return None
    if isinstance(value, float) and value != value:
        return None  # NaN bounds are never stored; never compare with one
    return value


#: Arrow type id -> the Python type a bound of that type is stored as, unchanged
#: (float32 is not here: its stored double is rounded to float32 by stat_scalar)
_PLAIN: dict[int, type] = {
    **{t.id: int for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64())},
    **{t.id: int for t in (pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())},
    pa.float64().id: float,
    pa.string().id: str,
    pa.large_string().id: str,
    pa.bool_().id: bool,
}


def _fits(n: int, typ: pa.DataType) -> bool:
    bits = typ.bit_width
    if pa.types.is_signed_integer(typ):
        return bool(-(1 << (bits - 1)) <= n < (1 << (bits - 1)))
    return bool(0 <= n < (1 << bits))
