"""Column bounds of data files for every orderable type, and pruning with them.

API.md "Table layout": every orderable column type has min/max bounds in
``DataFile.stats`` (Python values of the column's type) and pruning uses
them. What is checked here:

* per type, the bounds of a written file come back through its record and
  ``list_data_files`` as the data's min and max, as Python values;
* strings and binary keep a bounded prefix: the lower bound truncated, the
  upper bound rounded up (or dropped when it cannot be);
* records written before (``["i", n]``, ``["d", ...]``, ``["b", ...]``) still decode;
* no wrong pruning: for random files and random predicates of every type, a
  file pruned has no matching row (NaN, nulls, infinities, long strings, the
  largest code point included), and a read with ``where`` returns what the
  same filter over a read without one does;
* pruning happens: a read of one date (and one value of other types)
  fetches only that value's files, counted by a data store wrapper.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import math
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from parquet_files import PARQUET

import lakehouse
from kvstore.objstore import MemoryStore
from lakehouse.data import files as datafiles
from lakehouse.data import record
from lakehouse.data.stats import PREFIX_BYTES, PREFIX_CHARS, footer_stats, user_stats
from lakehouse.model import Column, DataFile

#: Parquet files (the bounds of inlined rows equal these: tests/test_lakehouse_inline.py)
NO_AUTO = {"compaction.auto": "false", **PARQUET}
MAX_CHAR = "\U0010ffff"


# -- value generators per type -------------------------------------------------------------
@dataclass(frozen=True)
class Kind:
    """How to draw values of one Arrow type, clustered so that files have narrow ranges."""

    type: pa.DataType
    #: a value near cluster ``c`` (0..9): a Python value, or the storage integer of a temporal
    value: Callable[[random.Random, int], Any]
    #: values (None for null) as an array of ``type``
    make: Callable[[list[Any]], pa.Array] | None = None

    def array(self, values: list[Any]) -> pa.Array:
        return self.make(values) if self.make is not None else pa.array(values, self.type)


def _int_kind(t: pa.DataType) -> Kind:
    info = np.iinfo(t.to_pandas_dtype())
    lo, hi = int(info.min), int(info.max)
    width = (hi - lo) // 10

    def value(rng: random.Random, c: int) -> int:
        if rng.random() < 0.05:
            return rng.choice([lo, hi])
        return lo + c * width + rng.randint(0, width // 4)

    return Kind(t, value)


def _float_kind(t: pa.DataType) -> Kind:
    def value(rng: random.Random, c: int) -> float:
        r = rng.random()
        if r < 0.1:
            return math.nan
        if r < 0.14:
            return rng.choice([math.inf, -math.inf, 0.0, -0.0])
        return c * 10.0 - 40.0 + rng.uniform(0, 4)

    return Kind(t, value)


def _temporal_kind(t: pa.DataType, base: int, step: int, spread: int) -> Kind:
    storage = pa.int32() if t.bit_width == 32 else pa.int64()

    def value(rng: random.Random, c: int) -> int:
        return base + c * step + rng.randint(0, spread)

    return Kind(t, value, lambda vs: pa.array(vs, storage).view(t))


def _date64(rng: random.Random, c: int) -> int:
    return (19_000 + c * 30 + rng.randint(0, 10)) * 86_400_000


_CHARS = ["a", "b", "z", "é", "\ud7ff", "\ue000", MAX_CHAR, "\x00"]


def _string(rng: random.Random, c: int) -> str:
    if rng.random() < 0.05:
        return rng.choice(["", MAX_CHAR * 70, MAX_CHAR * PREFIX_CHARS])
    head = MAX_CHAR if c == 9 else chr(0x61 + c)
    n = rng.choice([0, 1, PREFIX_CHARS - 1, PREFIX_CHARS, PREFIX_CHARS + 1, 90])
    tail = "".join(rng.choice(_CHARS) for _ in range(rng.randint(0, 4)))
    return head * n + tail


def _binary(rng: random.Random, c: int) -> bytes:
    if rng.random() < 0.05:
        return rng.choice([b"", b"\xff" * 70, b"\xff" * PREFIX_BYTES])
    head = bytes([255 if c == 9 else c * 25])
    n = rng.choice([0, 1, PREFIX_BYTES - 1, PREFIX_BYTES, PREFIX_BYTES + 1, 90])
    tail = bytes(rng.choice([0, 1, 254, 255]) for _ in range(rng.randint(0, 4)))
    return head * n + tail


def _decimal(scale: int, digits: int) -> Callable[[random.Random, int], Decimal]:
    def value(rng: random.Random, c: int) -> Decimal:
        top = 10**digits - 1
        if rng.random() < 0.05:
            n = rng.choice([-top, top])
        else:
            n = (c - 5) * (top // 10) + rng.randint(0, top // 40)
        return Decimal(f"{n}E-{scale}")  # exact (scaleb rounds to 28 digits)

    return value


KINDS: dict[str, Kind] = {
    **{str(t): _int_kind(t) for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64())},
    **{str(t): _int_kind(t) for t in (pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())},
    "float": _float_kind(pa.float32()),
    "double": _float_kind(pa.float64()),
    "decimal128": Kind(pa.decimal128(12, 2), _decimal(2, 12)),
    "decimal256": Kind(pa.decimal256(60, 5), _decimal(5, 60)),
    "string": Kind(pa.string(), _string),
    "large_string": Kind(pa.large_string(), _string),
    "binary": Kind(pa.binary(), _binary),
    "large_binary": Kind(pa.large_binary(), _binary),
    "fixed_binary": Kind(
        pa.binary(3), lambda rng, c: bytes([c * 28, rng.choice([0, 255]), rng.randint(0, 255)])
    ),
    "bool": Kind(pa.bool_(), lambda rng, c: rng.random() < c / 9),
    "date32": _temporal_kind(pa.date32(), 19_000, 30, 10),
    "date64": Kind(pa.date64(), _date64, lambda vs: pa.array(vs, pa.int64()).view(pa.date64())),
    "time32s": _temporal_kind(pa.time32("s"), 0, 8_000, 4_000),
    "time32ms": _temporal_kind(pa.time32("ms"), 0, 8_000_000, 4_000_000),
    "time64us": _temporal_kind(pa.time64("us"), 0, 8 * 10**9, 4 * 10**9),
    "time64ns": _temporal_kind(pa.time64("ns"), 0, 8 * 10**12, 4 * 10**12),
    "ts_s": _temporal_kind(pa.timestamp("s"), -(10**9), 10**8, 10**7),
    "ts_ms_utc": _temporal_kind(pa.timestamp("ms", "UTC"), 10**12, 10**11, 10**10),
    "ts_us_ny": _temporal_kind(pa.timestamp("us", "America/New_York"), -(10**15), 10**14, 10**13),
    "ts_ns_kolkata": _temporal_kind(pa.timestamp("ns", "Asia/Kolkata"), 10**18, 10**16, 10**15),
    "duration_s": _temporal_kind(pa.duration("s"), -5_000, 1_000, 500),
    "duration_ns": _temporal_kind(pa.duration("ns"), -(10**12), 10**11, 10**10),
}
#: types whose rows the tests filter with Arrow (float16 has no comparison kernels)
FILTERABLE = sorted(KINDS)


def _column_values(kind: Kind, rng: random.Random, c: int, n: int, nulls: float) -> list[Any]:
    return [None if rng.random() < nulls else kind.value(rng, c) for _ in range(n)]


def _random_table(kind: Kind, rng: random.Random, n: int) -> pa.Table:
    """Columns x and y of ``kind``'s type, each near a cluster of its own."""
    cx, cy = rng.randint(0, 9), rng.randint(0, 9)
    nulls = rng.choice([0.0, 0.0, 0.2, 1.0])
    x = kind.array(_column_values(kind, rng, cx, n, nulls))
    y = kind.array(_column_values(kind, rng, cy, n, rng.choice([0.0, 0.3])))
    return pa.table({"x": x, "y": y})


