"""Terms, literal typing and the casts of ``update``: values, not syntax.

Translating SQL (:mod:`lakehouse.data.sql`) yields *terms*. A term is either
a :class:`Typed` Arrow expression, whose type Arrow has already bound, or a
:class:`Literal` that has no type yet: SQL's ``100`` or ``'2024-01-02'``
means different things next to different columns, so a literal stays untyped
until it meets one (the *hint*), and :func:`literal_scalar` then makes it an
Arrow scalar of a type comparable with the hint, exactly or not at all::

    literal        hint                     scalar
    100            None                     int64 100
    100            int32                    int32 100
    100            decimal128(10, 2)        decimal128(3, 0) 100   (its own digits)
    100            float32                  float 100.0            (exact up to 2**24)
    1.5            None                     double 1.5
    '2024-01-02'   date32                   date32 2024-01-02
    '2024-01-02'   timestamp[us, tz=UTC]    midnight in the column's zone
    '2024-13-01'   date32                   ValueError: not a date
    'abc'          int64                    ValueError: not a valid int64

Timestamps keep nanoseconds exactly (Python's datetime stops at micro), and
a time written with an offset is an instant, refused for a column without a
time zone.

``update`` assigns a value to a column, and the second half of this module
decides which assignments are allowed. An expression's value may be widened
along :data:`_SAFE_CASTS` (int to decimal, date to timestamp...), cast when
the update runs, so a value that does not fit raises then; a literal is
converted now, and may also narrow when the value survives exactly (``2.0``
into an int column, not ``2.5``). :func:`sql_cast` is SQL's ``CAST``, which
truncates a fraction instead.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc

ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)
"""What Arrow raises for a value or a type it cannot handle."""

_INT64 = (-(1 << 63), (1 << 63) - 1)
_UINT64_MAX = (1 << 64) - 1
_FRACTION = re.compile(r"^(.*?\d{2}:\d{2}:\d{2})\.(\d{7,})(.*)$")


@dataclass(frozen=True)
class Typed:
    """A translated sub-expression and its Arrow type."""

    expr: pc.Expression
    type: pa.DataType


@dataclass(frozen=True)
class Literal:
    """A literal whose Arrow type is decided by what it meets (see the module docstring).

    ``kind`` is ``"number"`` (``value`` the SQL text), ``"string"``,
    ``"timestamp"`` (``TIMESTAMP '...'``), ``"bool"`` or ``"null"``.
    """

    kind: str
    value: Any


Term = Typed | Literal


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (Arrow's run long), or its class name."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


# ---------------------------------------------------------------------------
# literals
# ---------------------------------------------------------------------------


def literal_scalar(literal: Literal, hint: pa.DataType | None) -> pa.Scalar:
    """A SQL literal as an Arrow scalar, typed by the type it meets (``hint``) where exact."""
    kind, value = literal.kind, literal.value
    if kind == "null":
        return pa.scalar(None, hint if hint is not None else pa.null())
    if kind == "bool":
        return pa.scalar(value, pa.bool_())
    if kind == "number":
        return _number_scalar(value, hint)
    if kind == "timestamp" or (hint is not None and pa.types.is_timestamp(hint)):
        return timestamp_scalar(
            value, hint if hint is not None and pa.types.is_timestamp(hint) else None
        )
    return _string_scalar(value, hint)


def _number_scalar(text: str, hint: pa.DataType | None) -> pa.Scalar:
    integral = re.fullmatch(r"-?\d+", text) is not None
    if hint is not None and pa.types.is_decimal(hint):
        try:
            return pa.scalar(Decimal(text))  # its own precision and scale: exact
        except (InvalidOperation, *ARROW_ERRORS):
            pass
    if not integral:
        return pa.scalar(float(text), pa.float64())
    number = int(text)
    if hint is not None and pa.types.is_integer(hint) and _fits(number, hint):
        return pa.scalar(number, hint)
    if hint is not None and pa.types.is_floating(hint):
        exact = abs(number) <= (1 << (24 if hint == pa.float32() else 53))
        if exact and not pa.types.is_float16(hint):
            return pa.scalar(float(number), hint)
    if _INT64[0] <= number <= _INT64[1]:
        return pa.scalar(number, pa.int64())
    if 0 <= number <= _UINT64_MAX:
        return pa.scalar(number, pa.uint64())
    raise ValueError(f"integer literal {text} is out of the 64-bit range")


def _fits(number: int, int_type: pa.DataType) -> bool:
    bits = cast(int, int_type.bit_width)
    if pa.types.is_signed_integer(int_type):
        return -(1 << (bits - 1)) <= number < (1 << (bits - 1))
    return 0 <= number < (1 << bits)


def _string_scalar(text: str, hint: pa.DataType | None) -> pa.Scalar:
    if hint is None or pa.types.is_null(hint):
        return pa.scalar(text, pa.string())
    if pa.types.is_string(hint) or pa.types.is_large_string(hint) or pa.types.is_string_view(hint):
        return pa.scalar(text, hint)
    if pa.types.is_binary(hint) or pa.types.is_large_binary(hint):
        return pa.scalar(text.encode(), hint)
    if pa.types.is_date(hint):
        try:
            return pa.scalar(dt.date.fromisoformat(text), hint)
        except ValueError:
            raise ValueError(f"{text!r} is not a date (YYYY-MM-DD)") from None
    if pa.types.is_time(hint):
        try:
            return pa.scalar(dt.time.fromisoformat(text), pa.time64("us")).cast(hint, safe=True)
        except (ValueError, *ARROW_ERRORS):
            raise ValueError(f"{text!r} is not a time of day (HH:MM:SS[.ffffff])") from None
    if pa.types.is_decimal(hint):
        try:
            return pa.scalar(Decimal(text))
        except (InvalidOperation, *ARROW_ERRORS):
            raise ValueError(f"{text!r} is not a decimal number") from None
    if pa.types.is_integer(hint) or pa.types.is_floating(hint) or pa.types.is_boolean(hint):
        try:
            return pa.scalar(text).cast(hint, safe=True)
        except ARROW_ERRORS:
            raise ValueError(f"{text!r} is not a valid {hint}") from None
    return pa.scalar(text, pa.string())  # the operator will say what it cannot compare


def timestamp_scalar(text: str, hint: pa.DataType | None) -> pa.Scalar:
    """``text`` (ISO 8601) as a timestamp comparable with ``hint`` (a timestamp type, or None).

    A time without an offset is read in ``hint``'s time zone; a time with an
    offset is an instant, refused for a ``hint`` without a time zone.
    """
    nanos = 0
    base = text.strip()
    match = _FRACTION.match(base)
    if match:  # more digits than Python's microseconds: nanoseconds, exactly
        digits = match.group(2)
        if len(digits) > 9 and int(digits[9:]):
            raise ValueError(f"{text!r} is more precise than nanoseconds")
        nanos = int(digits[:9].ljust(9, "0"))
        base = match.group(1) + match.group(3)
    try:
        parsed = dt.datetime.fromisoformat(base)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a timestamp (YYYY-MM-DD HH:MM:SS[.ffffff][+HH:MM])"
        ) from None
    tz = hint.tz if hint is not None else None
    unit = "ns" if nanos or (hint is not None and hint.unit == "ns") else "us"
    if parsed.tzinfo is not None:
        if hint is not None and tz is None:
            raise ValueError(
                f"{text!r} has a time zone offset; the column's {hint} has no time zone"
            )
        scalar = pa.scalar(parsed, pa.timestamp(unit, tz=tz or "UTC"))
    else:
        scalar = pa.scalar(parsed, pa.timestamp(unit))
        if tz is not None:
            try:
                local = pc.assume_timezone(pa.array([scalar]), timezone=tz)
            except ARROW_ERRORS as exc:
                raise ValueError(f"{text!r} in time zone {tz}: {first_line(exc)}") from None
            scalar = local[0]
    if nanos:
        scalar = pa.scalar(scalar.cast(pa.int64()).as_py() + nanos, scalar.type)
    return scalar


# ---------------------------------------------------------------------------
# casts and update values
# ---------------------------------------------------------------------------


def sql_cast(target: pa.DataType) -> pc.CastOptions:
    """SQL's CAST: a fraction is truncated toward zero; an overflow or a bad string raises."""
    return pc.CastOptions(
        target, allow_decimal_truncate=True, allow_float_truncate=True, allow_time_truncate=True
    )


