"""lakehouse.partition: Iceberg's transforms (spec vectors, cross-checked with
pyiceberg), spec parsing, vectorised splitting, the order-preserving file ids
and pruning by partition (cell by cell, and a brute-force soundness check)."""

from __future__ import annotations

import datetime as dt
import math
import random
from decimal import Decimal
from typing import Any
from uuid import UUID

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lakehouse import partition as part
from lakehouse import partition_encoding as pe
from lakehouse.partition import PartitionField, PartitionSpec, Transform
from lakehouse.terms import Op, Term

UTC = dt.UTC
T = Transform
D2 = pa.decimal128(9, 2)

# -- the Iceberg spec's hash vectors (Appendix B) ---------------------------------------------
HASH_VECTORS = [
    (34, pa.int32(), 2017239379),
    (34, pa.int64(), 2017239379),
    (Decimal("14.20"), D2, -500754589),
    (dt.date(2017, 11, 16), pa.date32(), -653330422),
    (dt.time(22, 31, 8), pa.time64("us"), -662762989),
    (dt.datetime(2017, 11, 16, 22, 31, 8), pa.timestamp("us"), -2047944441),
    (
        dt.datetime(2017, 11, 16, 14, 31, 8, tzinfo=dt.timezone(dt.timedelta(hours=-8))),
        pa.timestamp("us", tz="UTC"),
        -2047944441,
    ),
    ("iceberg", pa.string(), 1210000089),
    (UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7"), pa.binary(16), 1488055340),
    (b"\x00\x01\x02\x03", pa.binary(4), -188683207),
    (b"\x00\x01\x02\x03", pa.binary(), -188683207),
]


@pytest.mark.parametrize(("value", "typ", "expected"), HASH_VECTORS)
def test_bucket_hash_matches_the_spec_vectors(value: Any, typ: pa.DataType, expected: int) -> None:
    assert part.bucket_hash(value, typ) == expected


def test_nanosecond_timestamps_hash_their_microseconds() -> None:
    # spec v3: timestamp_ns hashes like the timestamp of its (floored) microseconds
    ns = pa.array([1510871468000001001], pa.timestamp("ns")).to_pylist()[0]
    assert part.bucket_hash(ns, pa.timestamp("ns")) == -1207196810
    us = dt.datetime(2017, 11, 16, 22, 31, 8, 1)
    assert part.bucket_hash(ns, pa.timestamp("ns")) == part.bucket_hash(us, pa.timestamp("us"))


@pytest.mark.parametrize("typ", [pa.float64(), pa.float32(), pa.bool_()])
def test_floats_and_booleans_are_not_bucketable(typ: pa.DataType) -> None:
    with pytest.raises(ValueError, match="bucket"):
        T("bucket", 4).result_type(typ)
    with pytest.raises(ValueError, match="cannot be bucketed"):
        part.bucket_hash(True if typ == pa.bool_() else 1.0, typ)


# unscaled value -> Java's BigInteger.toByteArray (minimal two's complement, big-endian)
DECIMAL_BYTES = [(0, "00"), (1420, "058c"), (127, "7f"), (128, "0080"), (-128, "80")]
DECIMAL_BYTES += [(-129, "ff7f"), (-1, "ff"), (2**63, "008000000000000000")]


@pytest.mark.parametrize(("unscaled", "hex_bytes"), DECIMAL_BYTES)
def test_decimals_hash_their_minimal_twos_complement(unscaled: int, hex_bytes: str) -> None:
    typ = pa.decimal128(38, 3)
    assert pe.hash_bytes(Decimal(unscaled).scaleb(-3), typ).hex() == hex_bytes


def test_vectorised_murmur_equals_mmh3() -> None:
    rng = np.random.default_rng(7)
    v = np.concatenate([rng.integers(-(2**63), 2**63 - 1, 2000), [0, -1, 2**63 - 1, -(2**63)]])
    got = pe.murmur3_longs(v.astype(np.int64))
    assert got.tolist() == [part.bucket_hash(int(x), pa.int64()) for x in v]


# -- transforms: vectorised == one value == pyiceberg ----------------------------------------
def _ts_micros(v: dt.datetime) -> int:
    return (v.replace(tzinfo=None) - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)


rnd = random.Random(21)
INTS = [
    None,
    0,
    1,
    -1,
    9,
    10,
    -10,
    -11,
    2**31 - 1,
    -(2**31),
    *(rnd.randint(-(10**6), 10**6) for _ in range(60)),
]
STRS = [
    None,
    "",
    "a",
    "ab",
    "iceberg",
    "é日本語x",
    *("".join(rnd.choices("abcé日", k=rnd.randint(0, 7))) for _ in range(40)),
]
DECS = [
    None,
    Decimal("14.20"),
    Decimal("-0.01"),
    Decimal("10.65"),
    *(Decimal(rnd.randint(-(10**7), 10**7)).scaleb(-2) for _ in range(40)),
]
DATES = [
    None,
    dt.date(1970, 1, 1),
    dt.date(1969, 12, 31),
    dt.date(2024, 2, 29),
    dt.date(1900, 3, 1),
    *(dt.date(1970, 1, 1) + dt.timedelta(days=rnd.randint(-40000, 40000)) for _ in range(40)),
]
TSS = [
    None,
    dt.datetime(1970, 1, 1),
    dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
    dt.datetime(2024, 1, 1, 0, 0),
    *(
        dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=rnd.randint(-(10**16), 10**16))
        for _ in range(60)
    ),
]