def _literal(kind: Kind, rng: random.Random, seen: list[pa.Scalar]) -> pa.Scalar:
    if seen and rng.random() < 0.3:
        lit = rng.choice(seen)
        v = lit.as_py()
        if isinstance(v, str) and rng.random() < 0.5:  # near a truncation edge
            v = rng.choice([v[:PREFIX_CHARS], v[: PREFIX_CHARS - 1] + MAX_CHAR, v + "\x00"])
            return pa.scalar(v, kind.type)
        return lit
    return kind.array([kind.value(rng, rng.randint(0, 9))])[0]


def _seen(tables: list[pa.Table]) -> list[pa.Scalar]:
    return [v for t in tables for v in t.column("x").combine_chunks() if v.is_valid]


def _predicate(
    kind: Kind, rng: random.Random, seen: list[pa.Scalar], depth: int = 0
) -> pc.Expression:
    r = rng.random()
    if depth < 2 and r < 0.25:
        a = _predicate(kind, rng, seen, depth + 1)
        b = _predicate(kind, rng, seen, depth + 1)
        return rng.choice([a & b, a | b, ~a])
    f = pc.field(rng.choice(["x", "x", "y"]))
    lit = _literal(kind, rng, seen)
    floating = pa.types.is_floating(kind.type)
    ops: list[Callable[[], pc.Expression]] = [
        lambda: f == lit,
        lambda: f != lit,
        lambda: f < lit,
        lambda: f <= lit,
        lambda: f > lit,
        lambda: f >= lit,
        lambda: f.is_null(),
        lambda: f.is_valid(),
        lambda: f.isin(pa.array([lit, _literal(kind, rng, seen)], kind.type)),
        lambda: (f >= lit) & (f <= _literal(kind, rng, seen)),
    ]
    if floating:
        nan = pa.scalar(math.nan, kind.type)
        ops += [lambda: pc.is_nan(f), lambda: f == nan, lambda: f < nan, lambda: ~(f < lit)]
        one, zero = pc.scalar(pa.scalar(1.0, kind.type)), pa.scalar(0.0, kind.type)
        ops += [lambda: pc.divide(one, f) > zero]  # tells -0.0 from 0.0
    return rng.choice(ops)()


def _parquet(table: pa.Table, rng: random.Random) -> bytes:
    buf = io.BytesIO()
    pq.write_table(
        table,
        buf,
        row_group_size=rng.choice([3, 1000]),
        use_dictionary=rng.random() < 0.5,
        write_statistics=True,
    )
    return buf.getvalue()


def _data_file(i: int, data: bytes, columns: list[Column]) -> DataFile:
    """The record of a file as a commit stores it, and decoded back."""
    pf = pq.ParquetFile(pa.BufferReader(data))
    schema = pf.schema_arrow
    ids = {c.name: c.id for c in columns}
    raw = footer_stats(pf.metadata, ids, {n: schema.field(n).type for n in ids})
    f = DataFile(
        f"t/{i}.parquet",
        len(data),
        pf.metadata.num_rows,
        file_id=str(i),
        columns=tuple((c.id, c.name) for c in columns),
        raw_stats=raw,
    )
    return record.decode_file(record.encode_file(f))


def _rows(t: pa.Table) -> list[str]:
    return sorted(repr(r) for r in t.to_pylist())  # repr: NaN equals itself


