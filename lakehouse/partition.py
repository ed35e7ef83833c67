"""Partition specs: Iceberg's transforms, rows split by partition, and file ids
that sort by partition so one partition's files are one key range.

A table's spec is a list of fields, each a transform of one column
(``day(ts)``, ``bucket(16, customer_id)``, ``country``). The transforms and
their values are Iceberg's (spec, "Partition Transforms"): ``year``,
``month``, ``day``, ``hour`` count from 1970 (year 1970 is 0, January 1970
is month 0), floor for earlier times, on the UTC instant of a timestamp;
``bucket(N)`` is ``(murmur3_x86_32(iceberg bytes) & 0x7FFFFFFF) % N``
(Appendix B); ``truncate(W)`` floors integers and decimals to a multiple of
``W`` and cuts strings to ``W`` code points, binaries to ``W`` bytes.

A partitioned data file's id carries its spec and partition values, so its
record key ``S/<ns>00<t>00F/<file id>`` and deletion-vector key sort by
partition (value text: partition_encoding.enc)::

    +---+-----------+---+--------+---+--------+- ... -+---+---------------+
    | p | spec id   | / | enc(v1)| / | enc(v2)|       | / |  basename     |
    |   | 4 hex     |   |        |   |        |       |   | (the file's)  |
    +---+-----------+---+--------+---+--------+- ... -+---+---------------+

    enc(v)   null   -> "0"
             else   -> "1" + body
    body     int, bool, date (days), time (us), timestamp (us; ns for
             timestamp[ns]; the instant, tz ignored): 16 hex of v + 2**63
             decimal: 32 hex of unscaled + 2**127
             float: 16 hex of the IEEE bits, sign flipped (negatives: all
             bits flipped), one NaN above +inf
             str / bytes: hex of the UTF-8 / raw bytes, any length

    e.g. ``p0001/14e4c/18000000000004d0b/0001-abc.parquet``: spec 1,
    ``country = 'NL'``, ``ts_day = 19723`` (2024-01-01), file ``0001-abc``.

Why these choices:

* **Byte order is value order.** Fixed-width hex of an offset (or of
  sign-adjusted float bits) sorts like the number; hex of bytes sorts like
  the bytes, and UTF-8 like code points. Null (``0``) sorts first.
* **Every value ends where the next ``/`` is.** Hex never holds ``/``, and
  ``/`` sorts below every hex digit, so ``a`` (``161/``) sorts before ``ab``
  (``16162/``) and ``p0001/161/`` is a prefix of exactly the files of ``a``.
  Hence :func:`key_prefix` of the leading values is one range, and a range
  of values of the next field is one range too (:func:`key_ranges`).
* **Unpartitioned ids stay plain.** They keep the basename (a ``_`` in front
  if it starts with ``p``), so every partitioned id is in the ``p`` range.

Pruning (:func:`may_match`, :func:`key_ranges`) is Iceberg's inclusive
projection of ``where`` terms onto fields: ``c = v`` keeps ``t(c) = t(v)``,
``c < v`` through an order-preserving ``t`` keeps ``t(c) <= t(v)``, bucket
prunes only ``=`` and ``in``; whatever is not understood prunes nothing.
Tested in tests/test_lakehouse_partition.py.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakehouse import partition_encoding as pe
from lakehouse.partition_encoding import enc
from lakehouse.partition_prune import key_ranges, may_match

_TIME = ("year", "month", "day", "hour")
_SUFFIX = {"identity": "", "year": "_year", "month": "_month", "day": "_day", "hour": "_hour"}
_SUFFIX |= {"bucket": "_bucket", "truncate": "_trunc"}
_ALIASES = {"years": "year", "months": "month", "days": "day", "hours": "hour"}
_US_PER = {"s": 1_000_000, "ms": 1000, "us": 1}
_DAY_US, _HOUR_US = 86_400_000_000, 3_600_000_000
_RADIX_LIMIT = 2**62  # split packs the fields' codes into one int64 below this


@dataclass(frozen=True)
class Transform:
    """One of Iceberg's partition transforms (``param``: N of bucket, W of truncate)."""

    name: str
    param: int | None = None

    def __str__(self) -> str:
        return self.name if self.param is None else f"{self.name}[{self.param}]"

    @property
    def order_preserving(self) -> bool:
        return self.name != "bucket"

    @property
    def suffix(self) -> str:
        return _SUFFIX[self.name]

    def result_type(self, source: pa.DataType) -> pa.DataType:
        if (self.name in ("bucket", "truncate")) != (self.param is not None and self.param > 0):
            raise ValueError(
                f"transform {self} does not apply to a {source} column: bucket and truncate "
                "take a count > 0, the other transforms none"
            )
        k = pe.kind(source)
        ok = {
            "identity": k is not None,
            "bucket": k in ("int", "decimal", "str", "bytes", "date", "time", "ts"),
            "truncate": k in ("int", "decimal", "str")
            or (k == "bytes" and not pa.types.is_fixed_size_binary(source)),
            "hour": k == "ts",
        }.get(self.name, k in ("date", "ts") and self.name in _TIME)
        if not ok:
            raise ValueError(f"transform {self} does not apply to a {source} column")
        return source if self.name in ("identity", "truncate") else pa.int32()

    def apply(self, values: pa.Array | pa.ChunkedArray) -> pa.Array:
        """The transform of every value (vectorised; nulls stay null)."""
        arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        t = arr.type
        out_type = self.result_type(t)
        k = pe.kind(t)
        try:
            if self.name == "identity":
                if pa.types.is_time64(t) and t.unit == "ns":  # as Python sees it
                    return arr.cast(pa.time64("us"), safe=False)
                return arr
            if self.name == "truncate" and k == "str":
                plain = arr.cast(pa.large_string()) if pe.is_string_view(t) else arr
                return pc.utf8_slice_codeunits(plain, 0, self.param).cast(t)
            if self.name == "truncate" and k == "bytes":
                plain = arr.cast(pa.large_binary()) if pa.types.is_binary_view(t) else arr
                return pc.binary_slice(plain, 0, self.param).cast(t)
            if k not in ("int", "date", "time", "ts"):  # decimals, strings, binaries
                return _per_value(arr, lambda v: self.apply_py(v, t), out_type)
            n, valid = _longs(arr)
            if self.name == "truncate":
                w = self.param or 1
                return pa.array(n - np.mod(n, w), pa.int64(), mask=~valid).cast(t)
            if self.name == "bucket":
                h = pe.murmur3_longs(n).astype(np.int64)
                out = np.mod(h & 0x7FFFFFFF, self.param or 1)
            elif self.name == "hour":
                out = np.floor_divide(n, _HOUR_US)
            else:
                days = n if k == "date" else np.floor_divide(n, _DAY_US)
                unit = {"year": "Y", "month": "M", "day": "D"}[self.name]
                out = days.astype("datetime64[D]").astype(f"datetime64[{unit}]").astype(np.int64)
            return pa.array(out, pa.int64(), mask=~valid).cast(pa.int32())
        except (pa.ArrowException, OverflowError) as e:
            raise ValueError(f"transform {self} of a {t} column failed: {e}") from None

    def apply_py(self, value: Any, source: pa.DataType) -> Any:
        """The partition value of one Python ``value`` of type ``source``."""
        self.result_type(source)
        if value is None or self.name == "identity":
            return value
        k = pe.kind(source) or ""
        w = self.param or 1
        if self.name == "bucket":
            return (pe.hash_value(value, source) & 0x7FFFFFFF) % w
        if self.name == "truncate":
            if k == "int":
                return pe.to_int(value, k, source) // w * w
            if k == "decimal":
                n = pe.unscaled(value, source.scale)
                return Decimal(n // w * w).scaleb(-source.scale)
            if isinstance(value, str | bytes):
                return value[:w]
            raise ValueError(f"{value!r} is not a {source} value")
        n = pe.iceberg_long(value, k, source)  # days of a date, else microseconds
        if self.name == "hour":
            return n // _HOUR_US
        days = n if k == "date" else n // _DAY_US
        if self.name == "day":
            return days
        d = dt.date.fromordinal(days + pe.EPOCH_DAY)
        return d.year - 1970 if self.name == "year" else (d.year - 1970) * 12 + d.month - 1


def _longs(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Iceberg's long of every int/date/time/timestamp (days, microseconds) and validity."""
    t = arr.type
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    if pa.types.is_integer(t):
        ints = arr.cast(pa.int64())
    else:
        ints = arr.view(pa.int32() if t.bit_width == 32 else pa.int64()).cast(pa.int64())
    n = pc.fill_null(ints, 0).to_numpy()
    if pa.types.is_date64(t):
        return np.floor_divide(n, 86_400_000), valid
    if pa.types.is_date32(t) or pa.types.is_integer(t):
        return n, valid
    if t.unit == "ns":
        return np.floor_divide(n, 1000), valid
    per = _US_PER[t.unit]
    if per > 1 and np.any(np.abs(n) > (2**63 - 1) // per):
        raise ValueError(f"a {t} value is out of range in microseconds")
    return n * per, valid


def _per_value(arr: pa.Array, fn: Any, out_type: pa.DataType) -> pa.Array:
    """``fn`` of each distinct value (a loop per distinct value, not per row)."""
    d = arr.dictionary_encode()
    out = pa.array([fn(v) for v in d.dictionary.to_pylist()], out_type)
    return out.take(d.indices)


@dataclass(frozen=True)
class PartitionField:
    source_id: int
    transform: Transform
    name: str
    field_id: int


@dataclass(frozen=True)
class PartitionSpec:
    spec_id: int
    fields: tuple[PartitionField, ...] = ()

    @property
    def is_unpartitioned(self) -> bool:
        return not self.fields

    def spelling(self, names: Mapping[int, str]) -> tuple[str, ...]:
        """The fields as ``partition_by`` takes them: ``("day(ts)", "bucket(16, c)")``."""
        out = []
        for f in self.fields:
            col = names.get(f.source_id, f"#{f.source_id}")
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", col):
                col = "`" + col.replace("`", "``") + "`"
            t = f.transform
            arg = col if t.param is None else f"{t.param}, {col}"
            out.append(col if t.name == "identity" else f"{t.name}({arg})")
        return tuple(out)


_ITEM = re.compile(r"(?s)\s*([A-Za-z_]\w*)\s*\((.*)\)\s*")


def _unquote(text: str) -> str:
    s = text.strip()
    for q in '`"':
        if len(s) >= 2 and s[0] == s[-1] == q:
            return s[1:-1].replace(q + q, q)
    return s


def _parse_item(item: str) -> tuple[Transform, str]:
    m = _ITEM.fullmatch(item)
    if m is None:
        return Transform("identity"), _unquote(item)
    name, args = m.group(1).lower(), m.group(2)
    name = _ALIASES.get(name, name)
    if name not in _SUFFIX:
        raise ValueError(f"partition_by item {item!r}: unknown transform {m.group(1)!r}")
    if name not in ("bucket", "truncate"):
        return Transform(name), _unquote(args)
    what = "bucket count" if name == "bucket" else "width"
    param, comma, col = args.partition(",")
    if not comma or not re.fullmatch(r"\s*\d+\s*", param) or not 0 < int(param) < 2**31:
        raise ValueError(
            f"partition_by item {item!r}: {name} takes a positive integer {what} and a "
            f"column, like {name}(16, c)"
        )
    return Transform(name, int(param)), _unquote(col)


def parse_spec(
    items: Any,
    columns: Sequence[tuple[int, str]],
    schema: pa.Schema,
    spec_id: int,
    previous: Sequence[PartitionSpec] = (),
) -> PartitionSpec:
    """The spec ``partition_by`` items describe (see the contract in docs/lakehouse.md)."""
    if items is None:
        return PartitionSpec(spec_id)
    if isinstance(items, str) or not isinstance(items, list | tuple):
        raise TypeError(f"partition_by must be a list of strings, not {type(items).__name__}")
    if not 0 <= spec_id <= 0xFFFF:
        raise ValueError(f"partition spec id {spec_id} is out of range (0..65535)")
    by_name = {n: i for i, n in columns}
    folded: dict[str, list[str]] = {}
    for n in by_name:
        folded.setdefault(n.lower(), []).append(n)
    known = {(f.source_id, f.transform): f.field_id for s in previous for f in s.fields}
    next_id = max([999, *known.values()]) + 1
    fields: list[PartitionField] = []
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"partition_by item {item!r} is not a string")
        transform, col = _parse_item(item)
        if col not in by_name and len(folded.get(col.lower(), [])) == 1:
            col = folded[col.lower()][0]
        if col not in by_name:
            raise ValueError(f"partition_by item {item!r}: no column {col!r}")
        t = schema.field(col).type
        try:
            transform.result_type(t)
        except ValueError as e:
            raise ValueError(f"partition_by item {item!r}: {e}") from None
        src = by_name[col]
        name = col + transform.suffix
        for f in fields:
            if (f.source_id, f.transform) == (src, transform) or f.name == name:
                raise ValueError(f"partition_by item {item!r}: partition field {name!r} twice")
        fid = known.get((src, transform))
        if fid is None:
            fid, next_id = next_id, next_id + 1
        fields.append(PartitionField(src, transform, name, fid))
    return PartitionSpec(spec_id, tuple(fields))


def bucket_hash(value: Any, source: pa.DataType) -> int:
    """Iceberg's murmur3_x86_32 hash (signed) of ``value`` of type ``source``."""
    return pe.hash_value(value, source)


# -- rows to partitions -----------------------------------------------------------------------
def _source(spec: PartitionSpec, f: PartitionField, names: Mapping[int, str]) -> str:
    name = names.get(f.source_id)
    if name is None:
        raise ValueError(f"partition field {f.name!r}: column id {f.source_id} is not in the table")
    return name


def split(
    spec: PartitionSpec, rows: pa.Table, names: Mapping[int, str]
) -> list[tuple[tuple[Any, ...], np.ndarray]]:
    """``rows`` grouped by partition: ``[(values, ascending row indexes)]`` sorted by key."""
    if spec.is_unpartitioned:
        return [((), np.arange(rows.num_rows, dtype=np.int64))]
    if rows.num_rows == 0:
        return []
    codes, dicts, types = [], [], []
    for f in spec.fields:
        col = _source(spec, f, names)
        if col not in rows.column_names:
            raise ValueError(f"partition field {f.name!r}: the rows have no column {col!r}")
        try:
            part = f.transform.apply(rows.column(col))
            d = part.dictionary_encode(null_encoding="encode")
        except (ValueError, pa.ArrowException) as e:
            raise ValueError(f"partition field {f.name!r}: {e}") from None
        types.append(part.type)
        codes.append(d.indices.to_numpy().astype(np.int64))
        dicts.append(d.dictionary.to_pylist())
    radix = [max(len(d), 1) for d in dicts]
    if np.prod(np.array(radix, dtype=np.float64)) < _RADIX_LIMIT:
        key = np.zeros(rows.num_rows, dtype=np.int64)
        for c, r in zip(codes, radix):
            key = key * r + c
        uniq, inverse = np.unique(key, return_inverse=True)
        combos = [np.unravel_index(uniq, radix)] if len(radix) > 1 else [(uniq,)]
        tuples = list(zip(*combos[0]))
    else:
        stacked, inverse = np.unique(np.stack(codes, axis=1), axis=0, return_inverse=True)
        tuples = [tuple(r) for r in stacked]
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable").astype(np.int64)
    bounds = np.cumsum(np.bincount(inverse, minlength=len(tuples)))
    groups = []
    for g, combo in enumerate(tuples):
        values = tuple(dicts[i][int(c)] for i, c in enumerate(combo))
        start = int(bounds[g - 1]) if g else 0
        groups.append((values, order[start : int(bounds[g])]))
    groups.sort(key=lambda gv: "/".join(enc(v, t) for v, t in zip(gv[0], types)))
    return groups


def values_dict(spec: PartitionSpec, values: Sequence[Any]) -> dict[str, Any]:
    _check_len(spec, values, "values")
    return {f.name: v for f, v in zip(spec.fields, values)}


def _check_len(spec: PartitionSpec, seq: Sequence[Any], what: str, n: int | None = None) -> None:
    n = len(spec.fields) if n is None else n
    if len(seq) != n:
        raise ValueError(f"partition spec {spec.spec_id} needs {n} {what}, got {len(seq)}")


def encode_values(
    spec: PartitionSpec, types: Sequence[pa.DataType], values: Sequence[Any]
) -> list[Any]:
    """The values as the record's JSON stores them."""
    _check_len(spec, types, "types")
    _check_len(spec, values, "values")
    return [_named(spec, i, pe.to_raw, v, t) for i, (v, t) in enumerate(zip(values, types))]


def decode_values(
    spec: PartitionSpec, types: Sequence[pa.DataType], raw: Sequence[Any]
) -> tuple[Any, ...]:
    """Inverse of :func:`encode_values` (ValueError if ``raw`` is malformed)."""
    _check_len(spec, types, "types")
    if not isinstance(raw, list | tuple):
        raise ValueError(f"partition values {raw!r} of spec {spec.spec_id} are not a list")
    _check_len(spec, raw, "values")
    return tuple(_named(spec, i, pe.from_raw, r, t) for i, (r, t) in enumerate(zip(raw, types)))


def _named(spec: PartitionSpec, i: int, fn: Any, v: Any, t: pa.DataType) -> Any:
    try:
        return fn(v, t)
    except ValueError as e:
        raise ValueError(f"partition field {spec.fields[i].name!r}: {e}") from None


def key_prefix(spec: PartitionSpec, types: Sequence[pa.DataType], values: Sequence[Any]) -> str:
    """File-id prefix of the partitions whose leading fields hold ``values``."""
    _check_len(spec, types, "types", min(len(types), len(spec.fields)))
    if len(values) > len(spec.fields) or len(values) > len(types):
        raise ValueError(f"partition spec {spec.spec_id}: too many values {values!r}")
    parts = [_named(spec, i, enc, v, t) for i, (v, t) in enumerate(zip(values, types))]
    return f"p{spec.spec_id:04x}/" + "".join(p + "/" for p in parts)


def file_id(
    spec: PartitionSpec, types: Sequence[pa.DataType], values: Sequence[Any], basename: str
) -> str:
    """The id of a data file of partition ``values``."""
    _check_len(spec, values, "values")
    if not basename or "/" in basename:
        raise ValueError(f"data file basename {basename!r} is empty or holds '/'")
    return key_prefix(spec, types, values) + basename


def parse_file_id(file_id: str) -> int | None:
    """The spec id of a partitioned file id (None: an unpartitioned file's id)."""
    m = re.match(r"p([0-9a-f]{4})/", file_id)
    return int(m.group(1), 16) if m else None


__all__ = [
    "PartitionField",
    "PartitionSpec",
    "Transform",
    "bucket_hash",
    "decode_values",
    "encode_values",
    "file_id",
    "key_prefix",
    "key_ranges",
    "may_match",
    "parse_file_id",
    "parse_spec",
    "split",
    "values_dict",
]