SAMPLES = [("int", INTS, pa.int64()), ("str", STRS, pa.string()), ("dec", DECS, D2)]
SAMPLES += [("date", DATES, pa.date32()), ("ts", TSS, pa.timestamp("us"))]


def _ice_value(kind: str, v: Any) -> Any:
    if kind == "date":
        return (v - dt.date(1970, 1, 1)).days
    return _ts_micros(v) if kind == "ts" else v


def _pyiceberg(t: Transform, kind: str, v: Any) -> Any:
    ice = pytest.importorskip("pyiceberg.transforms")
    it = pytest.importorskip("pyiceberg.types")
    types = {"int": it.LongType(), "str": it.StringType(), "dec": it.DecimalType(9, 2)}
    types |= {"date": it.DateType(), "ts": it.TimestampType()}
    w = t.param or 1
    make: dict[str, Any] = {
        "bucket": lambda: ice.BucketTransform(w),
        "truncate": lambda: ice.TruncateTransform(w),
    }
    make |= {"year": ice.YearTransform, "month": ice.MonthTransform, "day": ice.DayTransform}
    make["hour"] = ice.HourTransform
    out = make[t.name]().transform(types[kind])(_ice_value(kind, v))
    return (out - dt.date(1970, 1, 1)).days if isinstance(out, dt.date) else out


CASES = [
    (tr, kind, values, typ)
    for kind, values, typ in SAMPLES
    for tr in [
        T("bucket", 16),
        T("bucket", 1000),
        T("truncate", 10),
        T("truncate", 3),
        T("year"),
        T("month"),
        T("day"),
        T("hour"),
    ]
    if not (tr.name == "truncate" and kind in ("date", "ts"))
    and not (tr.name in ("year", "month", "day", "hour") and kind in ("int", "str", "dec"))
    and not (tr.name == "hour" and kind == "date")
]


@pytest.mark.parametrize(("tr", "kind", "values", "typ"), CASES, ids=lambda x: str(x)[:20])
def test_transforms_agree_with_pyiceberg(
    tr: Transform, kind: str, values: list[Any], typ: pa.DataType
) -> None:
    arr = pa.array(values, typ)
    vec = tr.apply(pa.chunked_array([arr[:7], arr[7:]])).to_pylist()
    one = [tr.apply_py(v, typ) for v in values]
    ref = [None if v is None else _pyiceberg(tr, kind, v) for v in values]
    assert vec == one == ref


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
@pytest.mark.parametrize("tz", [None, "UTC", "America/New_York"])
def test_time_transforms_use_the_utc_instant_in_every_unit(unit: str, tz: str | None) -> None:
    ts: list[dt.datetime | None] = [
        dt.datetime(1969, 12, 31, 23, 0, 0, tzinfo=UTC),
        dt.datetime(2024, 1, 31, 23, 30, tzinfo=UTC),
    ]
    ts += [dt.datetime(1900, 3, 1, 5, tzinfo=UTC), None]
    typ = pa.timestamp(unit, tz)
    arr = pa.array([None if v is None else v if tz else v.replace(tzinfo=None) for v in ts], typ)
    expect = {"year": [-1, 54, -70, None], "month": [-1, 648, -838, None]}
    expect |= {"day": [-1, 19753, -25508, None], "hour": [-1, 474095, -612187, None]}
    for name, want in expect.items():
        assert T(name).apply(arr).to_pylist() == want, name
        assert [T(name).apply_py(v, typ) for v in arr.to_pylist()] == want, name


def test_date64_and_times_as_iceberg_longs() -> None:
    d64 = pa.array([dt.date(1969, 12, 31), dt.date(2017, 11, 16), None], pa.date64())
    assert T("day").apply(d64).to_pylist() == [-1, 17486, None]
    for typ in (pa.time32("s"), pa.time32("ms"), pa.time64("us"), pa.time64("ns")):
        arr = pa.array([dt.time(22, 31, 8), None], typ)
        assert T("bucket", 2**31 - 1).apply(arr).to_pylist()[0] == -662762989 & 0x7FFFFFFF


TRUNCATE_VECTORS = [
    (10, 1, pa.int32(), 0),
    (10, -1, pa.int32(), -10),
    (10, 1, pa.int64(), 0),
    (10, -1, pa.int64(), -10),
    (50, Decimal("10.65"), pa.decimal128(5, 2), Decimal("10.50")),
    (50, Decimal("-10.65"), pa.decimal128(5, 2), Decimal("-11.00")),
    (3, "iceberg", pa.string(), "ice"),
    (2, "日本語", pa.large_string(), "日本"),
    (3, b"\x01\x02\x03\x04", pa.binary(), b"\x01\x02\x03"),
]


@pytest.mark.parametrize(("w", "value", "typ", "expected"), TRUNCATE_VECTORS)
def test_truncate_matches_the_spec(w: int, value: Any, typ: pa.DataType, expected: Any) -> None:
    assert T("truncate", w).apply_py(value, typ) == expected
    assert T("truncate", w).apply(pa.array([value, None], typ)).to_pylist() == [expected, None]


