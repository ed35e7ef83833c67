"""Partitions on the command line: ``partitions``, ``files --partition``, and the
spelling of partition values.

A partition is spelled as Iceberg and Hive spell its path:
``ts_day=2024-01-02/country=DE``, each value in Iceberg's human-readable form
(year ``2024``, month ``2024-01``, day ``2024-01-02``, hour ``2024-01-02-10``,
bucket and integers as numbers, dates and times in ISO 8601, binary as hex,
null as ``null``), with ``%``, ``/``, ``=`` and unprintable characters
percent-escaped. ``--partition`` takes the same spelling back: a value is read
as the field's type (a malformed one is a usage error), an unknown field name
is a failure naming the table's fields. JSON keeps the values as Iceberg stores
them (year/month/day/hour as ints counted from 1970).
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvstore.cli.codec import human_bytes, plural
from lakehouse.cli.render import json_value, spec_spelling, table_text
from lakehouse.cli.target import EXIT_OK, Ctx, usage
from lakehouse.model import DataFile, TableDef
from lakehouse.partition import PartitionField, PartitionSpec

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DAY = _EPOCH.date()
_MONTH = re.compile(r"(\d{4})-(\d{2})")
_HOUR = re.compile(r"(\d{4}-\d{2}-\d{2})-(\d{2})")
_ESCAPE = frozenset("%/=")
#: a spelling of unknown values (a source column dropped since)
UNKNOWN = "?"


# ---------------------------------------------------------------------------
# spelling values and partitions
# ---------------------------------------------------------------------------
def human(f: PartitionField, v: Any, source: pa.DataType | None = None) -> str:
    """One partition value in Iceberg's human-readable form (unescaped); ``source``,
    the source column's type, spells float32 values as float32 (``1.1``)."""
    if v is None:
        return "null"
    name = f.transform.name
    if name in ("year", "month", "day", "hour") and isinstance(v, int):
        if name == "year":
            return f"{_EPOCH.year + v:04d}"
        if name == "month":
            y, m = divmod(v, 12)
            return f"{_EPOCH.year + y:04d}-{m + 1:02d}"
        if name == "day":
            return (_EPOCH_DAY + dt.timedelta(days=v)).isoformat()
        return (_EPOCH + dt.timedelta(hours=v)).strftime("%Y-%m-%d-%H")
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dt.datetime):
        when: dt.datetime = v if v.tzinfo is None else v.astimezone(dt.UTC)
        return when.isoformat()
    if isinstance(v, (dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, float) and source is not None and pa.types.is_float32(source):
        return str(np.float32(v))
    return str(v)


def _escape(text: str) -> str:
    out = []
    for ch in text:
        if ch in _ESCAPE or not ch.isprintable():
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass")))
        else:
            out.append(ch)
    return "".join(out)


def spec_fields(d: TableDef, spec_id: int) -> tuple[PartitionField, ...]:
    try:
        return d.spec_by_id(spec_id).fields
    except KeyError:
        return ()


def path(d: TableDef, f: DataFile) -> str:
    """``f``'s partition as a path, ``ts_day=2024-01-02/country=DE`` ("" if unpartitioned;
    ``?`` for values that cannot be decoded any more)."""
    fields = spec_fields(d, f.spec_id)
    if not fields:
        return ""
    values = f.partition
    parts = []
    for i, field in enumerate(fields):
        if field.name in values:
            text = _escape(human(field, values[field.name], _source_type(d, field)))
        elif i < len(f.raw_partition):  # not decodable today: as stored
            text = _escape(str(f.raw_partition[i])) + UNKNOWN
        else:
            text = UNKNOWN
        parts.append(f"{_escape(field.name)}={text}")
    return "/".join(parts)


def specs(d: TableDef) -> tuple[PartitionSpec, ...]:
    """Every spec the table has had (spec 0 unpartitioned when it never was)."""
    return d.partition_specs or (d.spec,)


def partition_json(d: TableDef, f: DataFile) -> dict[str, Any]:
    return {k: json_value(v) for k, v in f.partition.items()}


# ---------------------------------------------------------------------------
# --partition
# ---------------------------------------------------------------------------
def _source_type(d: TableDef, f: PartitionField) -> pa.DataType | None:
    name = d.names_by_id.get(f.source_id)
    return None if name is None else d.schema.field(name).type


def _int(text: str) -> int:
    if not re.fullmatch(r"[+-]?\d+", text.strip()):
        raise ValueError("not an integer")
    return int(text)


def parse_value(f: PartitionField, source: pa.DataType | None, text: str) -> Any:
    """``text`` as a value of partition field ``f`` (as Iceberg stores it); ValueError
    saying what was expected."""
    if text == "null":
        return None
    name = f.transform.name
    try:
        if name == "year":
            return _int(text) - _EPOCH.year
        if name == "month":
            m = _MONTH.fullmatch(text.strip())
            if m is None or not 1 <= int(m.group(2)) <= 12:
                raise ValueError("expected YYYY-MM")
            return (int(m.group(1)) - _EPOCH.year) * 12 + int(m.group(2)) - 1
        if name == "day":
            return (dt.date.fromisoformat(text.strip()) - _EPOCH_DAY).days
        if name == "hour":
            m = _HOUR.fullmatch(text.strip())
            if m is None or int(m.group(2)) > 23:
                raise ValueError("expected YYYY-MM-DD-HH")
            days = (dt.date.fromisoformat(m.group(1)) - _EPOCH_DAY).days
            return days * 24 + int(m.group(2))
        if name == "bucket":
            n = _int(text)
            if f.transform.param is not None and not 0 <= n < f.transform.param:
                raise ValueError(f"bucket numbers are 0..{f.transform.param - 1}")
            return n
        return _typed(source, text)
    except ValueError as exc:
        raise ValueError(f"{f.name}={text!r}: {_expected(f, source, exc)}") from None


def _expected(f: PartitionField, source: pa.DataType | None, exc: ValueError) -> str:
    hints = {"year": "a year (2024)", "month": "a month (2024-01)", "day": "a date (2024-01-02)"}
    hints["hour"] = "an hour (2024-01-02-10)"
    hint = hints.get(f.transform.name)
    if hint is not None:
        return f"expected {hint} or null"
    if f.transform.name == "bucket":
        return f"expected a bucket number or null ({exc})"
    what = f"a value of type {source}" if source is not None else "a value"
    return f"expected {what} or null ({exc})"


def _typed(t: pa.DataType | None, text: str) -> Any:
    """Identity and truncate values: the column's own type."""
    if t is None:
        return text
    if pa.types.is_boolean(t):
        low = text.strip().lower()
        if low not in ("true", "false"):
            raise ValueError("expected true or false")
        return low == "true"
    if pa.types.is_integer(t):
        return _int(text)
    if pa.types.is_floating(t):
        return pa.scalar(float(text), t).as_py()  # float32 values as they are stored
    if pa.types.is_decimal(t):
        try:  # at the column's scale, as its values are: 1.5 is 1.50 of decimal(10,2)
            return decimal.Decimal(text.strip()).quantize(decimal.Decimal(1).scaleb(-t.scale))
        except decimal.InvalidOperation:
            raise ValueError("not a decimal number of that scale") from None
    if pa.types.is_date(t):
        return dt.date.fromisoformat(text.strip())
    if pa.types.is_timestamp(t):  # through Arrow: nanoseconds too; no zone given: UTC
        arr = pa.array([text.strip()], pa.string())
        naive = pa.timestamp(t.unit)
        if t.tz is None:
            return arr.cast(naive)[0].as_py()
        try:
            return arr.cast(t)[0].as_py()
        except pa.ArrowInvalid:
            return pc.assume_timezone(arr.cast(naive), "UTC").cast(t)[0].as_py()
    if pa.types.is_time(t):
        return dt.time.fromisoformat(text.strip())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return bytes.fromhex(text)
    return text


@dataclass(frozen=True)
class PartitionFilter:
    """``--partition`` conditions resolved against a table: a file matches when
    its spec has every named field and each value is the one given."""

    wanted: Mapping[int, Mapping[str, str]]  # spec id -> field name -> human value
    text: str

    def matches(self, d: TableDef, f: DataFile) -> bool:
        want = self.wanted.get(f.spec_id)
        if want is None:
            return False
        fields = {x.name: x for x in spec_fields(d, f.spec_id)}
        for name, value in want.items():
            if name not in f.partition:
                return False
            field = fields[name]
            if human(field, f.partition[name], _source_type(d, field)) != value:
                return False
        return True


def resolve(d: TableDef, conditions: Sequence[Sequence[tuple[str, str]]]) -> PartitionFilter:
    """Check every ``--partition`` condition against the table's specs.

    An unknown field is a ValueError naming the table's partition fields; a
    value that does not parse as its field's type a usage error; the same
    field given two different values matches nothing."""
    known = {f.name for s in specs(d) for f in s.fields}
    flat = [c for cs in conditions for c in cs]
    text = "/".join(f"{_escape(n)}={_escape(v)}" for n, v in flat)
    for name, _ in flat:
        if name not in known:
            have = ", ".join(sorted(known)) if known else "none: it is not partitioned"
            raise ValueError(
                f"table {d.qualified_name} has no partition field {name!r} "
                f"(its partition fields: {have})"
            )
    wanted: dict[int, dict[str, str]] = {}
    for s in specs(d):
        fields = {f.name: f for f in s.fields}
        if not all(name in fields for name, _ in flat):
            continue  # a spec without one of the fields: none of its files match
        want: dict[str, str] = {}
        conflict = False
        for name, value_text in flat:
            f = fields[name]
            try:
                source = _source_type(d, f)
                value = human(f, parse_value(f, source, value_text), source)
            except ValueError as exc:
                raise usage(f"--partition {exc}") from None
            if want.setdefault(name, value) != value:
                conflict = True
        if not conflict:
            wanted[s.spec_id] = want
    return PartitionFilter(wanted, text)


# ---------------------------------------------------------------------------
# partitions
# ---------------------------------------------------------------------------
def _order(v: Any) -> tuple[Any, ...]:
    return (0,) if v is None else (1, v)


def _sort_key(d: TableDef, f: DataFile) -> tuple[Any, ...]:
    values = tuple(f.partition.get(x.name) for x in spec_fields(d, f.spec_id))
    return (f.spec_id, tuple(_order(v) for v in values))


def summarize(d: TableDef, files: Sequence[DataFile]) -> list[dict[str, Any]]:
    """One entry per partition (spec id and values): files, rows, bytes; sorted by spec,
    then values (nulls first)."""
    groups: dict[tuple[int, str], list[DataFile]] = {}
    for f in files:
        groups.setdefault((f.spec_id, repr(f.raw_partition)), []).append(f)
    if not files and d.spec.is_unpartitioned:  # an empty unpartitioned table: one, empty
        return [_entry(d, d.spec_id, None, [])]
    keyed = [(_sort_key(d, fs[0]), fs) for fs in groups.values()]
    try:
        keyed.sort(key=lambda kv: kv[0])
    except TypeError:  # values of one field of different types (should not happen)
        keyed.sort(key=lambda kv: repr(kv[0]))
    return [_entry(d, fs[0].spec_id, fs[0], fs) for _, fs in keyed]


def _entry(
    d: TableDef, spec_id: int, first: DataFile | None, fs: Sequence[DataFile]
) -> dict[str, Any]:
    return {
        "spec_id": spec_id,
        "partition": {} if first is None else partition_json(d, first),
        "path": "" if first is None else path(d, first),
        "files": len(fs),
        "rows": sum(f.live_rows for f in fs),
        "deleted_rows": sum(f.deleted_rows for f in fs),
        "bytes": sum(f.bytes for f in fs),
    }


def cmd_partitions(ctx: Ctx) -> int:
    """``partitions URL TABLE``: one line per partition (spec, values), sorted."""
    table = ctx.args.table
    with ctx.target.open_reader() as r, ctx.view(r) as v:
        d = v.describe_table(table)
        files = v.list_data_files(table)
    parts = summarize(d, files)
    ctx.doc(
        {
            "table": d.qualified_name,
            "version": v.version,
            "spec_id": d.spec_id,
            "partition_by": list(spec_spelling(d, d.spec)),
            "partitions": parts,
        }
    )
    by = ", ".join(spec_spelling(d, d.spec)) or "nothing (unpartitioned)"
    rows = sum(p["rows"] for p in parts)
    size = sum(p["bytes"] for p in parts)
    ctx.line(
        f"{d.qualified_name} at version {v.version}, partitioned by {by}: "
        f"{plural(len(parts), 'partition')}, {plural(len(files), 'data file')}, "
        f"{plural(rows, 'row')}, {human_bytes(size)}"
    )
    ctx.line(
        table_text(
            [
                [
                    p["spec_id"],
                    p["path"] or "(unpartitioned)",
                    p["files"],
                    p["rows"],
                    p["deleted_rows"],
                    human_bytes(p["bytes"]),
                ]
                for p in parts
            ],
            ["spec", "partition", "files", "rows", "deleted", "bytes"],
            right=[True, False, True, True, True, True],
        )
    )
    return EXIT_OK
