"""Command-line text -> values: schemas, properties, times, durations, options.

Each ``parse_*`` function raises :class:`ValueError` naming what is wrong;
:func:`arg` wraps one as an ``argparse`` type, so a bad value is a usage
error (exit status 2) with that message rather than argparse's generic
"invalid value".
"""

from __future__ import annotations

import argparse
import math
import re
import urllib.parse
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pyarrow as pa

from kvstore.cli.store import option_value

_DECIMAL = re.compile(r"^decimal(128|256)?\((\d+)\s*,\s*(-?\d+)\)$")
_LIST = re.compile(r"^list<(.+)>$")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
#: a century: a duration no clock reaches (also what ``inf`` would mean)
_MAX_SECONDS = 100 * 365 * 86400.0

T = TypeVar("T")


def arg(fn: Callable[[str], T]) -> Callable[[str], T]:
    """``fn`` as an argparse ``type=``: its ValueError becomes the usage message."""

    def convert(text: str) -> T:
        try:
            return fn(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = fn.__name__
    return convert


def parse_type(text: str) -> pa.DataType:
    """An Arrow type alias (``int64``, ``timestamp[us]``...), ``decimal128(p,s)``, ``list<T>``."""
    t = text.strip()
    m = _LIST.match(t)
    if m:
        return pa.list_(parse_type(m.group(1)))
    m = _DECIMAL.match(t)
    if m:
        bits, p, s = m.groups()
        return (pa.decimal256 if bits == "256" else pa.decimal128)(int(p), int(s))
    try:
        return pa.type_for_alias(t)
    except (ValueError, KeyError):
        raise ValueError(
            f"unknown column type {t!r} (e.g. int64, string, float64, bool, "
            "date32, timestamp[us], decimal128(10,2), list<string>)"
        ) from None


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside ``()``, ``<>`` or ``[]``."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for c in text:
        if c in "(<[":
            depth += 1
        elif c in ")>]":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def parse_schema(text: str) -> pa.Schema:
    """``'id:int64!,name:string'`` -> a schema (``!`` marks a NOT NULL column)."""
    fields = []
    for part in _split_top(text):
        if ":" not in part:
            raise ValueError(f"column {part!r} must be written name:type")
        name, typ = part.split(":", 1)
        nullable = not typ.strip().endswith("!")
        fields.append(pa.field(name.strip(), parse_type(typ.strip().rstrip("!")), nullable))
    if not fields:
        raise ValueError("the schema has no columns")
    return pa.schema(fields)


def parse_pair(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` (the value may be empty or hold more ``=``)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def parse_props(items: list[tuple[str, str]] | list[str] | None) -> dict[str, str]:
    """Repeated ``KEY=VALUE`` arguments (already split, or as text) -> a dict."""
    out: dict[str, str] = {}
    for item in items or ():
        k, v = parse_pair(item) if isinstance(item, str) else item
        out[k] = v
    return out


def storage_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` for fsspec. A value that parses as JSON is that JSON value
    (``anon=true`` -> True, ``max_concurrency=4`` -> 4, ``config_kwargs={"connect_timeout":
    1}`` -> a dict, for nested options); any other value stays a string
    (``endpoint_url=http://...``). ``True``/``False`` in any case are booleans too.
    Quote a value to keep it a string: ``key='"12345"'``."""
    key, value = parse_pair(text)
    return key, option_value(value)


def parse_time(text: str) -> int | datetime:
    """Epoch milliseconds, or ISO 8601 (a time without a zone is taken as UTC)."""
    if re.fullmatch(r"-?\d+", text.strip()):
        return int(text)
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"time {text!r} is neither epoch milliseconds nor ISO 8601") from None
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


def _duration(text: str) -> timedelta | None:
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        return None
    value = timedelta(**{_UNITS[m.group(2)]: float(m.group(1))})
    if value.total_seconds() > _MAX_SECONDS:
        raise ValueError(f"duration {text!r} is longer than a century")
    return value


def parse_age(text: str) -> timedelta | int | datetime:
    """``expire --older-than``: a duration ago (``7d``, ``12h``, ``30m``, ``45s``), or a
    point in time (epoch milliseconds or ISO 8601)."""
    return _duration(text) or parse_time(text)


def parse_duration(text: str) -> timedelta:
    """A number of seconds, or ``7d`` / ``12h`` / ``30m`` / ``45s``."""
    found = _duration(text)
    if found is not None:
        return found
    try:
        seconds = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is neither seconds nor a duration like 7d, 12h, 30m") from None
    if seconds < 0 or math.isnan(seconds):
        raise ValueError(f"seconds must be >= 0, got {text!r}")
    if seconds > _MAX_SECONDS:
        raise ValueError(f"seconds must be at most {_MAX_SECONDS:.0f}, got {text!r}")
    return timedelta(seconds=seconds)


def parse_seconds(text: str) -> float:
    """A positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= _MAX_SECONDS:
        raise ValueError(f"seconds must be > 0 and at most {_MAX_SECONDS:.0f}, got {text!r}")
    return value


def _int(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ValueError(f"must be an integer >= {minimum}, got {text!r}")
    return value


def count(text: str) -> int:
    """An integer >= 0 (``--limit``, ``-n``)."""
    return _int(text, 0)


def positive(text: str) -> int:
    """An integer >= 1."""
    return _int(text, 1)


def version(text: str) -> int:
    """A lakehouse version number (>= 0)."""
    return _int(text, 0)


def parse_columns(text: str) -> list[str]:
    """``a,b,c`` -> ``["a", "b", "c"]`` (no empty names)."""
    names = [n.strip() for n in text.split(",")]
    if not text.strip() or any(not n for n in names):
        raise ValueError(f"expected column names separated by commas, got {text!r}")
    return names


def where(text: str) -> str:
    """A SQL boolean expression (checked against the table by the lakehouse)."""
    if not text.strip():
        raise ValueError("the WHERE condition is empty")
    return text


def partition_filter(text: str) -> list[tuple[str, str]]:
    """``--partition`` text -> ``[(field name, value text)]``: ``name=value``, several
    joined by ``/`` as ``partitions`` prints them; ``%XX`` escapes are undone."""
    out = []
    for item in text.split("/"):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(
                f"expected FIELD=VALUE (e.g. ts_day=2024-01-02; several joined by '/'), "
                f"got {text!r}"
            )
        out.append((urllib.parse.unquote(name.strip()), urllib.parse.unquote(value)))
    return out
