"""lakehouse/iceberg/bounds.py: Iceberg single-value serialization (checked against
pyiceberg 0.12) and the column metrics of real Parquet and inline data files."""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Iterator
from decimal import Decimal, localcontext
from pathlib import Path
from typing import Any
from uuid import UUID

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from iceberg_fixtures import FILES_ONLY, data_file_path, lakehouse_with_namespace
from pyiceberg.conversions import from_bytes, to_bytes
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IntegerType,
    LongType,
    PrimitiveType,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

import lakehouse
from lakehouse.iceberg import types as it
from lakehouse.model import DataFile, assign_columns

UTC = dt.UTC


@pytest.fixture
def lh(tmp_path: Path) -> Iterator[lakehouse.Lakehouse]:
    yield from lakehouse_with_namespace(tmp_path)


# -- single-value serialization --------------------------------------------------------------
I32, I64 = 2**31 - 1, 2**63 - 1
BOUNDS: list[tuple[str, PrimitiveType, Any]] = [
    ("boolean", BooleanType(), False),
    ("boolean", BooleanType(), True),
    *[("int", IntegerType(), v) for v in (0, 1, -1, I32, -I32 - 1)],
    *[("long", LongType(), v) for v in (0, -1, I64, -I64 - 1, 2**32)],
    *[
        ("float", FloatType(), v)
        for v in (0.0, -0.0, 1.5, -3.25, float("inf"), 3.4028234663852886e38)
    ],
    *[("double", DoubleType(), v) for v in (0.0, -0.0, 0.1, -1e308, float("-inf"))],
    *[
        ("decimal(9, 2)", DecimalType(9, 2), Decimal(v))
        for v in ("0.00", "1.27", "1.28", "-1.28", "-1.29", "-0.01", "9999999.99", "-9999999.99")
    ],
    *[
        ("decimal(38, 10)", DecimalType(38, 10), Decimal(v))
        for v in ("9" * 28 + "." + "9" * 10, "-" + "9" * 28 + "." + "9" * 10, "-327.68")
    ],
    *[("date", DateType(), v) for v in (0, -1, 19723, -719162, 2932896)],
    *[("time", TimeType(), v) for v in (0, 1, 86_399_999_999)],
    *[("timestamp", TimestampType(), v) for v in (0, -1, 1_700_000_000_123_456, -I64 - 1)],
    *[("timestamptz", TimestamptzType(), v) for v in (0, -1, 1_700_000_000_123_456)],
    *[("string", StringType(), v) for v in ("", "a", "héllo", "\U0001f600", "\x00")],
    *[("binary", BinaryType(), v) for v in (b"", b"\x00\xff", bytes(range(256)))],
    ("fixed[3]", FixedType(3), b"abc"),
    ("uuid", UUIDType(), UUID("12345678-1234-5678-1234-567812345678")),
]


@pytest.mark.parametrize(
    ("ice", "ptype", "value"), BOUNDS, ids=[f"{b[0]}:{b[2]!r}" for b in BOUNDS]
)
def test_bound_bytes_match_pyiceberg(ice: str, ptype: PrimitiveType, value: Any) -> None:
    mine = it.bound_bytes(ice, value)
    if isinstance(ptype, DecimalType):  # pyiceberg wants the type's exponent
        with localcontext(prec=80):
            value = value.quantize(Decimal(1).scaleb(-ptype.scale))
    assert mine is not None and mine == to_bytes(ptype, value)
    back = from_bytes(ptype, mine)
    assert back == (value.bytes if isinstance(value, UUID) else value)


def test_bound_bytes_python_values_and_refusals() -> None:
    d = dt.date(2024, 1, 1)
    assert it.bound_bytes("date", d) == to_bytes(DateType(), 19723)
    assert it.bound_bytes("time", dt.time(1, 2, 3, 4)) == to_bytes(TimeType(), 3_723_000_004)
    aware = dt.datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
    assert it.bound_bytes("timestamptz", aware) == to_bytes(TimestamptzType(), -1)
    naive = dt.datetime(2024, 1, 1, 0, 0, 0, 1)
    assert it.bound_bytes("timestamp", naive) == to_bytes(TimestampType(), 1_704_067_200_000_001)
    # minimal two's complement: -128 is one byte, 128 two
    assert it.bound_bytes("decimal(5, 0)", Decimal(-128)) == b"\x80"
    assert it.bound_bytes("decimal(5, 0)", Decimal(128)) == b"\x00\x80"
    assert it.bound_bytes("decimal(5, 0)", Decimal(0)) == b"\x00"
    refused: list[tuple[Any, Any]] = [
        ("int", I32 + 1),
        ("int", True),
        ("long", 2**63),
        ("float", 0.1),  # not a float32: a bound could be off
        ("float", float("nan")),
        ("double", float("nan")),
        ("decimal(9, 2)", Decimal("1.234")),  # more places than the scale
        ("decimal(3, 2)", Decimal("10.00")),  # more digits than the precision
        ("decimal(9, 2)", Decimal("inf")),
        ("string", b"x"),
        ("binary", "x"),
        ("fixed[3]", b"ab"),
        ("date", dt.datetime(2024, 1, 1)),
        ("boolean", 1),
        ("list", 1),
        ({"type": "list"}, 1),
        ("int", None),
    ]
    for ice, value in refused:
        assert it.bound_bytes(ice, value) is None, (ice, value)