# -- pruning is never wrong ------------------------------------------------------------------
@pytest.mark.parametrize("name", FILTERABLE)
def test_pruning_never_drops_a_matching_file(name: str) -> None:
    kind = KINDS[name]
    rng = random.Random(f"prune-{name}")
    schema = pa.schema([("x", kind.type), ("y", kind.type)])
    columns = [Column(1, "x", str(kind.type)), Column(2, "y", str(kind.type))]
    pruned = checked = 0
    for _ in range(12):
        tables = [_random_table(kind, rng, rng.randint(1, 12)) for _ in range(8)]
        dfs = [_data_file(i, _parquet(t, rng), columns) for i, t in enumerate(tables)]
        seen = _seen(tables)
        for _ in range(25):
            pred = _predicate(kind, rng, seen)
            try:
                matching = [t.filter(pred).num_rows for t in tables]
            except pa.ArrowNotImplementedError:
                continue  # Arrow cannot evaluate it over these rows
            keep = set(datafiles.prune(dfs, pred, columns, schema))
            for i, n in enumerate(matching):
                assert n == 0 or i in keep, (
                    f"{name}: file {i} pruned for {pred} but {n} rows match:"
                    f" {tables[i].filter(pred).to_pylist()[:3]}; stats {dfs[i].raw_stats}"
                )
            checked += 1
            pruned += len(tables) - len(keep)
    assert checked > 200
    assert pruned > 0, f"{name}: no file was ever pruned: its bounds are not used"


@pytest.mark.parametrize("name", ["date32", "double", "string", "decimal128", "ts_ns_kolkata"])
def test_read_with_where_equals_filter_of_whole_read(name: str) -> None:
    kind = KINDS[name]
    rng = random.Random(f"read-{name}")
    h = lakehouse.open(f"memory://stats-{uuid.uuid4().hex}")
    try:
        with h.begin() as txn:
            txn.create_namespace("s")
            txn.create_table(
                "s.t", pa.schema([("x", kind.type), ("y", kind.type)]), properties=NO_AUTO
            )
        for _ in range(6):
            with h.begin() as txn:
                txn.append("s.t", _random_table(kind, rng, rng.randint(1, 10)))
        whole = h.read("s.t")
        seen = _seen([whole])
        for _ in range(30):
            pred = _predicate(kind, rng, seen)
            try:
                expected = whole.filter(pred)
            except pa.ArrowNotImplementedError:
                continue
            assert _rows(h.read("s.t", where=pred)) == _rows(expected), str(pred)
    finally:
        h.close()


def test_nan_rows_are_never_pruned_away() -> None:
    """Footer bounds leave NaN out: predicates true for NaN keep the file."""
    data = pa.table({"x": [1.0, 2.0, math.nan], "y": [5.0, math.nan, 6.0]})
    schema = data.schema
    columns = [Column(1, "x", "double"), Column(2, "y", "double")]
    f = _data_file(0, _parquet(data, random.Random(0)), columns)
    x, y = pc.field("x"), pc.field("y")
    nan = pa.scalar(math.nan)
    for pred in [x != 1.5, ~(x < 5.0), pc.is_nan(x), (x != 9.0) & (y > 5.5), ~(y <= 6.0)]:
        assert datafiles.prune([f], pred, columns, schema) == [0], str(pred)
        assert data.filter(pred).num_rows > 0
    for pred in [x > 2.0, x == nan, (x > 2.0) | (y < 5.0), x.is_null()]:
        assert datafiles.prune([f], pred, columns, schema) == [], str(pred)


def test_signed_zeros_are_not_one_value() -> None:
    """Bounds -0.0 and 0.0 compare equal, but 1 / x tells them apart."""
    data = pa.table({"x": [-0.0, 0.0, -0.0]})
    columns = [Column(1, "x", "double")]
    f = _data_file(0, _parquet(data, random.Random(0)), columns)
    pred = pc.divide(pc.scalar(1.0), pc.field("x")) > 0.0
    assert data.filter(pred).num_rows == 1
    assert datafiles.prune([f], pred, columns, data.schema) == [0]


def test_unknown_null_count_keeps_the_file_for_is_null() -> None:
    schema = pa.schema([("x", pa.int64())])
    columns = [Column(1, "x", "int64")]
    known = DataFile(
        "a.parquet", 1, 10, file_id="a", columns=((1, "x"),), raw_stats=((1, 0, 9, 0),)
    )
    unknown = DataFile(
        "b.parquet", 1, 10, file_id="b", columns=((1, "x"),), raw_stats=((1, 0, 9, None),)
    )
    x = pc.field("x")
    assert datafiles.prune([known, unknown], x.is_null(), columns, schema) == [1]
    assert datafiles.prune([known, unknown], x > 9, columns, schema) == []
    assert datafiles.prune([known, unknown], (x > 9) | x.is_null(), columns, schema) == [1]


def test_one_missing_bound_still_prunes_with_the_other() -> None:
    schema = pa.schema([("s", pa.string())])
    columns = [Column(1, "s", "string")]
    f = DataFile(
        "a.parquet", 1, 3, file_id="a", columns=((1, "s"),), raw_stats=((1, "m", None, 1),)
    )
    s = pc.field("s")
    assert datafiles.prune([f], s < "k", columns, schema) == []
    assert datafiles.prune([f], s > "zzz", columns, schema) == [0]
    assert datafiles.prune([f], s.is_null(), columns, schema) == [0]


# -- pruning happens -------------------------------------------------------------------------
class CountingStore(MemoryStore):
    """A memory store that remembers which objects were read."""

    def __init__(self) -> None:
        super().__init__()
        self.read: list[str] = []

    def get(self, name: str) -> bytes:
        self.read.append(name)
        return super().get(name)

    def get_range(self, name: str, start: int, length: int) -> bytes:
        self.read.append(name)
        return super().get_range(name, start, length)

    def open_range_reader(self, name: str) -> Any:
        self.read.append(name)
        return super().open_range_reader(name)