def _family(t: pa.DataType) -> str:
    for name, test in (
        ("null", pa.types.is_null),
        ("bool", pa.types.is_boolean),
        ("int", pa.types.is_integer),
        ("float", pa.types.is_floating),
        ("decimal", pa.types.is_decimal),
        ("string", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)),
        ("binary", lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t)),
        ("date", pa.types.is_date),
        ("timestamp", pa.types.is_timestamp),
        ("time", pa.types.is_time),
        ("duration", pa.types.is_duration),
    ):
        if test(t):
            return name
    return str(t)


_SAFE_CASTS = {  # (from family, to family) an expression's value may be cast along
    ("int", "int"),
    ("int", "float"),
    ("int", "decimal"),
    ("float", "float"),
    ("decimal", "decimal"),
    ("decimal", "float"),
    ("string", "string"),
    ("binary", "binary"),
    ("date", "date"),
    ("date", "timestamp"),
    ("time", "time"),
    ("duration", "duration"),
}
_LITERAL_CASTS = {("float", "int"), ("float", "decimal"), ("decimal", "int")}  # checked now


def assignable(src: pa.DataType, dst: pa.DataType, literal: bool = False) -> bool:
    """Whether a value of type ``src`` may be assigned to a column of type ``dst``.

    An expression (``literal=False``) only along :data:`_SAFE_CASTS`; a
    literal also along :data:`_LITERAL_CASTS`, its value checked when converted.
    """
    if src == dst or pa.types.is_null(src):
        return True
    pair = (_family(src), _family(dst))
    if pair == ("timestamp", "timestamp"):
        return (src.tz is None) == (dst.tz is None)
    return pair in _SAFE_CASTS or (literal and pair in _LITERAL_CASTS)