APPLICABLE = [  # (transform, type, result type or None: not applicable)
    (T("identity"), pa.float64(), pa.float64()),
    (T("identity"), pa.list_(pa.int32()), None),
    (T("identity"), pa.uint64(), None),
    (T("day"), pa.string(), None),
    (T("day"), pa.date32(), pa.int32()),
    (T("hour"), pa.date32(), None),
    (T("hour"), pa.timestamp("ms", "UTC"), pa.int32()),
    (T("truncate", 4), pa.date32(), None),
    (T("truncate", 4), pa.binary(4), None),
    (T("truncate", 4), D2, D2),
    (T("bucket", 4), pa.float32(), None),
    (T("bucket", 4), pa.time64("us"), pa.int32()),
    (T("year"), pa.int64(), None),
    (T("bucket"), pa.int64(), None),
    (T("truncate", 0), pa.int64(), None),
    (T("day", 3), pa.date32(), None),
]


@pytest.mark.parametrize(("tr", "typ", "result"), APPLICABLE)
def test_result_types(tr: Transform, typ: pa.DataType, result: pa.DataType | None) -> None:
    if result is None:
        with pytest.raises(ValueError) as e:
            tr.result_type(typ)
        assert f"transform {tr}" in str(e.value) and f"a {typ} column" in str(e.value)
    else:
        assert tr.result_type(typ) == result


def test_properties_of_transforms() -> None:
    names = ["identity", "year", "month", "day", "hour", "bucket", "truncate"]
    assert [T(n).suffix for n in names] == [
        "",
        "_year",
        "_month",
        "_day",
        "_hour",
        "_bucket",
        "_trunc",
    ]
    assert [T(n).order_preserving for n in names] == [True] * 5 + [False, True]


def test_apply_errors_are_value_errors() -> None:
    huge = pa.array([2**62], pa.int64()).view(pa.timestamp("s"))
    with pytest.raises(ValueError, match="out of range"):
        T("month").apply(huge)
    views = pa.array(["iceberg", None], pa.string_view())
    assert T("truncate", 3).apply(views).to_pylist() == ["ice", None]
    with pytest.raises(ValueError, match="truncate"):  # -2**31 - 8 does not fit int32
        T("truncate", 10).apply(pa.array([-(2**31)], pa.int32()))


# -- parse_spec -----------------------------------------------------------------------------------
SCHEMA = pa.schema(
    [
        ("country", pa.string()),
        ("ts", pa.timestamp("us", "UTC")),
        ("customer_id", pa.int64()),
        ("sku", pa.string()),
        ("d", pa.date32()),
        ("Odd Name", pa.int32()),
        ("amount", D2),
    ]
)
COLS = [(i + 1, n) for i, n in enumerate(SCHEMA.names)]
NAMES = dict(COLS)
TYPES = {i: SCHEMA.field(n).type for i, n in COLS}


def spec(*items: str, spec_id: int = 1, previous: tuple[PartitionSpec, ...] = ()) -> PartitionSpec:
    return part.parse_spec(list(items), COLS, SCHEMA, spec_id, previous)


def test_parse_spec_names_ids_and_spelling() -> None:
    s = spec(
        "country", " DAY ( ts ) ", "bucket(16, customer_id)", 'truncate(4, "sku")', "`Odd Name`"
    )
    assert [f.name for f in s.fields] == [
        "country",
        "ts_day",
        "customer_id_bucket",
        "sku_trunc",
        "Odd Name",
    ]
    assert [f.field_id for f in s.fields] == [1000, 1001, 1002, 1003, 1004]
    assert s.fields[2] == PartitionField(3, T("bucket", 16), "customer_id_bucket", 1002)
    spelled = s.spelling(NAMES)
    assert spelled == (
        "country",
        "day(ts)",
        "bucket(16, customer_id)",
        "truncate(4, sku)",
        "`Odd Name`",
    )
    assert part.parse_spec(list(spelled), COLS, SCHEMA, 1) == s
    assert spec("days(ts)", "Hours(ts)").spelling(NAMES) == ("day(ts)", "hour(ts)")
    empty: Any
    for empty in (None, [], ()):
        assert part.parse_spec(empty, COLS, SCHEMA, 0).is_unpartitioned


def test_field_ids_survive_spec_changes() -> None:
    first = spec("country", "day(ts)", spec_id=0)
    second = spec("day(ts)", "bucket(8, customer_id)", spec_id=1, previous=(first,))
    assert [f.field_id for f in second.fields] == [1001, 1002]
    third = spec("country", "month(ts)", spec_id=2, previous=(first, second))
    assert [f.field_id for f in third.fields] == [1000, 1003]


BAD_SPECS = [  # (items, exception, message fragment)
    ("day(ts)", TypeError, "list of strings"),
    ([3], TypeError, "item 3 is not a string"),
    (["week(ts)"], ValueError, "'week(ts)': unknown transform 'week'"),
    (["bucket(0, customer_id)"], ValueError, "'bucket(0, customer_id)': bucket takes a positive"),
    (["bucket(x, customer_id)"], ValueError, "bucket takes a positive integer bucket count"),
    (["bucket(customer_id)"], ValueError, "bucket takes a positive"),
    (["truncate(-1, sku)"], ValueError, "truncate takes a positive integer width"),
    (["truncate(1.5, sku)"], ValueError, "truncate takes a positive"),
    (["nope"], ValueError, "'nope': no column 'nope'"),
    (["day(nope)"], ValueError, "no column 'nope'"),
    (["day(country)"], ValueError, "'day\\(country\\)': transform day does not apply to a string"),
    (["truncate(4, d)"], ValueError, "transform truncate\\[4\\] does not apply to a date32"),
    (["hour(d)"], ValueError, "transform hour does not apply"),
    (["country", "Country"], ValueError, "partition field 'country' twice"),
    (["day(ts)", "days(ts)"], ValueError, "'days\\(ts\\)': partition field 'ts_day' twice"),
]


