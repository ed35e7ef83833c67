"""Partition values as bytes: the order-preserving key text, the record's JSON
form and Iceberg's bucket hash (the pure helpers of lakehouse/partition.py).

Every partition value has a *kind* fixed by its Arrow type (``int``, ``bool``,
``float``, ``decimal``, ``str``, ``bytes``, ``date``, ``time``, ``ts``) and
three forms besides the Python value:

* :func:`enc`, the key text inside file ids (see partition.py's docstring):
  ``0`` for null, else ``1`` and an order-preserving, self-delimiting body;
* :func:`to_raw` / :func:`from_raw`, the JSON the data-file record stores
  (Iceberg's single-value JSON: numbers, decimal and ISO date/time strings,
  hex for bytes);
* :func:`iceberg_long` / :func:`hash_value`, what Iceberg's murmur3 bucket
  hash sees (spec Appendix B), with a numpy twin for whole arrays.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from decimal import Decimal
from typing import Any
from uuid import UUID

import mmh3
import numpy as np
import pyarrow as pa

EPOCH = dt.datetime(1970, 1, 1)
EPOCH_DAY = EPOCH.date().toordinal()
_US = dt.timedelta(microseconds=1)
_I64 = 2**63
_I128 = 2**127
_DOUBLE = struct.Struct(">d")
_QWORD = struct.Struct(">Q")
_LONG_LE = struct.Struct("<q")


def kind(t: pa.DataType) -> str | None:
    """The kind of a partition value of Arrow type ``t`` (None: not partitionable)."""
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_integer(t):
        return None if t == pa.uint64() else "int"  # uint64 does not fit Iceberg's long
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_decimal(t):
        return "decimal" if t.precision <= 38 else None
    if pa.types.is_string(t) or pa.types.is_large_string(t) or is_string_view(t):
        return "str"
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or bool(getattr(pa.types, "is_binary_view", lambda _: False)(t))
    ):
        return "bytes"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_time(t):
        return "time"
    if pa.types.is_timestamp(t):
        return "ts"
    return None


def is_string_view(t: pa.DataType) -> bool:
    return bool(getattr(pa.types, "is_string_view", lambda _: False)(t))  # pyarrow >= 16


def is_ns(t: pa.DataType) -> bool:
    return bool(pa.types.is_timestamp(t) and t.unit == "ns")


# -- Python value -> integer --------------------------------------------------------------
def unscaled(v: Any, scale: int) -> int:
    """The unscaled integer of decimal ``v`` at ``scale`` (ValueError if inexact)."""
    if isinstance(v, bool) or not isinstance(v, int | Decimal):
        raise ValueError(f"{v!r} is not a decimal")
    sign, digits, exp = Decimal(v).as_tuple()
    if not isinstance(exp, int):
        raise ValueError(f"{v!r} is not a finite decimal")
    n = int("".join(map(str, digits)) or "0")
    shift = exp + scale
    if shift >= 0:
        n *= 10**shift
    elif n % 10**-shift:
        raise ValueError(f"{v!r} has more than {scale} decimal places")
    else:
        n //= 10**-shift
    return int(-n if sign else n)


def decimal_bytes(n: int) -> bytes:
    """Unscaled decimal ``n`` as Iceberg stores it: two's-complement big-endian,
    in the fewest bytes that hold it."""
    return n.to_bytes((n if n >= 0 else ~n).bit_length() // 8 + 1, "big", signed=True)


def to_int(v: Any, k: str, t: pa.DataType) -> int:
    """The integer an int/bool/date/time/ts value is keyed by: days for dates,
    microseconds for times and timestamps (nanoseconds for ``timestamp[ns]``)."""
    if k in ("int", "bool"):
        if not isinstance(v, int):
            raise ValueError(f"{v!r} is not an integer")
        return int(v)
    if k == "date":
        if not isinstance(v, dt.date) or isinstance(v, dt.datetime):
            raise ValueError(f"{v!r} is not a date")
        return v.toordinal() - EPOCH_DAY
    if k == "time":
        if not isinstance(v, dt.time):
            raise ValueError(f"{v!r} is not a time")
        return ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond
    if k == "ts":
        if not isinstance(v, dt.datetime):
            raise ValueError(f"{v!r} is not a timestamp")
        try:
            return int(pa.scalar(v, pa.timestamp("ns" if is_ns(t) else "us")).value)
        except (pa.ArrowException, OverflowError) as e:
            raise ValueError(f"{v!r} is out of range for {t}") from e
    raise ValueError(f"a {t} value is not an integer")


def from_int(n: int, k: str, t: pa.DataType) -> Any:
    if k == "int":
        return n
    if k == "bool":
        return bool(n)
    if k == "date":
        return dt.date.fromordinal(n + EPOCH_DAY)
    if k == "time":
        s, us = divmod(n, 1_000_000)
        return dt.time(s // 3600, s // 60 % 60, s % 60, us)
    return pa.scalar(n, pa.timestamp("ns" if is_ns(t) else "us", t.tz)).as_py()


# -- the key text ---------------------------------------------------------------------------
def _float_bits(v: float) -> int:
    if math.isnan(v):
        v = math.nan  # one NaN, sorting above +inf
    b = int(_QWORD.unpack(_DOUBLE.pack(v))[0])
    return b ^ 0xFFFFFFFFFFFFFFFF if b >> 63 else b | _I64


def enc(v: Any, t: pa.DataType) -> str:
    """The key text of partition value ``v`` of type ``t`` (ValueError if it is not one)."""
    if v is None:
        return "0"
    k = kind(t)
    if k == "float":
        if isinstance(v, bool) or not isinstance(v, float | int):
            raise ValueError(f"{v!r} is not a float")
        return f"1{_float_bits(float(v)):016x}"
    if k == "decimal":
        n = unscaled(v, t.scale)
        if abs(n) >= 10**t.precision:
            raise ValueError(f"{v!r} does not fit {t}")
        return f"1{n + _I128:032x}"
    if k == "str":
        if not isinstance(v, str):
            raise ValueError(f"{v!r} is not a string")
        return "1" + v.encode("utf-8").hex()
    if k == "bytes":
        if not isinstance(v, bytes | bytearray | memoryview):
            raise ValueError(f"{v!r} is not bytes")
        return "1" + bytes(v).hex()
    n = to_int(v, k or "", t)
    if not -_I64 <= n < _I64:
        raise ValueError(f"{v!r} does not fit a 64-bit integer")
    return f"1{n + _I64:016x}"


# -- the record's JSON -----------------------------------------------------------------------
def to_raw(v: Any, t: pa.DataType) -> Any:
    """``v`` as the JSON the record keeps."""
    enc(v, t)  # validates
    k = kind(t)
    if v is None or k in ("int", "bool", "str"):
        return v
    if k == "float":
        f = float(v)
        return f if math.isfinite(f) else repr(f)  # "nan", "inf", "-inf"
    if k == "decimal":
        return str(Decimal(unscaled(v, t.scale)).scaleb(-t.scale))
    if k == "bytes":
        return bytes(v).hex()
    if k in ("date", "time"):
        return str(v.isoformat())
    n = to_int(v, "ts", t)
    per = 10**9 if is_ns(t) else 10**6
    secs, frac = divmod(n, per)
    try:
        day = (EPOCH + dt.timedelta(seconds=secs)).isoformat(timespec="seconds")
    except OverflowError as e:
        raise ValueError(f"{v!r} is out of range for {t}") from e
    return f"{day}.{frac:0{len(str(per)) - 1}d}" + ("+00:00" if t.tz else "")


def from_raw(raw: Any, t: pa.DataType) -> Any:
    """Inverse of :func:`to_raw` (ValueError if ``raw`` is not one)."""
    if raw is None:
        return None
    k = kind(t)
    try:
        if k == "float" and isinstance(raw, str) and raw in ("nan", "inf", "-inf"):
            v: Any = float(raw)
        elif k == "float" and isinstance(raw, int | float) and not isinstance(raw, bool):
            v = float(raw)
        elif k in ("int", "str") or (k == "bool" and isinstance(raw, bool)):
            v = raw
        elif not isinstance(raw, str):
            raise ValueError("wrong JSON type")
        elif k == "decimal":
            v = Decimal(raw)
        elif k == "bytes":
            v = bytes.fromhex(raw)
        elif k == "date":
            v = dt.date.fromisoformat(raw)
        elif k == "time":
            v = dt.time.fromisoformat(raw)
        elif k == "ts":
            text = raw.removesuffix("+00:00")
            head, _, frac = text.partition(".")
            per = 10**9 if is_ns(t) else 10**6
            if len(frac) != len(str(per)) - 1 or not frac.isdigit():
                raise ValueError("bad fraction")
            secs = (dt.datetime.fromisoformat(head) - EPOCH) // dt.timedelta(seconds=1)
            v = from_int(secs * per + int(frac), "ts", t)
        else:
            raise ValueError("unsupported type")
        enc(v, t)
    except (ValueError, TypeError, ArithmeticError) as e:
        raise ValueError(f"malformed partition value {raw!r} for type {t}: {e}") from None
    return v


# -- Iceberg's bucket hash -------------------------------------------------------------------
def iceberg_long(v: Any, k: str, t: pa.DataType) -> int:
    """The long Iceberg hashes for an int/date/time/timestamp value (timestamps
    and times in microseconds, also for nanosecond columns)."""
    n = to_int(v, k, t)
    return n // 1000 if is_ns(t) else n


def hash_bytes(v: Any, t: pa.DataType) -> bytes:
    """The bytes Iceberg's murmur3 hashes for ``v`` (spec Appendix B)."""
    k = kind(t)
    if k in ("int", "date", "time", "ts"):
        return _LONG_LE.pack(iceberg_long(v, k, t))
    if k == "decimal":
        return decimal_bytes(unscaled(v, t.scale))
    if k == "str" and isinstance(v, str):
        return v.encode("utf-8")
    if k == "bytes" and isinstance(v, UUID):
        return v.bytes
    if k == "bytes" and isinstance(v, bytes | bytearray | memoryview):
        return bytes(v)
    if k in ("str", "bytes"):
        raise ValueError(f"{v!r} is not a {t} value")
    raise ValueError(f"{t} values cannot be bucketed (Iceberg hashes no {k} values)")


def hash_value(v: Any, t: pa.DataType) -> int:
    return int(mmh3.hash(hash_bytes(v, t), 0, signed=True))


_M32 = np.uint64(0xFFFFFFFF)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return ((x << np.uint64(r)) | (x >> np.uint64(32 - r))) & _M32


def murmur3_longs(v: np.ndarray) -> np.ndarray:
    """Iceberg's ``hashLong`` (murmur3_x86_32, seed 0, of 8 little-endian bytes)
    of every int64 in ``v``, as int32: the vectorised twin of :func:`hash_value`."""
    u = v.astype(np.int64).view(np.uint64)
    h = np.zeros(len(u), dtype=np.uint64)
    for block in (u & _M32, u >> np.uint64(32)):
        k = (block * np.uint64(0xCC9E2D51)) & _M32
        k = (_rotl(k, 15) * np.uint64(0x1B873593)) & _M32
        h = _rotl(h ^ k, 13)
        h = (h * np.uint64(5) + np.uint64(0xE6546B64)) & _M32
    h ^= np.uint64(8)
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x85EBCA6B)) & _M32
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(0xC2B2AE35)) & _M32
    h ^= h >> np.uint64(16)
    return h.astype(np.uint32).view(np.int32)