# -- file metrics on real files --------------------------------------------------------------
METRIC_SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        ("i8", pa.int8()),
        ("u32", pa.uint32()),
        ("u64", pa.uint64()),
        ("f", pa.float32()),
        ("d", pa.float64()),
        ("dec", pa.decimal128(10, 3)),
        ("day", pa.date32()),
        ("day64", pa.date64()),
        ("t32", pa.time32("ms")),
        ("t64", pa.time64("us")),
        ("ts_s", pa.timestamp("s")),
        ("ts_ms", pa.timestamp("ms", "UTC")),
        ("ts_us", pa.timestamp("us", "UTC")),
        ("ts_ns", pa.timestamp("ns")),
        ("s", pa.string()),
        ("ls", pa.large_string()),
        ("b", pa.binary()),
        ("fx", pa.binary(2)),
        ("flag", pa.bool_()),
        ("st", pa.struct([("x", pa.int32())])),
    ]
)
TS = dt.datetime(1969, 12, 31, 23, 59, 58, 123_000, tzinfo=UTC)
METRIC_ROWS = {
    "k": [3, -7, 12],
    "i8": [-128, 127, None],
    "u32": [0, 2**32 - 1, 5],
    "u64": [2**64 - 1, 0, 1],
    "f": [-0.0, 1.5, None],
    "d": [float("nan"), -2.5, 1e300],
    "dec": [Decimal("-1234567.891"), Decimal("0.001"), None],
    "day": [dt.date(1960, 2, 29), dt.date(2038, 1, 19), None],
    "day64": [dt.date(1969, 12, 31), dt.date(2000, 1, 1), dt.date(1900, 1, 1)],
    "t32": [dt.time(0, 0, 0, 1000), dt.time(23, 59, 59, 999_000), None],
    "t64": [dt.time(12), dt.time(0, 0, 0, 1), None],
    "ts_s": [dt.datetime(1900, 1, 1), dt.datetime(2100, 1, 1), None],
    "ts_ms": [TS, TS + dt.timedelta(days=1), None],
    "ts_us": [TS + dt.timedelta(microseconds=1), None, None],
    "ts_ns": [dt.datetime(2024, 1, 1), None, None],
    "s": ["banana", "apple", "x" * 100],
    "ls": ["\ue000", "a", None],
    "b": [b"\x00", b"\xff" * 70, None],
    "fx": [b"ab", b"\x00\x01", None],
    "flag": [True, None, True],
    "st": [{"x": 1}, None, {"x": 2}],
}

# the Iceberg bounds each column's values should give (None: no bound)
EXPECT: dict[str, tuple[Any, Any]] = {
    "k": (-7, 12),
    "i8": (-128, 127),
    "u32": (0, 2**32 - 1),
    "f": (-0.0, 1.5),
    "d": (-2.5, 1e300),
    "dec": (Decimal("-1234567.891"), Decimal("0.001")),
    "day": (-3594, 24855),
    "day64": (-25567, 10957),
    "t32": (1000, 86_399_999_000),
    "t64": (1, 43_200_000_000),
    "ts_s": (-2208988800 * 10**6, 4102444800 * 10**6),
    "ts_ms": (-1_877_000, 86_398_123_000),
    "ts_us": (-1_876_999, -1_876_999),
    "s": ("apple", "x" * 63 + "y"),  # "x"*100 rounds up to a 64-character prefix
    "ls": ("a", None),  # U+E000 orders differently in UTF-16: no upper bound
    "b": (b"\x00", None),  # 0xff * 70 has no rounded-up prefix
    "fx": (b"\x00\x01", b"ab"),
    "flag": (True, True),
}
PTYPES: dict[str, PrimitiveType] = {
    "k": LongType(),
    "i8": IntegerType(),
    "u32": LongType(),
    "f": FloatType(),
    "d": DoubleType(),
    "dec": DecimalType(10, 3),
    "day": DateType(),
    "day64": DateType(),
    "t32": TimeType(),
    "t64": TimeType(),
    "ts_s": TimestampType(),
    "ts_ms": TimestamptzType(),
    "ts_us": TimestamptzType(),
    "s": StringType(),
    "ls": StringType(),
    "b": BinaryType(),
    "fx": FixedType(2),
    "flag": BooleanType(),
}


