"""Pruning by column bounds from a where's terms (lakehouse/data/bounds.py, sql_terms.py).

What is checked here:

* term extraction, cell by cell: SQL text -> (terms, exact) over a schema of
  every kind of column; a ``pc.Expression`` has no terms;
* pruning, cell by cell per type (int, float with NaN, decimal, string with
  truncated bounds, binary, date, timestamp with and without a time zone,
  bool): for each file and where, whether the file is kept, and a file
  holding a matching row is always kept (checked against its rows);
* null counts, files that predate a column, bounds that cannot be compared;
* black box: a read with ``where`` succeeds with the files pruning skips
  deleted from disk;
* property (hypothesis): a read with a random ``where`` returns what the same
  filter over the whole table does.
"""

from __future__ import annotations

import datetime as dt
import gc
import io
import math
import random
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from parquet_files import PARQUET

import lakehouse
from lakehouse.data import bounds, record
from lakehouse.data.predicate import matches, parse_where
from lakehouse.data.stats import PREFIX_CHARS, footer_stats
from lakehouse.model import Column, DataFile
from lakehouse.terms import Term

NO_AUTO = {"compaction.auto": "false"}
UTC = ZoneInfo("UTC")

SCHEMA = pa.schema(
    [
        ("i", pa.int32()),
        ("u", pa.uint16()),
        ("f", pa.float64()),
        ("g", pa.float32()),
        ("d", pa.decimal128(10, 2)),
        ("s", pa.string()),
        ("b", pa.binary()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us")),
        ("tz", pa.timestamp("us", tz="UTC")),
        ("tn", pa.timestamp("ns")),
        ("flag", pa.bool_()),
    ]
)


# -- term extraction ------------------------------------------------------------------------
def T(column: str, op: Any, *values: Any) -> Term:
    return Term(column, op, tuple(values))


EXTRACTION = [
    ("i = 5", [T("i", "=", 5)], True),
    ("5 = i", [T("i", "=", 5)], True),
    ("i = 5 AND day >= '2024-01-01'", [T("i", "=", 5), T("day", ">=", dt.date(2024, 1, 1))], True),
    ("5 < i", [T("i", ">", 5)], True),
    ("5 <= i", [T("i", ">=", 5)], True),
    ("10 > i AND 10 >= u", [T("i", "<", 10), T("u", "<=", 10)], True),
    ("i > -3", [T("i", ">", -3)], True),
    ("(i = 1 AND (s = 'a' AND f < 2))", [T("i", "=", 1), T("s", "=", "a"), T("f", "<", 2.0)], True),
    ("i BETWEEN 1 AND 10", [T("i", ">=", 1), T("i", "<=", 10)], True),
    ("i NOT BETWEEN 1 AND 10", [], False),
    ("i IN (3, NULL, 1, 3)", [T("i", "in", 3, 1)], True),
    ("i IN (NULL)", [], False),
    ("i NOT IN (1, 2)", [], False),
    ("i = 1 OR i IN (2, 3) OR (i = 1)", [T("i", "in", 1, 2, 3)], True),
    ("s = 'a' OR 'b' = s", [T("s", "in", "a", "b")], True),
    ("i = 1 OR u = 2", [], False),
    ("i = 1 OR i > 5", [], False),
    ("i IS NULL", [T("i", "is_null")], True),
    ("i IS NOT NULL AND NOT s IS NULL", [T("i", "not_null"), T("s", "not_null")], True),
    ("i != 4", [], False),
    ("i <> 4 AND i = 2", [T("i", "=", 2)], False),
    ("i + 1 = 3 AND i = 2", [T("i", "=", 2)], False),
    ("i = u", [], False),
    ("i = NULL", [], False),
    ("i > 1.5", [], False),  # an int column against a double: Arrow compares as doubles
    ("i = 3000000000", [T("i", "=", 3000000000)], True),  # int64 literal, signed: exact
    ("u = -1", [], False),  # signed literal, unsigned column
    ("f > 1", [T("f", ">", 1.0)], True),
    ("g <= 0.1", [T("g", "<=", 0.1)], True),
    ("f = CAST('nan' AS DOUBLE)", [], False),
    ("f IN (1.0, CAST('nan' AS DOUBLE))", [], False),
    ("d = 1.5", [T("d", "=", Decimal("1.5"))], True),
    ("d < 7", [T("d", "<", Decimal("7"))], True),
    ("s >= 'abc' AND s < 'abd'", [T("s", ">=", "abc"), T("s", "<", "abd")], True),
    ("s LIKE 'ab%'", [], False),
    ("b = 'xy'", [T("b", "=", b"xy")], True),
    ("day = DATE '2024-01-02'", [T("day", "=", dt.date(2024, 1, 2))], True),
    ("day < TIMESTAMP '2024-01-02 10:00:00'", [], False),  # date against a timestamp
    ("ts > '2024-01-01 10:00:00'", [T("ts", ">", dt.datetime(2024, 1, 1, 10))], True),
    (
        "tz <= '2024-01-01 10:00:00'",
        [T("tz", "<=", dt.datetime(2024, 1, 1, 10, tzinfo=UTC))],
        True,
    ),
    (
        "tz = '2024-01-01 10:00:00+02:00'",
        [T("tz", "=", dt.datetime(2024, 1, 1, 8, tzinfo=UTC))],
        True,
    ),
    ("flag = TRUE", [T("flag", "=", True)], True),
    ("flag", [], False),
    ("flag IS TRUE", [], False),
    ("lower(s) = 'a'", [], False),
]


@pytest.mark.parametrize(("sql", "terms", "exact"), EXTRACTION, ids=[c[0] for c in EXTRACTION])
def test_terms_of_sql(sql: str, terms: list[Term], exact: bool) -> None:
    pred = parse_where(sql, SCHEMA)
    assert list(pred.terms) == terms
    assert pred.exact is exact
    for term, want in zip(pred.terms, terms, strict=True):  # types too: 1 == 1.0 == True
        assert [type(v) for v in term.values] == [type(v) for v in want.values]


def test_nanosecond_values_keep_their_nanoseconds() -> None:
    pred = parse_where("tn = '2024-01-01 00:00:00.000000001'", SCHEMA)
    (term,) = pred.terms
    assert pa.scalar(term.values[0], pa.timestamp("ns")).value % 1000 == 1


def test_a_user_expression_has_no_terms() -> None:
    pred = parse_where(pc.field("i") == 5, SCHEMA)
    assert pred.terms == ()
    assert pred.exact is False


# -- pruning, cell by cell ----------------------------------------------------------------------
def _file(values: list[Any], typ: pa.DataType, cid: int = 1, name: str = "x") -> DataFile:
    """The record of a one-column Parquet file of ``values``, as a commit stores it."""
    table = pa.table({name: pa.array(values, typ)})
    buf = io.BytesIO()
    pq.write_table(table, buf, write_statistics=True)
    meta = pq.ParquetFile(pa.BufferReader(buf.getvalue())).metadata
    f = DataFile(
        "t/f.parquet",
        len(buf.getvalue()),
        meta.num_rows,
        file_id="f",
        columns=((cid, name),),
        raw_stats=footer_stats(meta, {name: cid}, {name: typ}),
    )
    return record.decode_file(record.encode_file(f))


def _kept(values: list[Any], typ: pa.DataType, where: str) -> bool:
    f = _file(values, typ)
    schema = pa.schema([("x", typ)])
    pred = parse_where(where, schema)
    assert pred.terms, f"{where} gives no terms"
    kept = bounds.prune([f], pred.terms, [Column(1, "x", str(typ))], schema) == [0]
    rows = pa.table({"x": pa.array(values, typ)})
    if pc.any(matches(rows, pred)).as_py():
        assert kept, f"{where}: a file with matching rows {values} was pruned"
    return kept


NOW = dt.datetime(2024, 3, 1, 12, 0, 0)
LONG = "m" * (PREFIX_CHARS + 10)
PRUNING = [
    # (type, file values, where, kept)
    (pa.int64(), [10, 20, None], "x = 15", True),
    (pa.int64(), [10, 20, None], "x = 21", False),
    (pa.int64(), [10, 20], "x < 10", False),
    (pa.int64(), [10, 20], "x <= 10", True),
    (pa.int64(), [10, 20], "x > 20", False),
    (pa.int64(), [10, 20], "x >= 20", True),
    (pa.int64(), [10, 20], "x IN (1, 2, 30)", False),
    (pa.int64(), [10, 20], "x IN (1, 12, 30)", True),
    (pa.int64(), [10, 20], "x BETWEEN 21 AND 30", False),
    (pa.int8(), [-5, 5], "x = -5", True),
    (pa.int8(), [-5, 5], "x < -100", False),
    (pa.uint64(), [2**63, 2**64 - 1], "x > 9223372036854775807", True),
    (pa.uint64(), [2**63, 2**64 - 1], "x < 9223372036854775808", False),
    (pa.float64(), [1.0, math.nan, 2.0], "x > 2", False),
    (pa.float64(), [1.0, math.nan, 2.0], "x >= 2", True),
    (pa.float64(), [1.0, math.nan, 2.0], "x IN (3.5, 0.5)", False),
    (pa.float64(), [math.nan, math.nan], "x > 1e300", True),  # no bounds: kept
    (pa.float64(), [-0.0, 0.0], "x = 0", True),
    (pa.float64(), [1.0, math.inf], "x > 1e308", True),
    (pa.float32(), [0.1, 0.2], "x < 0.1", False),  # 0.1 as float32 > 0.1 as double
    (pa.float32(), [0.1, 0.2], "x <= 0.1", False),
    (pa.float32(), [0.1, 0.2], "x > 0.1", True),
    (pa.float32(), [0.25, 0.5], "x < 0.25", False),
    (pa.decimal128(10, 2), [Decimal("1.50"), Decimal("2.25")], "x = 1.5", True),
    (pa.decimal128(10, 2), [Decimal("1.50"), Decimal("2.25")], "x > 2.25", False),
    (pa.decimal128(10, 2), [Decimal("1.50"), Decimal("2.25")], "x >= 2.25", True),
    (pa.decimal128(10, 2), [Decimal("1.50"), Decimal("2.25")], "x < 1.499", False),
    (pa.string(), ["apple", "banana"], "x = 'b'", True),
    (pa.string(), ["apple", "banana"], "x = 'c'", False),
    (pa.string(), ["apple", "banana"], "x < 'apple'", False),
    (pa.string(), ["apple", "banana"], "x IN ('zz', 'aa')", False),
    (pa.string(), [LONG], f"x = '{LONG}'", True),  # truncated bounds still hold it
    (pa.string(), [LONG], f"x = '{LONG}x'", True),  # not told apart by a truncated bound
    (pa.string(), [LONG], "x > 'n'", False),
    (pa.string(), ["é"], "x > 'z'", True),  # code point order = UTF-8 byte order
    (pa.binary(), [b"\x01", b"\x10"], "x = CAST('a' AS BINARY)", False),
    (pa.binary(), [b"a", b"c"], "x = CAST('b' AS BINARY)", True),
    (pa.date32(), [dt.date(2024, 1, 1), dt.date(2024, 1, 31)], "x = '2024-01-15'", True),
    (pa.date32(), [dt.date(2024, 1, 1), dt.date(2024, 1, 31)], "x >= '2024-02-01'", False),
    (pa.date32(), [dt.date(2024, 1, 1), dt.date(2024, 1, 31)], "x < DATE '2024-01-01'", False),
    (pa.timestamp("us"), [NOW, NOW + dt.timedelta(hours=1)], "x > '2024-03-01 13:00:00'", False),
    (pa.timestamp("us"), [NOW, NOW + dt.timedelta(hours=1)], "x >= '2024-03-01 13:00:00'", True),
    (pa.timestamp("ms"), [NOW], "x = '2024-03-01 12:00:00.000001'", False),
    (pa.timestamp("ns"), [NOW], "x > '2024-03-01 12:00:00.000000001'", False),
    (pa.timestamp("ns"), [NOW], "x < '2024-03-01 12:00:00.000000001'", True),
    (
        pa.timestamp("us", tz="UTC"),
        [NOW.replace(tzinfo=UTC)],
        "x = '2024-03-01 14:00:00+02:00'",
        True,
    ),
    (
        pa.timestamp("us", tz="UTC"),
        [NOW.replace(tzinfo=UTC)],
        "x = '2024-03-01 14:00:00+01:00'",
        False,
    ),
    (
        pa.timestamp("us", tz="Asia/Kolkata"),
        [NOW.replace(tzinfo=UTC)],
        "x < '2024-03-01 17:30:00'",  # 12:00 UTC is 17:30 in Kolkata
        False,
    ),
    (
        pa.timestamp("us", tz="Asia/Kolkata"),
        [NOW.replace(tzinfo=UTC)],
        "x <= '2024-03-01 17:30:00'",
        True,
    ),
    (pa.bool_(), [False, False], "x = TRUE", False),
    (pa.bool_(), [False, True], "x = TRUE", True),
    (pa.bool_(), [True, None], "x = FALSE", False),
    # null counts
    (pa.int64(), [1, 2], "x IS NULL", False),
    (pa.int64(), [1, None], "x IS NULL", True),
    (pa.int64(), [None, None], "x IS NOT NULL", False),
    (pa.int64(), [None, None], "x < 100", False),
    (pa.int64(), [None, None], "x IN (1, 2)", False),
    (pa.int64(), [None, 1], "x IS NOT NULL", True),
]


@pytest.mark.parametrize(
    ("typ", "values", "where", "kept"),
    PRUNING,
    ids=[f"{c[0]}: {c[2][:40]} ({c[3]})" for c in PRUNING],
)
def test_pruning_cell(typ: pa.DataType, values: list[Any], where: str, kept: bool) -> None:
    assert _kept(values, typ, where) is kept


def _one(f: DataFile, terms: list[Term], typ: pa.DataType | None = None) -> bool:
    typ = pa.int64() if typ is None else typ
    schema = pa.schema([("x", typ)])
    return bounds.prune([f], terms, [Column(1, "x", str(typ))], schema) == [0]


def test_unknown_bounds_and_null_counts_keep_the_file() -> None:
    f = DataFile("a", 1, 10, file_id="a", columns=((1, "x"),), raw_stats=((1, None, None, None),))
    for term in [T("x", "=", 1), T("x", "<", 1), T("x", "is_null"), T("x", "not_null")]:
        assert _one(f, [term]), term
    no_stats = DataFile("a", 1, 10, file_id="a", columns=((1, "x"),))
    assert _one(no_stats, [T("x", "=", 1)])


def test_a_file_that_predates_the_column_holds_only_nulls() -> None:
    old = DataFile("a", 1, 10, file_id="a", columns=((2, "y"),), raw_stats=((2, 0, 9, 0),))
    assert _one(old, [T("x", "is_null")])
    assert not _one(old, [T("x", "=", 1)])
    assert not _one(old, [T("x", "not_null")])


def test_terms_that_cannot_be_compared_prune_nothing() -> None:
    f = _file([10, 20], pa.int64())
    for term in [
        T("x", "=", "15"),  # another kind of value
        T("x", "=", 15.5),
        T("x", "=", None),
        T("x", "in"),
        T("x", "like", "a"),
        T("nope", "=", 100),  # not a column of the table
    ]:
        assert _one(f, [term]), term
    naive = _file([NOW], pa.timestamp("us", tz="UTC"))
    assert _one(naive, [T("x", "=", NOW + dt.timedelta(days=9))], pa.timestamp("us", tz="UTC"))
    assert not _one(
        naive,
        [T("x", "=", NOW.replace(tzinfo=UTC) + dt.timedelta(days=9))],
        pa.timestamp("us", tz="UTC"),
    )


def test_bounds_follow_the_current_column_type() -> None:
    """A column widened after the file was written (int32 -> int64): the same
    record's bounds are decoded per type, not reused across types."""
    f = _file([1, 5], pa.int32())
    assert not _one(f, [T("x", ">", 5)], pa.int32())
    assert not _one(f, [T("x", ">", 5)], pa.int64())
    assert _one(f, [T("x", ">=", 5)], pa.int64())


def test_decoded_bounds_go_with_their_record() -> None:
    f = _file([1, 5], pa.int64())
    f = DataFile(
        f.path, f.size, f.record_count, file_id="x", columns=f.columns, raw_stats=f.raw_stats
    )
    assert not _one(f, [T("x", ">", 5)])
    key = id(f)
    assert key in bounds._DECODED
    del f
    gc.collect()
    assert key not in bounds._DECODED


# -- random files and SQL per type: a file with a matching row is never pruned -----------------
def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


_BASE_TS = dt.datetime(2024, 1, 1)
#: type -> (value near cluster c (0..9), the value as a SQL literal for that column)
RANDOM_KINDS: dict[str, tuple[pa.DataType, Any, Any]] = {
    "int8": (pa.int8(), lambda r, c: r.choice([-128, 127, c * 20 - 100 + r.randint(0, 5)]), str),
    "uint64": (pa.uint64(), lambda r, c: c * 2**60 + r.randint(0, 9), str),
    "float32": (
        pa.float32(),
        lambda r, c: r.choice([math.nan, c * 10.0 + r.random(), math.inf, -0.0]),
        lambda v: repr(v) if math.isfinite(v) else f"CAST('{v}' AS DOUBLE)",
    ),
    "decimal": (
        pa.decimal128(12, 3),
        lambda r, c: Decimal(c * 1000 + r.randint(0, 999)).scaleb(-3),
        str,
    ),
    "string": (
        pa.large_string(),
        lambda r, c: (
            chr(0x61 + c) * r.choice([1, PREFIX_CHARS, PREFIX_CHARS + 3])
            + r.choice(["", "'", "\U0010ffff", "é"])
        ),
        _sql_str,
    ),
    "binary": (
        pa.binary(),
        lambda r, c: bytes([0x41 + c]) * r.choice([1, 70]) + r.choice([b"", b"z"]),
        lambda v: _sql_str(v.decode()),
    ),
    "date64": (
        pa.date64(),
        lambda r, c: dt.date(2024, 1, 1) + dt.timedelta(days=c * 30 + r.randint(0, 3)),
        lambda v: _sql_str(v.isoformat()),
    ),
    "time_ns": (
        pa.time64("ns"),
        lambda r, c: dt.time(c * 2, r.randint(0, 59), 0, r.randint(0, 999_999)),
        lambda v: _sql_str(v.isoformat()),
    ),
    "ts_s_kolkata": (
        pa.timestamp("s", tz="Asia/Kolkata"),
        lambda r, c: (_BASE_TS + dt.timedelta(hours=c * 5, seconds=r.randint(0, 99))).replace(
            tzinfo=UTC
        ),
        lambda v: _sql_str(v.isoformat(sep=" ")),
    ),
    "ts_us": (
        pa.timestamp("us"),
        lambda r, c: _BASE_TS + dt.timedelta(hours=c, microseconds=r.randint(0, 9)),
        lambda v: _sql_str(v.isoformat(sep=" ")),
    ),
    "bool": (pa.bool_(), lambda r, c: c >= 5, lambda v: "TRUE" if v else "FALSE"),
}


def _random_where(rng: random.Random, seen: list[Any], lit: Any) -> str:
    def one() -> str:
        v = rng.choice(seen)
        if v is None:
            return rng.choice(["x IS NULL", "x IS NOT NULL"])
        w = rng.choice(seen)
        a, b = lit(v), "NULL" if w is None else lit(w)
        return rng.choice(
            [
                f"x = {a}",
                f"x < {a}",
                f"x <= {a}",
                f"x > {a}",
                f"{a} >= x",
                f"x IN ({a}, {b})",
                f"x BETWEEN {a} AND {b}",
                f"(x = {a} OR x = {b})",
                f"x != {a}",
            ]
        )

    return " AND ".join(one() for _ in range(rng.randint(1, 2)))


@pytest.mark.parametrize("name", sorted(RANDOM_KINDS))
def test_random_files_and_wheres_never_prune_a_match(name: str) -> None:
    typ, draw, lit = RANDOM_KINDS[name]
    rng = random.Random(f"bounds-{name}")
    schema = pa.schema([("x", typ)])
    columns = [Column(1, "x", str(typ))]
    checked = pruned = 0
    for _ in range(6):
        tables = []
        for _ in range(8):
            c = rng.randint(0, 9)
            values = [
                None if rng.random() < 0.1 else draw(rng, c) for _ in range(rng.randint(1, 6))
            ]
            if rng.random() < 0.1:
                values = [None] * len(values)
            tables.append(values)
        files = [_file(v, typ) for v in tables]
        seen = [v for t in tables for v in t]
        for _ in range(30):
            where = _random_where(rng, seen, lit)
            pred = parse_where(where, schema)
            keep = set(bounds.prune(files, pred.terms, columns, schema))
            for i, values in enumerate(tables):
                rows = pa.table({"x": pa.array(values, typ)})
                n = pc.sum(matches(rows, pred)).as_py() or 0
                assert n == 0 or i in keep, f"{name}: {where} pruned file {values}"
            checked += 1
            pruned += len(files) - len(keep)
    assert checked == 180
    assert pruned > 0, f"{name}: nothing was ever pruned"


# -- black box -----------------------------------------------------------------------------
def test_a_read_opens_only_the_files_pruning_keeps(tmp_path: Path) -> None:
    """Files outside the where's bounds are deleted from disk: the read still works,
    so pruning skipped them without opening them (and without Arrow's pruning:
    the where is exact)."""
    h = lakehouse.open(str(tmp_path / "lh"))
    schema = pa.schema([("id", pa.int64()), ("day", pa.date32()), ("s", pa.string())])
    with h.begin() as txn:
        txn.create_namespace("n")
        txn.create_table("n.t", schema, properties={**NO_AUTO, **PARQUET})  # files to delete
    for k in range(6):
        with h.begin() as txn:
            txn.append(
                "n.t",
                pa.table(
                    {
                        "id": list(range(k * 10, k * 10 + 10)),
                        "day": [dt.date(2024, 1, 1 + k)] * 10,
                        "s": [f"v{k}"] * 10,
                    },
                    schema=schema,
                ),
            )
    root = Path(h.data_location()[0].removeprefix("file://"))
    files = h.list_data_files("n.t")
    assert len(files) == 6
    for f in files:
        if f.stats["id"].max < 20 or f.stats["id"].min > 39:
            (root / f.path).unlink()
    where = "id BETWEEN 25 AND 35 AND day IN ('2024-01-03', '2024-01-04') AND s IS NOT NULL"
    got = h.read("n.t", where=where)
    assert sorted(got.column("id").to_pylist()) == list(range(25, 36))
    assert sorted(h.read("n.t", where="id >= 20 AND id < 22").column("id").to_pylist()) == [20, 21]
    h.close()


# -- property: a pruned read equals a filter of every row ---------------------------------------
PROP_SCHEMA = pa.schema(
    [
        ("i", pa.int16()),
        ("f", pa.float64()),
        ("s", pa.string()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("ms", tz="UTC")),
    ]
)
_INTS = st.one_of(st.none(), st.integers(-50, 50))
_FLOATS = st.one_of(st.none(), st.sampled_from([math.nan, -0.0, 0.0, math.inf]), st.floats(-50, 50))
_STRS = st.one_of(st.none(), st.text(alphabet="abz\u00e9", max_size=3))
_DAYS = st.one_of(st.none(), st.dates(dt.date(2023, 12, 25), dt.date(2024, 1, 10)))
_TSS = st.one_of(
    st.none(),
    st.datetimes(dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2)).map(
        lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000, tzinfo=UTC)
    ),
)