def _counted(schema: pa.Schema, batches: list[pa.Table]) -> tuple[Any, CountingStore]:
    store = CountingStore()
    h = lakehouse.open(f"memory://stats-{uuid.uuid4().hex}", data_store=store)
    with h.begin() as txn:
        txn.create_namespace("s")
        txn.create_table("s.t", schema, properties=NO_AUTO)
    for b in batches:
        with h.begin() as txn:
            txn.append("s.t", b)
    return h, store


def _files_read(store: CountingStore) -> set[str]:
    return {n for n in store.read if n.endswith(".parquet")}


def test_a_read_of_one_date_touches_only_that_dates_files() -> None:
    schema = pa.schema([("day", pa.date32()), ("n", pa.int64())])
    days = [dt.date(2024, 3, 1) + dt.timedelta(days=k) for k in range(12)]
    batches = [
        pa.table({"day": [d] * 5, "n": list(range(k * 5, k * 5 + 5))}, schema=schema)
        for k, d in enumerate(days)
        for _ in range(2)  # two files per day
    ]
    h, store = _counted(schema, batches)
    try:
        files = h.list_data_files("s.t")
        assert len(files) == 24
        by_day = {d: {f.path for f in files if f.stats["day"].min == d} for d in days}
        assert all(len(paths) == 2 for paths in by_day.values())
        for f in files:
            assert f.stats["day"].min == f.stats["day"].max
            assert isinstance(f.stats["day"].min, dt.date)

        store.read.clear()
        got = h.read("s.t", where="day = DATE '2024-03-05'")
        assert got.num_rows == 10 and set(got.column("day").to_pylist()) == {dt.date(2024, 3, 5)}
        assert _files_read(store) == by_day[dt.date(2024, 3, 5)]

        store.read.clear()
        got = h.read("s.t", where="day BETWEEN '2024-03-02' AND '2024-03-03'")
        assert got.num_rows == 20
        assert _files_read(store) == by_day[days[1]] | by_day[days[2]]

        store.read.clear()
        assert h.read("s.t", where=pc.field("day") > pa.scalar(days[-1])).num_rows == 0
        assert _files_read(store) == set()

        store.read.clear()  # a streamed read and a delete prune the same way
        batches = list(h.scan_batches("s.t", where="day = '2024-03-07'"))
        assert sum(b.num_rows for b in batches) == 10
        assert _files_read(store) == by_day[dt.date(2024, 3, 7)]
        store.read.clear()
        with h.begin() as txn:
            assert txn.delete("s.t", "day = DATE '2024-03-07'") == 10
        assert _files_read(store) == by_day[dt.date(2024, 3, 7)]
        assert h.read("s.t").num_rows == 110
    finally:
        h.close()


WHERE_ONE: list[tuple[pa.DataType, list[Any], str]] = [
    (pa.string(), ["apple", "banana", "cherry", "damson"], "v = 'banana'"),
    (
        pa.large_string(),
        ["k" * 50 + c + "x" * 100 for c in "abc"],
        "v = '" + "k" * 50 + "b" + "x" * 100 + "'",
    ),
    (pa.binary(), [b"\x00\x01", b"\x7f", b"\xff\xff"], "v = CAST('\x7f' AS BINARY)"),
    (
        pa.decimal128(10, 2),
        [Decimal("1.25"), Decimal("7.50"), Decimal("99.99")],
        "v = 7.50",
    ),
    (
        pa.timestamp("us", "Europe/Paris"),
        [dt.datetime(2024, 1, d, 12, tzinfo=dt.UTC) for d in (1, 2, 3)],
        "v = TIMESTAMP '2024-01-02 13:00:00+01:00'",
    ),
    (pa.time64("us"), [dt.time(8), dt.time(12), dt.time(18)], "v = TIME '12:00:00'"),
    (pa.bool_(), [False, True], "v"),
    (pa.float64(), [0.5, 1.5, 2.5], "v = 1.5"),
    (pa.uint64(), [1, 2**63 + 5, 2**64 - 1], "v = 9223372036854775813"),
]


@pytest.mark.parametrize(("type_", "values", "where"), WHERE_ONE, ids=lambda x: str(x)[:20])
def test_a_read_of_one_value_touches_only_its_file(
    type_: pa.DataType, values: list[Any], where: str
) -> None:
    schema = pa.schema([("v", type_)])
    h, store = _counted(schema, [pa.table({"v": [v, v]}, schema=schema) for v in values])
    try:
        whole = h.read("s.t")
        store.read.clear()
        got = h.read("s.t", where=where)
        assert got.num_rows == 2, got
        assert len(_files_read(store)) == 1
        assert len(set(map(repr, got.column("v").to_pylist()))) == 1
        assert whole.num_rows == 2 * len(values)
    finally:
        h.close()