@pytest.mark.parametrize("inline", [False, True], ids=["parquet", "inline"])
def test_file_metrics_of_real_files(lh: lakehouse.Lakehouse, inline: bool) -> None:
    props = {"compaction.auto": "false"} if inline else FILES_ONLY
    with lh.begin() as t:
        t.create_table("ns.t", METRIC_SCHEMA, props)
    data = pa.table(METRIC_ROWS, METRIC_SCHEMA)
    with lh.begin() as t:
        t.append("ns.t", data)
    (f,) = lh.list_data_files("ns.t")
    assert f.is_inline == inline
    d = lh.describe_table("ns.t")
    m = it.file_metrics(f, d.columns, d.schema)
    ids = d.column_ids()
    names = {v: k for k, v in ids.items()}
    assert set(m) == {"value_counts", "null_value_counts", "lower_bounds", "upper_bounds"}
    held = [c.id for c in d.columns if c.name in PTYPES]
    assert m["value_counts"] == [{"key": i, "value": 3} for i in held]
    assert m["null_value_counts"] == [
        {"key": i, "value": data.column(names[i]).null_count} for i in held
    ]
    for key in ("lower_bounds", "upper_bounds"):
        got = {names[e["key"]]: from_bytes(PTYPES[names[e["key"]]], e["value"]) for e in m[key]}
        pos = 0 if key == "lower_bounds" else 1
        want = {n: b[pos] for n, b in EXPECT.items() if b[pos] is not None}
        assert got == want, key
        assert [e["key"] for e in m[key]] == sorted(e["key"] for e in m[key])
    f_lo = next(e["value"] for e in m["lower_bounds"] if e["key"] == ids["f"])
    assert f_lo == struct.pack("<f", -0.0)  # the sign of a zero lower bound
    # every bound holds for the values pyarrow reads from the file, in Iceberg's terms
    if not inline:
        back = pq.read_table(data_file_path(lh, f))
        for name, (lo, hi) in EXPECT.items():
            col = back.column(name)
            if pa.types.is_floating(col.type):
                col = pc.filter(col, pc.invert(pc.is_nan(col)))
            mm = pc.min_max(col)
            low, high = (_iceberg(PTYPES[name], mm[k].as_py()) for k in ("min", "max"))
            assert lo is None or lo <= low, name
            assert hi is None or high <= hi, name


def _iceberg(ptype: PrimitiveType, v: Any) -> Any:
    """A Python value as Iceberg has it (days, microseconds)."""
    kinds = {DateType: "date", TimeType: "time", TimestampType: "timestamp"}
    kinds[TimestamptzType] = "timestamptz"
    name = kinds.get(type(ptype))
    return v if name is None else it.long_value(name, v)


def test_file_metrics_round_temporal_bounds_outward() -> None:
    schema = pa.schema(
        [("ts", pa.timestamp("us", "UTC")), ("day", pa.date64()), ("t", pa.time32("s"))]
    )
    cols, _ = assign_columns(schema)
    raw = (
        (1, ["n", -1_500], ["n", 2_500], 0),  # ns: -1.5 us .. 2.5 us
        (2, ["n", -1], ["n", 86_400 * 10**9 + 1], None),
        (3, ["i", 59], ["i", 61], 1),  # older records: the Arrow unit (seconds)
    )
    f = DataFile(
        "x.parquet", record_count=4, columns=((1, "ts"), (2, "day"), (3, "t")), raw_stats=raw
    )
    m = it.file_metrics(f, cols, schema)

    def vals(key: str) -> dict[int, Any]:
        types = {1: TimestamptzType(), 2: DateType(), 3: TimeType()}
        return {e["key"]: from_bytes(types[e["key"]], e["value"]) for e in m[key]}

    assert vals("lower_bounds") == {1: -2, 2: -1, 3: 59_000_000}
    assert vals("upper_bounds") == {1: 3, 2: 2, 3: 61_000_000}
    assert m["null_value_counts"] == [{"key": 1, "value": 0}, {"key": 3, "value": 1}]