def widening_cast(term: Typed, target: pa.DataType) -> pc.Expression:
    """``term`` safely cast to ``target`` (a value that does not fit raises when evaluated)."""
    expr = term.expr
    if pa.types.is_integer(term.type) and pa.types.is_decimal(target) and target.scale <= 18:
        # Arrow wants room for any integer (19 digits) before the point; go through 38
        expr = expr.cast(pa.decimal128(38, target.scale), safe=True)
    return expr.cast(target, safe=True)


def assign_scalar(scalar: pa.Scalar, target: pa.Field, what: str) -> pa.Scalar:
    """``scalar`` converted exactly to ``target``'s type, or ValueError naming the column."""
    if not scalar.is_valid and not target.nullable:
        raise ValueError(f"column {target.name!r} is not nullable; cannot set it to {what}")
    if scalar.type == target.type:
        return scalar
    if not assignable(scalar.type, target.type, literal=True):
        raise ValueError(
            f"cannot assign {what} ({scalar.type}) to column {target.name!r} ({target.type})"
        )
    try:
        return scalar.cast(target.type, safe=True)
    except (*ARROW_ERRORS, OverflowError) as exc:
        raise ValueError(
            f"cannot assign {what} to column {target.name!r} ({target.type}) exactly:"
            f" {first_line(exc)}"
        ) from None


def python_scalar(value: Any, target: pa.Field) -> pa.Scalar:
    """A non-string Python value as an Arrow scalar, before conversion to the column's type."""
    if value is None:
        return pa.scalar(None, target.type)
    if isinstance(value, dt.datetime) and pa.types.is_timestamp(target.type):
        if value.tzinfo is None:
            return timestamp_scalar(value.isoformat(), target.type)
        if target.type.tz is None:
            raise ValueError(
                f"cannot assign {value!r} (with a time zone) to column {target.name!r}"
                f" ({target.type}, without one)"
            )
    if (
        isinstance(value, dt.date)
        and not isinstance(value, dt.datetime)
        and pa.types.is_timestamp(target.type)
    ):  # midnight, in the column's time zone
        return timestamp_scalar(value.isoformat(), target.type)
    if pa.types.is_decimal(target.type) and isinstance(value, int | float):
        if isinstance(value, bool):
            raise ValueError(f"cannot assign {value!r} to column {target.name!r} ({target.type})")
        value = Decimal(repr(value) if isinstance(value, float) else value)  # shortest digits
    if isinstance(value, bytearray | memoryview):
        value = bytes(value)
    nested = pa.types.is_nested(target.type)  # a list or dict: Arrow needs the type
    if pa.types.is_struct(target.type) and isinstance(value, dict):
        unknown = sorted(set(map(str, value)) - {f.name for f in target.type})
        if unknown:  # Arrow would drop them silently
            raise ValueError(
                f"cannot assign {value!r} to column {target.name!r} ({target.type}):"
                f" it has no field(s) {unknown}"
            )
    try:
        return pa.scalar(value, target.type) if nested else pa.scalar(value)
    except (*ARROW_ERRORS, OverflowError, TypeError) as exc:
        raise ValueError(
            f"cannot assign {value!r} to column {target.name!r} ({target.type}): {first_line(exc)}"
        ) from None