@pytest.mark.parametrize(("items", "exc", "fragment"), BAD_SPECS)
def test_parse_spec_errors_name_the_item(items: Any, exc: type[Exception], fragment: str) -> None:
    with pytest.raises(exc, match=fragment if "\\" in fragment else None) as e:
        part.parse_spec(items, COLS, SCHEMA, 1)
    if "\\" not in fragment:
        assert fragment in str(e.value)


# -- split ---------------------------------------------------------------------------------------
def _rows(n: int, seed: int) -> pa.Table:
    r = random.Random(seed)
    base = dt.datetime(2024, 1, 1, tzinfo=UTC)
    return pa.table(
        {
            "country": [r.choice(["NL", "DE", "FR", None, "de"]) for _ in range(n)],
            "ts": [
                None if r.random() < 0.1 else base + dt.timedelta(hours=r.randint(-100, 100))
                for _ in range(n)
            ],
            "customer_id": [r.randint(-50, 50) for _ in range(n)],
            "sku": [r.choice(["ab", "abc", "b", "", None, "日本語"]) for _ in range(n)],
            "d": [None] * n,
            "Odd Name": list(range(n)),
            "amount": [Decimal(r.randint(-9999, 9999)).scaleb(-2) for _ in range(n)],
        },
        schema=SCHEMA,
    )


SPLIT_SPECS = [
    ("country",),
    ("day(ts)", "bucket(4, customer_id)"),
    ("country", "hour(ts)", "truncate(2, sku)", "truncate(100, amount)"),
    ("d", "month(ts)"),
]


@pytest.mark.parametrize("items", SPLIT_SPECS)
def test_split_groups_like_a_python_loop(items: tuple[str, ...]) -> None:
    s = spec(*items)
    rows = _rows(500, seed=len(items))
    chunked = pa.concat_tables([rows.slice(0, 123), rows.slice(123)])
    groups = part.split(s, chunked, NAMES)
    expect: dict[tuple[Any, ...], list[int]] = {}
    for i, row in enumerate(rows.to_pylist()):
        key = tuple(
            f.transform.apply_py(row[NAMES[f.source_id]], TYPES[f.source_id]) for f in s.fields
        )
        expect.setdefault(key, []).append(i)
    assert {v: idx.tolist() for v, idx in groups} == expect
    assert all(idx.dtype == np.int64 for _, idx in groups)
    types = [f.transform.result_type(TYPES[f.source_id]) for f in s.fields]
    ids = [part.file_id(s, types, v, "x") for v, _ in groups]
    assert ids == sorted(ids)


def test_split_without_packing_the_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    s = spec("country", "day(ts)", "truncate(2, sku)")
    rows = _rows(300, seed=5)
    packed = part.split(s, rows, NAMES)
    monkeypatch.setattr(part, "_RADIX_LIMIT", 1)  # as if the codes did not fit an int64
    unpacked = part.split(s, rows, NAMES)
    assert [(v, i.tolist()) for v, i in unpacked] == [(v, i.tolist()) for v, i in packed]
    assert len(packed) > 10


def test_split_unpartitioned_and_empty() -> None:
    rows = _rows(10, seed=1)
    [(values, idx)] = part.split(PartitionSpec(0), rows, NAMES)
    assert values == () and idx.tolist() == list(range(10))
    assert part.split(spec("country"), rows.slice(0, 0), NAMES) == []


def test_split_a_million_rows() -> None:
    n = 1_000_000
    rng = np.random.default_rng(3)
    micros = rng.integers(0, 365 * 86_400_000_000, n) + 1_704_067_200_000_000
    rows = pa.table(
        {
            "ts": pa.array(micros, pa.timestamp("us", "UTC")),
            "customer_id": pa.array(rng.integers(0, 10**9, n)),
            "country": pa.array(rng.choice(["NL", "DE", "FR"], n)),
        }
    )
    s = part.parse_spec(
        ["country", "month(ts)", "bucket(8, customer_id)"],
        [(1, "ts"), (2, "customer_id"), (3, "country")],
        rows.schema,
        1,
    )
    groups = part.split(s, rows, {1: "ts", 2: "customer_id", 3: "country"})
    assert len(groups) == 3 * 12 * 8
    assert sum(len(idx) for _, idx in groups) == n
    values, idx = groups[-1]
    assert values[0] == "NL"
    sample = rows.take(idx[:50]).to_pylist()
    assert {
        (r["country"], T("month").apply_py(r["ts"], rows.schema.field("ts").type)) for r in sample
    } == {values[:2]}


def test_split_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"partition field 'ts_day'.*no column 'ts'"):
        part.split(spec("day(ts)"), pa.table({"x": [1]}), NAMES)
    with pytest.raises(ValueError, match="partition field 'country': column id 1"):
        part.split(spec("country"), _rows(3, 1), {})
    bad = pa.table({"ts": pa.array(["2024-01-01"])})
    with pytest.raises(ValueError, match="partition field 'ts_day': transform day does not apply"):
        part.split(spec("day(ts)"), bad, NAMES)