def test_file_metrics_skip_what_is_unknown() -> None:
    schema = pa.schema([("a", pa.int32()), ("b", pa.string()), ("c", pa.decimal128(4, 2))])
    cols, _ = assign_columns(schema)
    raw = (
        (1, 2**40, None, None),  # out of range for int
        (2, ["b", "AA=="], 7, -1),  # wrong kinds
        (3, ["d", "1.234"], ["d", "99.99"], 2),  # too many places; fine
        (9, 1, 2, 0),  # a column the table no longer has
    )
    f = DataFile(
        "x", record_count=5, columns=((1, "a"), (2, "b"), (3, "c"), (9, "z")), raw_stats=raw
    )
    m = it.file_metrics(f, cols, schema)
    assert m["value_counts"] == [{"key": i, "value": 5} for i in (1, 2, 3)]
    assert m["null_value_counts"] == [{"key": 3, "value": 2}]
    assert m["lower_bounds"] == []
    assert m["upper_bounds"] == [{"key": 3, "value": to_bytes(DecimalType(4, 2), Decimal("99.99"))}]
    # a column the file does not hold gets nothing
    g = DataFile("y", record_count=5, columns=((1, "a"),), raw_stats=raw[:1])
    assert it.file_metrics(g, cols, schema)["value_counts"] == [{"key": 1, "value": 5}]


def test_file_metrics_of_a_widened_column(lh: lakehouse.Lakehouse) -> None:
    """A file written when the column was int32 gets long bounds once it is int64."""
    with lh.begin() as t:
        t.create_table("ns.t", pa.schema([("n", pa.int32()), ("x", pa.float32())]), FILES_ONLY)
    with lh.begin() as t:
        t.append("ns.t", pa.table({"n": [-5, 9]}, pa.schema([("n", pa.int32())])))
    wide = pa.schema([("n", pa.int64()), ("x", pa.float64())])
    with lh.begin() as t:
        t.alter_table("ns.t", schema=wide)
    d = lh.describe_table("ns.t")
    (f,) = lh.list_data_files("ns.t")
    m = it.file_metrics(f, d.columns, d.schema)
    assert m["lower_bounds"] == [{"key": 1, "value": to_bytes(LongType(), -5)}]
    assert m["upper_bounds"] == [{"key": 1, "value": to_bytes(LongType(), 9)}]
    assert m["null_value_counts"] == [{"key": 1, "value": 0}, {"key": 2, "value": 2}]


FAST_CASES: list[tuple[pa.DataType, list[Any]]] = [
    (pa.int32(), [0, -(2**31), 2**31 - 1, 2**31, True, 1.5, ["i", 3]]),
    (pa.uint32(), [0, 2**32 - 1, -1]),
    (pa.int64(), [2**63 - 1, -(2**63), 2**63, "7"]),
    (pa.string(), ["", "abc", "é", "\ud7ff", "\ue000", "a😀", 5]),
    (pa.float64(), [0.0, -0.0, 1.5, -1e308, float("inf"), float("nan"), 3]),
    (pa.bool_(), [True, False, 1]),
    (pa.date32(), [["n", 0], ["n", -1], ["n", 86_400 * 10**9 + 1], ["n", 2**62], ["i", 3], 4]),
    (pa.timestamp("us"), [["n", -1], ["n", 1001], ["n", 2**63 - 1], ["x", 1], ["n", True]]),
    (pa.timestamp("ms", "UTC"), [["n", 5 * 10**6], ["n", -(2**63)]]),
    (pa.time64("us"), [["n", 999], ["n", 86_399 * 10**9]]),
    (
        pa.decimal128(5, 2),
        [["d", "1.5"], ["d", "-999.99"], ["d", "1000.00"], ["d", "0.001"], ["d", "x"]],
    ),
    (pa.decimal128(38, 0), [["d", "1e37"], ["d", "-1"], ["d", "NaN"]]),
]


@pytest.mark.parametrize(("arrow", "raws"), FAST_CASES, ids=[str(t) for t, _ in FAST_CASES])
def test_file_metrics_fast_bounds_equal_the_general_path(
    arrow: pa.DataType, raws: list[Any]
) -> None:
    """Bounds encoded straight from the recorded JSON value are those the general path
    (decode with the column type, then serialize) gives, refusals included."""
    from lakehouse.iceberg import bounds

    cols, _ = assign_columns(pa.schema([("c", arrow)]))
    schema = pa.schema([("c", arrow)])
    ((cid, t, ice, _),) = bounds._plan_of(tuple(cols), schema)
    for raw in raws:
        f = DataFile("x", record_count=3, columns=((cid, "c"),), raw_stats=((cid, raw, raw, 0),))
        m = it.file_metrics(f, cols, schema)
        for key, upper in (("lower_bounds", False), ("upper_bounds", True)):
            want = bounds._bound(raw, t, ice, upper)
            assert m[key] == ([] if want is None else [{"key": cid, "value": want}]), (raw, upper)