def _row() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"i": _INTS, "f": _FLOATS, "s": _STRS, "day": _DAYS, "ts": _TSS})


def _lit(column: str, value: Any) -> str:
    if column == "f":
        return repr(float(value)) if math.isfinite(value) else f"CAST('{value}' AS DOUBLE)"
    if column in ("s", "day"):
        return "'" + str(value) + "'"
    if column == "ts":
        return "'" + str(value.isoformat(sep=" ")) + "'"
    return str(value)


@st.composite
def _conjunct(draw: st.DrawFn) -> str:
    column = draw(st.sampled_from(["i", "f", "s", "day", "ts"]))
    value = draw({"i": _INTS, "f": _FLOATS, "s": _STRS, "day": _DAYS, "ts": _TSS}[column])
    if value is None:
        return f"{column} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    other = draw({"i": _INTS, "f": _FLOATS, "s": _STRS, "day": _DAYS, "ts": _TSS}[column])
    op = draw(st.sampled_from(["=", "<", "<=", ">", ">=", "!=", "in", "between", "or", "flip"]))
    a = _lit(column, value)
    b = "NULL" if other is None else _lit(column, other)
    if op == "in":
        return f"{column} IN ({a}, {b})"
    if op == "between":
        return f"{column} BETWEEN {a} AND {b}"
    if op == "or":
        return f"({column} = {a} OR {column} = {b})"
    if op == "flip":
        return f"{a} < {column}"
    return f"{column} {op} {a}"


def _rows(t: pa.Table) -> list[tuple[Any, ...]]:
    """``t``'s rows, sorted, NaN spelled so that it equals itself."""
    out = [
        tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in r.values())
        for r in t.to_pylist()
    ]
    return sorted(out, key=repr)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    files=st.lists(st.lists(_row(), min_size=1, max_size=6), min_size=1, max_size=5),
    where=st.lists(_conjunct(), min_size=1, max_size=3).map(" AND ".join),
)
def test_a_pruned_read_equals_a_filter_of_all_rows(
    files: list[list[dict[str, Any]]], where: str
) -> None:
    h = lakehouse.open(f"memory://bounds-{uuid.uuid4().hex}")
    try:
        with h.begin() as txn:
            txn.create_namespace("n")
            txn.create_table("n.t", PROP_SCHEMA, properties=NO_AUTO)
        for rows in files:
            with h.begin() as txn:
                txn.append("n.t", pa.Table.from_pylist(rows, schema=PROP_SCHEMA))
        whole = h.read("n.t")
        expected = whole.filter(matches(whole, parse_where(where, PROP_SCHEMA)))
        got = h.read("n.t", where=where)
        assert _rows(got) == _rows(expected), where
    finally:
        h.close()