# -- the key text and the record's values ----------------------------------------------------------
finite = st.floats(allow_nan=False, width=64)
KINDS: list[tuple[pa.DataType, st.SearchStrategy[Any]]] = [
    (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    (pa.int16(), st.integers(-(2**15), 2**15 - 1)),
    (pa.bool_(), st.booleans()),
    (pa.string(), st.text(st.characters(exclude_categories=["Cs"]), max_size=6)),
    (pa.binary(), st.binary(max_size=6)),
    (pa.float64(), finite | st.sampled_from([0.0, -0.0, math.inf, -math.inf])),
    (D2, st.integers(-(10**9) + 1, 10**9 - 1).map(lambda n: Decimal(n).scaleb(-2))),
    (pa.date32(), st.dates()),
    (pa.time64("us"), st.times()),
    (pa.timestamp("us"), st.datetimes()),
    (
        pa.timestamp("ms", "UTC"),
        st.datetimes(timezones=st.just(UTC)).map(
            lambda v: v.replace(microsecond=v.microsecond // 1000 * 1000)
        ),
    ),
    (
        pa.timestamp("ns"),
        st.integers(-(2**62), 2**62).map(lambda n: pa.scalar(n, pa.timestamp("ns")).as_py()),
    ),
]


@pytest.mark.parametrize(("typ", "values"), KINDS, ids=lambda x: str(x)[:24])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_key_order_is_value_order_nulls_first(
    typ: pa.DataType, values: Any, data: st.DataObject
) -> None:
    a, b = data.draw(st.one_of(st.none(), values)), data.draw(st.one_of(st.none(), values))
    ka, kb = pe.enc(a, typ), pe.enc(b, typ)
    assert "/" not in ka
    if a is None or b is None:
        assert (ka < kb) == (a is None and b is not None)
    elif a < b:
        assert ka < kb
    elif a == b and not (isinstance(a, float) and str(a) != str(b)):
        assert ka == kb
    # self-delimiting: keys followed by "/" sort the same, and a prefix sorts first
    assert (ka + "/z" < kb + "/0") == (ka < kb) or ka == kb


@pytest.mark.parametrize(("typ", "values"), KINDS, ids=lambda x: str(x)[:24])
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_record_values_round_trip(typ: pa.DataType, values: Any, data: st.DataObject) -> None:
    v = data.draw(st.one_of(st.none(), values))
    s = PartitionSpec(3, (PartitionField(1, T("identity"), "c", 1000),))
    raw = part.encode_values(s, [typ], [v])
    import json

    back = part.decode_values(s, [typ], json.loads(json.dumps(raw)))
    assert back == (v,) and type(back[0]) is type(v)
    assert pe.enc(back[0], typ) == pe.enc(v, typ)


def test_special_floats_and_zeros() -> None:
    keys = [
        pe.enc(v, pa.float64()) for v in (-math.inf, -1.5, -0.0, 0.0, 1e-300, math.inf, math.nan)
    ]
    assert keys == sorted(keys) and len(set(keys)) == 7
    assert pe.enc(-math.nan, pa.float64()) == pe.enc(math.nan, pa.float64())
    s = PartitionSpec(1, (PartitionField(1, T("identity"), "f", 1000),))
    [nan] = part.decode_values(s, [pa.float64()], part.encode_values(s, [pa.float64()], [math.nan]))
    assert math.isnan(nan)


def test_strings_and_prefixes() -> None:
    ks = sorted(["ab", "a", "", "b", "a\x00", "é"], key=lambda v: pe.enc(v, pa.string()) + "/")
    assert ks == ["", "a", "a\x00", "ab", "b", "é"]


def test_file_ids_and_prefixes() -> None:
    s = spec("country", "day(ts)")
    types = [pa.string(), pa.int32()]
    fid = part.file_id(s, types, ["NL", 19723], "0001-abc.parquet")
    assert fid == "p0001/14e4c/18000000000004d0b/0001-abc.parquet"
    assert fid.startswith(part.key_prefix(s, types, ["NL"]))
    assert part.key_prefix(s, types, []) == "p0001/"
    assert part.file_id(s, types, [None, None], "f") == "p0001/0/0/f"
    assert part.parse_file_id(fid) == 1 and part.parse_file_id("p00ff/0/f") == 255
    assert part.parse_file_id("0001-abc.parquet") is None and part.parse_file_id("_p0001/x") is None
    assert part.values_dict(s, ["NL", 3]) == {"country": "NL", "ts_day": 3}


BAD_VALUES = [  # (callable, message fragment)
    (lambda: part.file_id(spec("country"), [pa.string()], ["NL"], "a/b"), "basename 'a/b'"),
    (lambda: part.file_id(spec("country"), [pa.string()], [], "f"), "needs 1 values, got 0"),
    (
        lambda: part.encode_values(spec("country"), [pa.string()], [3]),
        "field 'country': 3 is not a string",
    ),
    (
        lambda: part.encode_values(spec("amount"), [D2], [Decimal("1.005")]),
        "more than 2 decimal places",
    ),
    (lambda: part.decode_values(spec("amount"), [D2], ["x"]), "malformed partition value 'x'"),
    (lambda: part.decode_values(spec("day(ts)"), [pa.int32()], ["3"]), "field 'ts_day': malformed"),
    (lambda: part.decode_values(spec("d"), [pa.date32()], [5]), "malformed partition value 5"),
    (
        lambda: part.decode_values(
            spec("ts"), [pa.timestamp("us", "UTC")], ["2024-01-01T00:00:00"]
        ),
        "malformed",
    ),
    (lambda: part.decode_values(spec("country"), [pa.string()], "NL"), "are not a list"),
    (lambda: part.decode_values(spec("country"), [pa.string()], []), "needs 1 values, got 0"),
]


@pytest.mark.parametrize(("call", "fragment"), BAD_VALUES)
def test_bad_values_are_value_errors_naming_the_problem(call: Any, fragment: str) -> None:
    with pytest.raises(ValueError) as e:
        call()
    assert fragment in str(e.value)


def test_record_values_read_like_iceberg_json() -> None:
    s = spec("ts", "amount", "d", "sku", "customer_id")
    types = [TYPES[2], D2, pa.date32(), pa.string(), pa.int64()]
    values = [
        dt.datetime(2017, 11, 16, 22, 31, 8, 1, tzinfo=UTC),
        Decimal("14.20"),
        dt.date(2017, 11, 16),
        "x",
        -3,
    ]
    raw = part.encode_values(s, types, values)
    assert raw == ["2017-11-16T22:31:08.000001+00:00", "14.20", "2017-11-16", "x", -3]
    assert part.decode_values(s, types, raw) == tuple(values)


# -- pruning: may_match cell by cell -------------------------------------------------------------
D = dt.date(2024, 1, 2)
DAY = (D - dt.date(1970, 1, 1)).days  # 19724
MIDNIGHT = dt.datetime(2024, 1, 2, tzinfo=UTC)

# (partition field, term, partition value, may match)
MAY_MATCH = [
    ("country", Term("country", "=", ("NL",)), "NL", True),
    ("country", Term("country", "=", ("NL",)), "DE", False),
    ("country", Term("country", "=", ("NL",)), None, False),
    ("country", Term("country", "in", ("NL", "DE")), "DE", True),
    ("country", Term("country", "in", ("NL", "DE")), "FR", False),
    ("country", Term("country", "<", ("DE",)), "DE", False),
    ("country", Term("country", "<=", ("DE",)), "DE", True),
    ("country", Term("country", "<", ("DE",)), "D", True),
    ("country", Term("country", ">", ("D",)), "DE", True),
    ("country", Term("country", ">=", ("DF",)), "DE", False),
    ("country", Term("country", "is_null"), None, True),
    ("country", Term("country", "is_null"), "NL", False),
    ("country", Term("country", "not_null"), None, False),
    ("country", Term("country", "not_null"), "NL", True),
    ("country", Term("sku", "=", ("x",)), "NL", True),  # another column
    ("country", Term("country", "=", (3,)), "NL", True),  # not understood
    ("day(ts)", Term("ts", "<", (MIDNIGHT,)), DAY, True),  # boundary day kept
    ("day(ts)", Term("ts", "<", (MIDNIGHT,)), DAY + 1, False),
    ("day(ts)", Term("ts", "<", (MIDNIGHT,)), DAY - 1, True),
    ("day(ts)", Term("ts", ">=", (MIDNIGHT,)), DAY - 1, False),
    ("day(ts)", Term("ts", ">", (MIDNIGHT - dt.timedelta(microseconds=1),)), DAY - 1, True),
    ("day(ts)", Term("ts", "=", (MIDNIGHT + dt.timedelta(hours=23),)), DAY, True),
    ("day(ts)", Term("ts", "=", (MIDNIGHT + dt.timedelta(hours=24),)), DAY, False),
    (
        "day(ts)",
        Term("ts", "=", (dt.datetime(2024, 1, 2, 23, tzinfo=dt.timezone(dt.timedelta(hours=-2))),)),
        DAY,
        False,
    ),
    ("day(ts)", Term("ts", "is_null"), DAY, False),
    ("day(ts)", Term("ts", "is_null"), None, True),
    ("day(d)", Term("d", "<=", (D,)), DAY, True),
    ("day(d)", Term("d", ">", (D,)), DAY, True),  # inclusive projection: not strict
    ("day(d)", Term("d", ">", (D,)), DAY - 1, False),
    ("year(ts)", Term("ts", "<", (dt.datetime(2024, 1, 1, tzinfo=UTC),)), 54, True),
    ("year(ts)", Term("ts", "<", (dt.datetime(2024, 1, 1, tzinfo=UTC),)), 55, False),
    ("month(d)", Term("d", ">=", (dt.date(2024, 2, 1),)), 648, False),
    ("month(d)", Term("d", ">=", (dt.date(2024, 2, 1),)), 649, True),
    (
        "hour(ts)",
        Term("ts", "in", (MIDNIGHT, MIDNIGHT + dt.timedelta(hours=5))),
        DAY * 24 + 5,
        True,
    ),
    (
        "hour(ts)",
        Term("ts", "in", (MIDNIGHT, MIDNIGHT + dt.timedelta(hours=5))),
        DAY * 24 + 4,
        False,
    ),
    (
        "bucket(16, customer_id)",
        Term("customer_id", "=", (34,)),
        34 and part.bucket_hash(34, pa.int64()) % 16,
        True,
    ),
    (
        "bucket(16, customer_id)",
        Term("customer_id", "=", (34,)),
        (part.bucket_hash(34, pa.int64()) + 1) % 16,
        False,
    ),
    (
        "bucket(16, customer_id)",
        Term("customer_id", "<", (34,)),
        0,
        True,
    ),  # ranges do not prune buckets
    ("bucket(16, customer_id)", Term("customer_id", "<", (34,)), None, False),
    ("bucket(16, customer_id)", Term("customer_id", "not_null"), None, False),
    ("truncate(2, sku)", Term("sku", "=", ("abc",)), "ab", True),
    ("truncate(2, sku)", Term("sku", "=", ("abc",)), "ac", False),
    ("truncate(2, sku)", Term("sku", "<", ("abc",)), "ab", True),
    ("truncate(2, sku)", Term("sku", "<", ("abc",)), "a", True),
    ("truncate(2, sku)", Term("sku", "<", ("abc",)), "ac", False),
    ("truncate(2, sku)", Term("sku", ">", ("abc",)), "ab", True),
    ("truncate(2, sku)", Term("sku", ">", ("abc",)), "aa", False),
    ("truncate(2, sku)", Term("sku", ">=", ("b",)), "a", False),
    ("truncate(100, amount)", Term("amount", ">", (Decimal("3.5"),)), Decimal("3.00"), True),
    ("truncate(100, amount)", Term("amount", ">", (Decimal("3.5"),)), Decimal("2.00"), False),
    (
        "truncate(100, amount)",
        Term("amount", ">", (Decimal("3.505"),)),
        Decimal("2.00"),
        True,
    ),  # inexact: no prune
    ("truncate(10, customer_id)", Term("customer_id", "<", (-10,)), -10, True),
    ("truncate(10, customer_id)", Term("customer_id", "<", (-10,)), 0, False),
    (
        "customer_id",
        Term("customer_id", "<", (2.5,)),
        7,
        True,
    ),  # float term on an int column: no prune
]


@pytest.mark.parametrize(("item", "term", "value", "expected"), MAY_MATCH)
def test_may_match(item: str, term: Term, value: Any, expected: bool) -> None:
    assert part.may_match(spec(item), TYPES, NAMES, [value], [term]) is expected


def test_may_match_is_a_conjunction_over_fields() -> None:
    s = spec("country", "day(ts)")
    terms = [Term("country", "=", ("NL",)), Term("ts", ">=", (MIDNIGHT,))]
    assert part.may_match(s, TYPES, NAMES, ["NL", DAY], terms)
    assert not part.may_match(s, TYPES, NAMES, ["NL", DAY - 1], terms)
    assert not part.may_match(s, TYPES, NAMES, ["DE", DAY], terms)
    assert not part.may_match(s, TYPES, NAMES, ["NL", DAY], [*terms, Term("country", "=", ("DE",))])
    # a column dropped since, or renamed: nothing known, nothing pruned
    assert part.may_match(s, {}, {}, ["DE", 0], terms)


def test_float_zeros_match_each_other() -> None:
    s = part.parse_spec(["f"], [(1, "f")], pa.schema([("f", pa.float64())]), 1)
    types, names = {1: pa.float64()}, {1: "f"}
    cases: list[tuple[Any, float]] = [("=", 0.0), ("=", -0.0), (">=", 0.0), ("<=", -0.0)]
    for op, v in [*cases, ("in", 0.0)]:
        for pv in (0.0, -0.0):
            assert part.may_match(s, types, names, [pv], [Term("f", op, (v,))]), (op, v, pv)
            ranges = part.key_ranges(s, types, names, [Term("f", op, (v,))])
            fid = part.file_id(s, [pa.float64()], [pv], "x")
            assert ranges is not None and any(a <= fid < b for a, b in ranges), (op, v, pv)
    assert not part.may_match(s, types, names, [math.nan], [Term("f", "<", (1.0,))])
    assert part.may_match(s, types, names, [1.0], [Term("f", "<", (math.nan,))])


# -- key_ranges -------------------------------------------------------------------------------
def _covered(ranges: list[tuple[str, str]] | None, fid: str) -> bool:
    return ranges is None or any(a <= fid < b for a, b in ranges)


def test_key_ranges_shapes() -> None:
    s = spec("country", "day(ts)")
    k = pe.enc
    p = "p0001/"
    assert part.key_ranges(s, TYPES, NAMES, []) is None
    assert part.key_ranges(s, TYPES, NAMES, [Term("sku", "=", ("x",))]) is None
    assert (
        part.key_ranges(s, TYPES, NAMES, [Term("ts", ">", (MIDNIGHT,))]) is None
    )  # not a leading field
    nl, de = k("NL", pa.string()), k("DE", pa.string())
    assert part.key_ranges(s, TYPES, NAMES, [Term("country", "in", ("NL", "DE"))]) == [
        (f"{p}{de}/", f"{p}{de}0"),
        (f"{p}{nl}/", f"{p}{nl}0"),
    ]
    day = k(DAY, pa.int32())
    assert part.key_ranges(
        s, TYPES, NAMES, [Term("country", "=", ("NL",)), Term("ts", "<", (MIDNIGHT,))]
    ) == [(f"{p}{nl}/1", f"{p}{nl}/{day}0")]
    assert part.key_ranges(s, TYPES, NAMES, [Term("country", "is_null")]) == [(f"{p}0/", f"{p}00")]
    assert part.key_ranges(s, TYPES, NAMES, [Term("country", ">", ("NL",))]) == [
        (f"{p}{nl}0", f"{p}2")
    ]
    assert (
        part.key_ranges(
            s, TYPES, NAMES, [Term("country", "=", ("NL",)), Term("country", "=", ("DE",))]
        )
        == []
    )
    assert (
        part.key_ranges(
            s, TYPES, NAMES, [Term("country", ">", ("NL",)), Term("country", "<", ("DE",))]
        )
        == []
    )
    # more prefixes than the limit: the in-list becomes one range from its least to its greatest
    wide = part.key_ranges(s, TYPES, NAMES, [Term("country", "in", ("NL", "DE", "FR"))], limit=2)
    assert wide == [(f"{p}{de}", f"{p}{nl}0")]


def test_key_ranges_of_bucket_and_truncate() -> None:
    s = spec("bucket(4, customer_id)", "truncate(2, sku)")
    b = part.bucket_hash(34, pa.int64()) % 4 & 0x7FFFFFFF
    ranges = part.key_ranges(
        s, TYPES, NAMES, [Term("customer_id", "=", (34,)), Term("sku", ">=", ("abc",))]
    )
    types = [pa.int32(), pa.string()]
    assert ranges is not None and len(ranges) == 1
    inside = [part.file_id(s, types, [b, v], "f") for v in ("ab", "ac", "b", "日本")]
    outside = [part.file_id(s, types, [b, v], "f") for v in ("aa", "a", "", None)]
    outside += [part.file_id(s, types, [(b + 1) % 4, "ab"], "f")]
    assert all(_covered(ranges, f) for f in inside)
    assert not any(_covered(ranges, f) for f in outside)
    assert part.key_ranges(s, TYPES, NAMES, [Term("customer_id", ">", (34,))]) == [
        ("p0001/1", "p0001/2")
    ]


# -- soundness: no partition holding a matching row is ever pruned ------------------------------
POOL: dict[str, list[Any]] = {
    "country": ["NL", "N", "NLD", "", "DE", None],
    "ts": [
        None,
        MIDNIGHT,
        MIDNIGHT - dt.timedelta(microseconds=1),
        MIDNIGHT + dt.timedelta(hours=30),
        dt.datetime(1969, 12, 31, 23, tzinfo=UTC),
    ],
    "customer_id": [None, -11, -10, -1, 0, 9, 10, 34],
    "sku": [None, "a", "ab", "abc", "b", "日本語"],
    "d": [None, D, D - dt.timedelta(days=1), dt.date(2024, 2, 1), dt.date(1969, 12, 31)],
    "amount": [None, Decimal("-0.01"), Decimal("0.00"), Decimal("3.50"), Decimal("1.00")],
}
FIELD_ITEMS = [
    "country",
    "truncate(2, country)",
    "day(ts)",
    "hour(ts)",
    "year(ts)",
    "month(d)",
    "d",
]
FIELD_ITEMS += [
    "bucket(3, customer_id)",
    "truncate(10, customer_id)",
    "customer_id",
    "truncate(2, sku)",
]
FIELD_ITEMS += ["truncate(100, amount)", "bucket(5, sku)", "day(d)"]


def _holds(term: Term, v: Any) -> bool:
    if term.op == "is_null":
        return v is None
    if term.op == "not_null":
        return v is not None
    if v is None:
        return False
    if term.op == "in":
        return v in term.values
    ops = {"=": v.__eq__, "<": v.__lt__, "<=": v.__le__, ">": v.__gt__, ">=": v.__ge__}
    return bool(ops[term.op](term.values[0]))


RANGE_OPS: list[Op] = ["=", "<", "<=", ">", ">="]
terms_st = st.sampled_from(sorted(POOL)).flatmap(
    lambda c: st.one_of(
        st.tuples(
            st.sampled_from(RANGE_OPS),
            st.sampled_from([v for v in POOL[c] if v is not None]),
        ).map(lambda ov: Term(c, ov[0], (ov[1],))),
        st.lists(
            st.sampled_from([v for v in POOL[c] if v is not None]), min_size=1, max_size=3
        ).map(lambda vs: Term(c, "in", tuple(vs))),
        st.sampled_from([Term(c, "is_null"), Term(c, "not_null")]),
    )
)


@settings(max_examples=300, deadline=None)
@given(
    items=st.lists(st.sampled_from(FIELD_ITEMS), min_size=1, max_size=3, unique=True),
    terms=st.lists(terms_st, min_size=1, max_size=3),
    limit=st.sampled_from([1, 2, 4096]),
)
def test_pruning_never_drops_a_matching_row(
    items: list[str], terms: list[Term], limit: int
) -> None:
    try:
        s = spec(*items)
    except ValueError:
        assume(False)
        raise
    rows = [
        {
            c: POOL[c][(i * 7 + j * 3 + i // (j + 2)) % len(POOL[c])]
            for j, c in enumerate(sorted(POOL))
        }
        for i in range(120)
    ]
    types = [f.transform.result_type(TYPES[f.source_id]) for f in s.fields]
    ranges = part.key_ranges(s, TYPES, NAMES, terms, limit=limit)
    if ranges is not None:
        assert ranges == sorted(ranges) and all(a < b for a, b in ranges)
        assert all(b1 <= a2 for (_, b1), (a2, _) in zip(ranges, ranges[1:]))
    for row in rows:
        values = [
            f.transform.apply_py(row[NAMES[f.source_id]], TYPES[f.source_id]) for f in s.fields
        ]
        may = part.may_match(s, TYPES, NAMES, values, terms)
        covered = _covered(ranges, part.file_id(s, types, values, "f"))
        if all(_holds(t, row[t.column]) for t in terms):
            assert may and covered, (row, values)