# -- bounds per type, through the record and list_data_files ---------------------------------
ROUND_TRIP: list[tuple[pa.DataType, list[Any], type]] = [
    (pa.int8(), [-128, 127, 3], int),
    (pa.uint64(), [0, 2**64 - 1, 7], int),
    (pa.float32(), [1.5, -2.25, math.nan], float),
    (pa.float64(), [math.inf, -0.0, 3.5], float),
    (pa.float16(), [np.float16(1.5), np.float16(-2.0)], float),
    (
        pa.decimal128(38, 10),
        [Decimal("-1234567890123456789012345678.0123456789"), Decimal(0)],
        Decimal,
    ),
    (pa.decimal256(70, 3), [Decimal("9" * 67 + ".999"), Decimal("-0.001")], Decimal),
    (pa.string(), ["b", "", "é" + MAX_CHAR], str),
    (pa.large_string(), ["zz", "a"], str),
    (pa.binary(), [b"\xff", b"\x00\x00", b""], bytes),
    (pa.large_binary(), [b"q", b"p"], bytes),
    (pa.binary(2), [b"\x00\xff", b"\xff\x00"], bytes),
    (pa.bool_(), [True, False], bool),
    (pa.date32(), [dt.date(1969, 12, 31), dt.date(2024, 2, 29), dt.date(9999, 12, 31)], dt.date),
    (pa.date64(), [dt.date(2000, 1, 1), dt.date(1900, 1, 1)], dt.date),
    (pa.time32("s"), [dt.time(0), dt.time(23, 59, 59)], dt.time),
    (pa.time32("ms"), [dt.time(1, 2, 3, 4000), dt.time(0, 0, 0, 1000)], dt.time),
    (pa.time64("us"), [dt.time(12, 0, 0, 1), dt.time(12)], dt.time),
    (pa.timestamp("s"), [dt.datetime(1960, 1, 1), dt.datetime(2038, 1, 20)], dt.datetime),
    (
        pa.timestamp("ms", "UTC"),
        [dt.datetime(2024, 1, 1, 0, 0, 0, 1000, tzinfo=dt.UTC)],
        dt.datetime,
    ),
    (
        pa.timestamp("us", "America/New_York"),
        [dt.datetime(2024, 7, 1, 23, 30, tzinfo=dt.UTC), dt.datetime(2024, 7, 2, 1, tzinfo=dt.UTC)],
        dt.datetime,
    ),
    (pa.duration("s"), [dt.timedelta(seconds=-5), dt.timedelta(days=3)], dt.timedelta),
    (pa.duration("us"), [dt.timedelta(microseconds=1), dt.timedelta(0)], dt.timedelta),
]


def _table_with(type_: pa.DataType, values: list[Any]) -> pa.Table:
    if pa.types.is_float16(type_):
        arr = pa.array(np.array([*values, np.nan], dtype=np.float16))
        arr = pa.concat_arrays([arr, pa.nulls(1, type_)])
    else:
        arr = pa.array([*values, None], type_)
    return pa.table({"v": arr})


@pytest.mark.parametrize(("type_", "values", "py"), ROUND_TRIP, ids=lambda x: str(x)[:20])
def test_bounds_round_trip_as_python_values(
    type_: pa.DataType, values: list[Any], py: type
) -> None:
    data = _table_with(type_, values)
    h = lakehouse.open(f"memory://stats-{uuid.uuid4().hex}")
    try:
        with h.begin() as txn:
            txn.create_namespace("s")
            txn.create_table("s.t", data.schema, properties=NO_AUTO)
            txn.append("s.t", data)
        (f,) = h.list_data_files("s.t")
        col = data.column("v")
        ok = [v for v in col.to_pylist() if v is not None and v == v]  # not NaN
        lo, hi = min(ok), max(ok)
        # an infinite float bound tells pruning nothing: it is not recorded
        lo, hi = (None if isinstance(v, float) and math.isinf(v) else v for v in (lo, hi))
        got = f.stats["v"]
        assert (got.min, got.max, got.null_count) == (lo, hi, col.null_count)
        assert all(isinstance(v, py) for v in (got.min, got.max) if v is not None)
        if isinstance(lo, dt.datetime) and isinstance(hi, dt.datetime):
            assert got.min.tzinfo == lo.tzinfo and got.max.utcoffset() == hi.utcoffset()
        if pa.types.is_decimal(type_):
            assert got.min.as_tuple().exponent == -type_.scale
        decoded = record.decode_file(record.encode_file(f))
        assert decoded.raw_stats == f.raw_stats
    finally:
        h.close()


def test_nanosecond_bounds_are_exact() -> None:
    """``datetime.time`` has no nanoseconds; the bounds pruning uses keep them."""
    schema = pa.schema([("t", pa.time64("ns")), ("ts", pa.timestamp("ns", "UTC"))])
    data = pa.table(
        {
            "t": pa.array([1, 5001], pa.time64("ns")),
            "ts": pa.array([7, 9999], pa.timestamp("ns", "UTC")),
        },
        schema=schema,
    )
    columns = [Column(1, "t", "time64[ns]"), Column(2, "ts", "timestamp[ns, tz=UTC]")]
    f = _data_file(0, _parquet(data, random.Random(1)), columns)
    assert f.raw_stats == ((1, ["n", 1], ["n", 5001], 0), (2, ["n", 7], ["n", 9999], 0))
    t, ts = pc.field("t"), pc.field("ts")
    assert datafiles.prune([f], t > pa.scalar(5000, pa.time64("ns")), columns, schema) == [0]
    assert datafiles.prune([f], t > pa.scalar(5001, pa.time64("ns")), columns, schema) == []
    ts_lit = pa.scalar(9998, pa.timestamp("ns", "UTC"))
    assert datafiles.prune([f], ts > ts_lit, columns, schema) == [0]


def test_timestamp_in_seconds_stored_in_milliseconds() -> None:
    """Parquet has no seconds unit: the footer says milliseconds, the bounds stay right."""
    schema = pa.schema([("ts", pa.timestamp("s")), ("t", pa.time32("s"))])
    data = pa.table(
        {"ts": pa.array([100, 200], pa.timestamp("s")), "t": pa.array([10, 20], pa.time32("s"))},
        schema=schema,
    )
    h, store = _counted(schema, [data])
    try:
        (f,) = h.list_data_files("s.t")
        assert f.stats["ts"].min == dt.datetime(1970, 1, 1, 0, 1, 40)
        assert f.stats["t"].max == dt.time(0, 0, 20)
        cases: list[tuple[Any, int, int]] = [
            ("ts > TIMESTAMP '1970-01-01 00:03:00'", 1, 1),
            ("ts > TIMESTAMP '1970-01-01 00:03:20'", 0, 0),
            ("t = TIME '00:00:20'", 1, 1),
            (pc.field("t") > pa.scalar(20, pa.time32("s")), 0, 0),
        ]
        for where, rows, files in cases:
            store.read.clear()
            assert h.read("s.t", where=where).num_rows == rows
            assert len(_files_read(store)) == files, where
    finally:
        h.close()


# -- truncated strings and binary --------------------------------------------------------------
def _bounds(values: list[Any], type_: pa.DataType) -> tuple[Any, Any]:
    data = pa.table({"v": pa.array(values, type_)})
    h = lakehouse.open(f"memory://stats-{uuid.uuid4().hex}")
    try:
        with h.begin() as txn:
            txn.create_namespace("s")
            txn.create_table("s.t", data.schema, properties=NO_AUTO)
            txn.append("s.t", data)
        (f,) = h.list_data_files("s.t")
        # every value lies within the bounds, and a read of each value finds it
        for v in values:
            lit = pa.scalar(v, type_)
            assert h.read("s.t", where=pc.field("v") == lit).num_rows == values.count(v)
        return f.stats["v"].min, f.stats["v"].max
    finally:
        h.close()


N = PREFIX_CHARS


@pytest.mark.parametrize(
    ("values", "lo", "hi"),
    [
        (["a" * 100], "a" * N, "a" * (N - 1) + "b"),
        (["a" * N], "a" * N, "a" * N),
        (["", "b"], "", "b"),
        ([""], "", ""),
        ([MAX_CHAR * 100], MAX_CHAR * N, None),
        (["a" + MAX_CHAR * 100], "a" + MAX_CHAR * (N - 1), "b"),
        (["x" * (N - 1) + "\ud7ff" + "yy"], "x" * (N - 1) + "\ud7ff", "x" * (N - 1) + "\ue000"),
        (["é" * 100, "e"], "e", "é" * (N - 1) + "ê"),
        (["q" * (N - 2) + MAX_CHAR * 3, "a"], "a", "q" * (N - 3) + "r"),
    ],
    ids=lambda x: repr(x)[:16],
)
def test_string_bounds_are_truncated_and_rounded_up(
    values: list[str], lo: str, hi: str | None
) -> None:
    for type_ in (pa.string(), pa.large_string()):
        got_lo, got_hi = _bounds(values, type_)
        assert got_lo == lo and got_hi == hi
        assert all(got_lo <= v for v in values)
        assert got_hi is None or all(v <= got_hi for v in values)


@pytest.mark.parametrize(
    ("values", "lo", "hi"),
    [
        ([b"\x01" * 100], b"\x01" * PREFIX_BYTES, b"\x01" * (PREFIX_BYTES - 1) + b"\x02"),
        ([b"\xff" * 100], b"\xff" * PREFIX_BYTES, None),
        ([b"\x00" + b"\xff" * 100], b"\x00" + b"\xff" * (PREFIX_BYTES - 1), b"\x01"),
        ([b"", b"\x00"], b"", b"\x00"),
    ],
    ids=lambda x: repr(x)[:16],
)
def test_binary_bounds_are_truncated_and_rounded_up(
    values: list[bytes], lo: bytes, hi: bytes | None
) -> None:
    for type_ in (pa.binary(), pa.large_binary()):
        assert _bounds(values, type_) == (lo, hi)


def test_long_strings_still_prune() -> None:
    schema = pa.schema([("s", pa.string())])
    prefix = "p" * 200
    batches = [pa.table({"s": [prefix + c, prefix + c + "z"]}, schema=schema) for c in "abc"]
    h, store = _counted(schema, batches)
    try:
        store.read.clear()
        assert h.read("s.t", where=f"s = '{prefix}bz'").num_rows == 1
        assert len(_files_read(store)) == 3  # same 64-character prefix: bounds cannot tell
        store.read.clear()
        assert h.read("s.t", where="s > 'q'").num_rows == 0
        assert h.read("s.t", where="s < 'p'").num_rows == 0
        assert _files_read(store) == set()
    finally:
        h.close()


# -- records already in stores ------------------------------------------------------------------
def test_older_records_decode() -> None:
    """Records written before the 'n' tag: ["i", n] in the column's unit, decimals, binary."""
    raw = (
        (1, ["i", 1_700_000_000_000_000], ["i", 1_700_000_000_000_001], 0),
        (2, ["d", "1.5"], ["d", "12.25"], 1),
        (3, ["b", base64.b64encode(b"ab").decode()], ["b", base64.b64encode(b"yz").decode()], 0),
        (4, 3, 9, None),
        (5, 0.5, 2.5, 0),
        (6, "a", "q", 0),
        (7, False, True, 0),
    )
    f = DataFile("t/x.parquet", 10, 4, file_id="x", columns=(), raw_stats=raw)
    back = record.decode_file(record.encode_file(f))
    assert back.raw_stats == raw
    names = {
        1: ("ts", pa.timestamp("us", "UTC")),
        2: ("d", pa.decimal128(10, 2)),
        3: ("b", pa.binary()),
        4: ("i", pa.int64()),
        5: ("f", pa.float64()),
        6: ("s", pa.string()),
        7: ("o", pa.bool_()),
    }
    got = {k: (v.min, v.max, v.null_count) for k, v in user_stats(back, names).items()}
    assert got == {
        "ts": (
            dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC),
            dt.datetime(2023, 11, 14, 22, 13, 20, 1, tzinfo=dt.UTC),
            0,
        ),
        "d": (Decimal("1.50"), Decimal("12.25"), 1),
        "b": (b"ab", b"yz", 0),
        "i": (3, 9, None),
        "f": (0.5, 2.5, 0),
        "s": ("a", "q", 0),
        "o": (False, True, 0),
    }


def test_older_nanosecond_time_bounds_are_widened() -> None:
    """Older records took a time64[ns] bound from a datetime.time, losing its nanoseconds."""
    f = DataFile(
        "t/x.parquet",
        1,
        2,
        file_id="x",
        columns=((1, "t"),),
        raw_stats=((1, ["i", 1000], ["i", 5000], 0),),
    )
    schema = pa.schema([("t", pa.time64("ns"))])
    columns = [Column(1, "t", "time64[ns]")]
    t = pc.field("t")
    assert datafiles.prune([f], t > pa.scalar(5001, pa.time64("ns")), columns, schema) == [0]
    assert datafiles.prune([f], t > pa.scalar(5999, pa.time64("ns")), columns, schema) == []
    assert datafiles.prune([f], t < pa.scalar(1000, pa.time64("ns")), columns, schema) == []


def test_bounds_that_do_not_fit_the_column_are_ignored() -> None:
    """A bound of the wrong kind (a foreign or damaged record) prunes nothing."""
    raw = ((1, "abc", ["n", 5], 0), (2, ["d", "x"], ["b", "!!"], 0), (3, True, 300, 0))
    f = DataFile(
        "t/x.parquet", 10, 4, file_id="x", columns=((1, "a"), (2, "b"), (3, "c")), raw_stats=raw
    )
    schema = pa.schema([("a", pa.int64()), ("b", pa.decimal128(5, 1)), ("c", pa.int8())])
    columns = [Column(1, "a", "int64"), Column(2, "b", "decimal128(5, 1)"), Column(3, "c", "int8")]
    stats = user_stats(
        f, {1: ("a", pa.int64()), 2: ("b", schema.field("b").type), 3: ("c", pa.int8())}
    )
    assert all(s.min is None and s.max is None for s in stats.values())
    for pred in [pc.field("a") == 1, pc.field("b") > Decimal("1.0"), pc.field("c") < 0]:
        assert datafiles.prune([f], pred, columns, schema) == [0]


# -- SQL predicates: literals typed by the translator, not always the column's type ------------
SQL_SCHEMA = pa.schema(
    [
        ("i", pa.int32()),
        ("u", pa.uint8()),
        ("f", pa.float32()),
        ("m", pa.decimal128(10, 2)),
        ("d", pa.date32()),
        ("ts", pa.timestamp("s")),
        ("tz", pa.timestamp("us", "Asia/Tokyo")),
        ("t", pa.time32("s")),
        ("s", pa.string()),
    ]
)
SQL_LITERALS = {
    "i": ["0", "-7", "100", "2147483648", "1.5", "-0.5", "'12'", "CAST(3 AS BIGINT)"],
    "u": ["0", "255", "256", "-1", "7.5", "CAST(9 AS TINYINT)"],
    "f": ["0", "1.5", "0.1", "-3", "'NaN'", "1e30", "CAST(2 AS DOUBLE)"],
    "m": ["1.005", "1.00", "-50", "12.345", "99999999.99", "CAST(2 AS DECIMAL(20, 6))"],
    "d": ["DATE '2024-01-05'", "'2024-01-09'", "TIMESTAMP '2024-01-05 12:00:00'"],
    "ts": ["TIMESTAMP '2024-01-05 00:00:01'", "'2024-01-05 23:59:59.5'", "DATE '2024-01-06'"],
    "tz": [
        "TIMESTAMP '2024-01-05 09:00:00+09:00'",
        "'2024-01-05 09:00:00'",
        "TIMESTAMP '2024-01-04 23:59:59.999999+00:00'",
    ],
    "t": ["TIME '00:00:05'", "'00:00:05.5'", "TIME '23:59:59'"],
    "s": ["'b'", "'b" + "x" * 80 + "'", "''", "'\U0010ffff'", "'ab'"],
}


def _sql_rows(rng: random.Random, n: int) -> pa.Table:
    base = rng.randint(0, 9)
    day = dt.date(2024, 1, 1) + dt.timedelta(days=base)
    midnight = dt.datetime(2024, 1, 1) + dt.timedelta(days=base)

    def maybe(v: Any) -> Any:
        return None if rng.random() < 0.1 else v

    cols: dict[str, list[Any]] = {
        "i": [maybe(base * 10 + rng.randint(-3, 3)) for _ in range(n)],
        "u": [maybe(rng.choice([0, 255, base * 20])) for _ in range(n)],
        "f": [maybe(rng.choice([math.nan, base + 0.5, -0.0, base * 1.0])) for _ in range(n)],
        "m": [maybe(Decimal(f"{base * 100 + rng.randint(0, 99)}E-2")) for _ in range(n)],
        "d": [maybe(day) for _ in range(n)],
        "ts": [maybe(midnight + dt.timedelta(seconds=rng.randint(0, 86399))) for _ in range(n)],
        "tz": [
            maybe((midnight + dt.timedelta(hours=rng.randint(-12, 12))).replace(tzinfo=dt.UTC))
            for _ in range(n)
        ],
        "t": [maybe(dt.time(0, 0, base + rng.randint(0, 2))) for _ in range(n)],
        "s": [maybe(chr(0x61 + base % 4) + "x" * rng.choice([0, 80])) for _ in range(n)],
    }
    return pa.table(cols, schema=SQL_SCHEMA)


def test_sql_predicates_prune_right() -> None:
    from lakehouse.data.predicate import matches, parse_where

    rng = random.Random("sql")
    h = lakehouse.open(f"memory://stats-{uuid.uuid4().hex}")
    try:
        with h.begin() as txn:
            txn.create_namespace("s")
            txn.create_table("s.t", SQL_SCHEMA, properties=NO_AUTO)
        for _ in range(10):
            with h.begin() as txn:
                txn.append("s.t", _sql_rows(rng, rng.randint(1, 6)))
        whole = h.read("s.t")
        checked = 0
        for _ in range(250):
            col = rng.choice(sorted(SQL_LITERALS))
            op = rng.choice(["=", "!=", "<", "<=", ">", ">=", "NOT <", "IN"])
            lit = rng.choice(SQL_LITERALS[col])
            if op == "NOT <":
                where = f"NOT {col} < {lit}"
            elif op == "IN":
                where = f"{col} IN ({lit}, {rng.choice(SQL_LITERALS[col])})"
            else:
                where = f"{col} {op} {lit}"
            try:
                expected = whole.filter(matches(whole, parse_where(where, SQL_SCHEMA)))
            except (ValueError, pa.ArrowException):
                continue  # refused or not computable: nothing to compare
            assert _rows(h.read("s.t", where=where)) == _rows(expected), where
            checked += 1
        assert checked > 100
    finally:
        h.close()


def test_a_string_too_long_for_the_footer_leaves_no_bounds_and_prunes_nothing() -> None:
    """pyarrow writes no string bounds for a row group holding a value over 4 KiB."""
    schema = pa.schema([("s", pa.string())])
    h, store = _counted(schema, [pa.table({"s": ["a" * 5000, "b"]}, schema=schema)])
    try:
        (f,) = h.list_data_files("s.t")
        assert (f.stats["s"].min, f.stats["s"].max, f.stats["s"].null_count) == (None, None, 0)
        store.read.clear()
        assert h.read("s.t", where="s = 'b'").num_rows == 1
        assert h.read("s.t", where="s > 'a'").num_rows == 2
        assert len(_files_read(store)) == 1
        store.read.clear()
        assert h.read("s.t", where="s IS NULL").num_rows == 0
        assert _files_read(store) == set()  # the null count still prunes
    finally:
        h.close()


# -- footers of other writers -------------------------------------------------------------------
@dataclass
class _Logical:
    text: str

    def to_json(self) -> str:
        return self.text


@dataclass
class _Stats:
    min: Any
    max: Any
    min_raw: Any = None
    max_raw: Any = None
    logical: str = '{"Type":"None"}'
    has_min_max: bool = True
    null_count: int = 0
    has_null_count: bool = True

    @property
    def logical_type(self) -> _Logical:
        return _Logical(self.logical)


class _Undecodable:
    """A string bound pyarrow cannot decode (a foreign writer's bytes that are not UTF-8)."""

    @property
    def min(self) -> str:
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

    max = min
    has_min_max = True
    null_count = 0
    has_null_count = True


@dataclass
class _Chunk:
    statistics: Any
    num_values: int = 3

    @property
    def is_stats_set(self) -> bool:
        return self.statistics is not None


class _Footer:
    """Just what footer_stats reads of a ``pyarrow.parquet.FileMetaData``: row groups of chunks."""

    def __init__(self, names: list[str], groups: list[list[Any]]) -> None:
        self.names, self.groups = names, groups
        self.num_columns, self.num_row_groups = len(names), len(groups)

    @property
    def schema(self) -> Any:
        names = self.names

        class S:
            def column(self, j: int) -> Any:
                return type("C", (), {"path": names[j]})()

        return S()

    def row_group(self, r: int) -> Any:
        chunks = self.groups[r]
        return type("RG", (), {"column": lambda self, j: chunks[j]})()


def test_foreign_footers_give_only_sound_bounds() -> None:
    int96 = _Stats(
        None, None, min_raw=b"\x00" * 12, max_raw=b"\x01" * 12, logical='{"Type":"None"}'
    )
    ts_ms = '{"Type":"Timestamp","isAdjustedToUTC":true,"timeUnit":"milliseconds"}'
    names = ["x", "ts", "s", "i", "t"]
    types = {
        "x": pa.float64(),
        "ts": pa.timestamp("ns"),
        "s": pa.string(),
        "i": pa.int32(),
        "t": pa.timestamp("us", "UTC"),
    }
    groups = [
        [
            _Chunk(_Stats(2.5, math.nan)),  # parquet-mr: NaN as the maximum
            _Chunk(int96),  # INT96: no order, no bounds
            _Chunk(_Undecodable()),
            _Chunk(_Stats(1, 5)),
            _Chunk(_Stats(None, None, min_raw=1_000, max_raw=2_000, logical=ts_ms)),
        ],
        [
            _Chunk(_Stats(-1.0, 3.0)),
            _Chunk(int96),
            _Chunk(_Stats("a", "b")),
            _Chunk(_Stats(None, None, has_min_max=False, null_count=3), num_values=3),  # all null
            _Chunk(
                _Stats(None, None, min_raw=500, max_raw=700, logical=ts_ms, has_null_count=False)
            ),
        ],
    ]
    raw = footer_stats(_Footer(names, groups), {n: k for k, n in enumerate(names)}, types)
    ns = 10**6  # per millisecond
    assert raw == (
        (0, -1.0, None, 0),
        (1, None, None, 0),
        (2, None, None, 0),  # one row group without bounds: none for the file
        (3, 1, 5, 3),
        (4, ["n", 500 * ns], ["n", 2_000 * ns], None),
    )


def test_bounds_python_cannot_hold_are_none() -> None:
    """Arrow dates and timestamps reach past Python's year 9999; their stats are unknown."""
    schema = pa.schema([("d", pa.date32()), ("ts", pa.timestamp("s"))])
    data = pa.table(
        {
            "d": pa.array([0, 2**31 - 1], pa.int32()).view(pa.date32()),
            "ts": pa.array([0, 10**15], pa.int64()).view(pa.timestamp("s")),
        }
    )
    h, _ = _counted(schema, [data])
    try:
        (f,) = h.list_data_files("s.t")
        assert f.stats["d"].min == dt.date(1970, 1, 1) and f.stats["d"].max is None
        assert f.stats["ts"].min == dt.datetime(1970, 1, 1) and f.stats["ts"].max is None
        late = pa.array([2**31 - 2], pa.int32()).view(pa.date32())[0]
        assert h.read("s.t", where=pc.field("d") > late).num_rows == 1  # still pruned right
    finally:
        h.close()
