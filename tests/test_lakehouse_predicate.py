"""lakehouse.data.predicate: SQL text and pc.Expressions to row filters and update values.

Most tests are rows of a table: a SQL ``where`` and the ``id`` of the rows of
the small fixed table ``ORDERS`` it must select (``matches``: null counts as
not matching). Errors are checked by message, since the message is the
interface a user sees.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakehouse.data.predicate import Predicate, evaluate, matches, parse_value, parse_where

UTC = dt.UTC

# id  status    total   qty   ts (UTC)             day         f      my col  flag   city
#  1  open       50.00    1   2024-01-01 00:00     2024-01-01   1.5      10    true   Amsterdam
#  2  closed    150.25    2   2024-01-02 00:00     null         null     20    false  amsterdam
#  3  open      200.00    3   null                 2024-02-01  -2.0      30    null   Berlin
#  4  null        null    4   2024-01-03 12:00     2024-03-01   3.25     40    true   null
#  5  Shipped   100.00 null   2023-12-31 00:00     2023-01-01   0.0    null    false  100%_sure
ORDERS = pa.table(
    {
        "id": pa.array([1, 2, 3, 4, 5], pa.int32()),
        "status": ["open", "closed", "open", None, "Shipped"],
        "total": pa.array(
            [Decimal("50.00"), Decimal("150.25"), Decimal("200.00"), None, Decimal("100.00")],
            pa.decimal128(10, 2),
        ),
        "qty": pa.array([1, 2, 3, 4, None], pa.int64()),
        "ts": pa.array(
            [
                dt.datetime(2024, 1, 1, tzinfo=UTC),
                dt.datetime(2024, 1, 2, tzinfo=UTC),
                None,
                dt.datetime(2024, 1, 3, 12, tzinfo=UTC),
                dt.datetime(2023, 12, 31, tzinfo=UTC),
            ],
            pa.timestamp("us", tz="UTC"),
        ),
        "day": pa.array(
            [
                dt.date(2024, 1, 1),
                None,
                dt.date(2024, 2, 1),
                dt.date(2024, 3, 1),
                dt.date(2023, 1, 1),
            ]
        ),
        "f": pa.array([1.5, None, -2.0, 3.25, 0.0]),
        "my col": [10, 20, 30, 40, None],
        "flag": [True, False, None, True, False],
        "city": ["Amsterdam", "amsterdam", "Berlin", None, "100%_sure"],
    }
)
SCHEMA = ORDERS.schema
COLUMNS = "id, status, total, qty, ts, day, f, my col, flag, city"


def selected(where: str | pc.Expression, table: pa.Table = ORDERS) -> list[int]:
    mask = matches(table, parse_where(where, table.schema))
    assert mask.type == pa.bool_() and mask.null_count == 0 and len(mask) == table.num_rows
    return [i for i, keep in zip(table.column("id").to_pylist(), mask.to_pylist()) if keep]


CASES = [
    # comparisons; literals typed by the column they meet
    ("status = 'open'", [1, 3]),
    ("'open' = status", [1, 3]),
    ("status != 'open'", [2, 5]),
    ("status <> 'open'", [2, 5]),
    ("id < 3", [1, 2]),
    ("id <= 3", [1, 2, 3]),
    ("id > 3", [4, 5]),
    ("id >= 3", [3, 4, 5]),
    ("id == 3", [3]),
    ("total > 100", [2, 3]),  # int vs decimal128(10, 2)
    ("total = 150.25", [2]),  # exact decimal, not a float
    ("total = 150.250", [2]),
    ("total = 150.251", []),
    ("total IN (50, 200)", [1, 3]),
    ("f > 1", [1, 4]),  # int vs double
    ("f = 1.5e0", [1]),
    ("f < -1.5", [3]),
    ("id = '3'", [3]),  # a string literal read as the int column's type
    ("id < 2 + 1", [1, 2]),
    # boolean logic, precedence, parentheses
    ("status = 'open' AND total > 100", [3]),
    ("status = 'open' OR id = 2 AND f < 0", [1, 3]),  # AND binds tighter
    ("(status = 'open' OR id = 2) AND f < 0", [3]),
    ("NOT status = 'open'", [2, 5]),
    ("NOT (id > 1 AND id < 5)", [1, 5]),
    ("flag", [1, 4]),
    ("NOT flag", [2, 5]),
    ("flag AND id > 1", [4]),
    ("TRUE", [1, 2, 3, 4, 5]),
    ("FALSE", []),
    ("1 = 1", [1, 2, 3, 4, 5]),
    # SQL NULL: comparisons with null are null; null never matches
    ("status = NULL", []),
    ("NOT status = NULL", []),
    ("NULL", []),
    ("NOT NULL", []),
    ("NULL = NULL", []),
    ("id > 1 OR NULL", [2, 3, 4, 5]),  # TRUE OR NULL is true
    ("id > 100 AND NULL", []),
    ("NOT (flag AND NULL)", [2, 5]),  # FALSE AND NULL is false
    ("qty + 1 > 1", [1, 2, 3, 4]),  # null + 1 is null
    # IS [NOT] NULL / TRUE / FALSE
    ("status IS NULL", [4]),
    ("status IS NOT NULL", [1, 2, 3, 5]),
    ("flag IS TRUE", [1, 4]),
    ("flag IS NOT TRUE", [2, 3, 5]),
    ("flag IS FALSE", [2, 5]),
    ("flag IS NOT FALSE", [1, 3, 4]),
    ("NOT status IS NULL", [1, 2, 3, 5]),
    # [NOT] IN
    ("id IN (1, 3, 7)", [1, 3]),
    ("id NOT IN (1, 3, 7)", [2, 4, 5]),
    ("id IN (1.0, 3)", [1, 3]),
    ("id IN (1.5, 3)", [3]),  # 1.5 does not fit int32: compared one by one
    ("id IN (1, NULL)", [1]),
    ("id NOT IN (1, NULL)", []),  # SQL: x NOT IN (.., NULL) is never true
    ("qty IN (1, 4)", [1, 4]),
    ("qty NOT IN (1, 4)", [2, 3]),  # null qty: null
    ("status IN ('open', 'Shipped')", [1, 3, 5]),
    ("id IN (qty, 9)", [1, 2, 3, 4]),  # non-literal items
    ("ts IN ('2024-01-01 00:00:00', '2024-01-02T00:00:00+00:00')", [1, 2]),
    # [NOT] BETWEEN
    ("total BETWEEN 100 AND 200", [2, 3, 5]),
    ("id NOT BETWEEN 2 AND 4", [1, 5]),
    ("day BETWEEN '2024-01-01' AND '2024-02-01'", [1, 3]),
    ("qty BETWEEN 2 AND id", [2, 3, 4]),
    # [NOT] LIKE, ILIKE, ESCAPE
    ("status LIKE 'o%'", [1, 3]),
    ("status LIKE '_pen'", [1, 3]),
    ("status NOT LIKE 'o%'", [2, 5]),
    ("status LIKE 's%'", []),
    ("status ILIKE 's%'", [5]),
    ("city LIKE '100!%!_%' ESCAPE '!'", [5]),
    ("city LIKE '100\\%\\_sure'", [5]),
    ("city LIKE '100%sure'", [5]),
    # arithmetic: + - * / % and unary minus
    ("qty + id = 4", [2]),
    ("qty - 1 = 0", [1]),
    ("qty * 2 = 6", [3]),
    ("id / 2 = 1", [2, 3]),  # integer division truncates
    ("f / 2 = 0.75", [1]),
    ("total * 2 = 300.5", [2]),
    ("total / 2 > 50", [2, 3]),
    ("id % 2 = 1", [1, 3, 5]),
    ("-id % 2 = -1", [1, 3, 5]),  # the remainder has the dividend's sign
    ("f % 2 = 1.5", [1]),
    ("total % 100 = 50.25", [2]),
    ("-id < -3", [4, 5]),
    ("- -id = 2", [2]),
    ("-f = 2", [3]),
    ("id = -(-3)", [3]),
    ("status || '!' = 'open!'", [1, 3]),
    # dates and timestamps: string literals read as the column's type
    ("day = '2024-02-01'", [3]),
    ("day > DATE '2024-01-15'", [3, 4]),
    ("day < '2024-01-01'", [5]),
    ("ts >= '2024-01-02 00:00:00'", [2, 4]),  # in the column's zone (UTC)
    ("ts >= '2024-01-02'", [2, 4]),
    ("ts > '2024-01-03T11:59:59.999999'", [4]),
    ("ts = '2024-01-03 13:00:00+01:00'", [4]),  # an instant with an offset
    ("ts < TIMESTAMP '2024-01-02 00:00:00'", [1, 5]),
    ("ts > CAST('2024-01-02 00:00:00' AS TIMESTAMP)", [4]),
    # CAST
    ("CAST(id AS VARCHAR) = '3'", [3]),
    ("CAST(id AS STRING) = '3'", [3]),
    ("CAST(total AS INT) = 150", [2]),  # a fraction is truncated, as SQL does
    ("CAST(total AS BIGINT) = 150", [2]),
    ("CAST(f AS DECIMAL(5, 1)) = 3.2", [4]),
    ("CAST(total AS DOUBLE) = 150.25", [2]),
    ("CAST(total AS FLOAT) > 150", [2, 3]),
    ("CAST(id AS SMALLINT) = 2", [2]),
    ("CAST('12' AS INT) = 12", [1, 2, 3, 4, 5]),
    ("CAST('2024-02-01' AS DATE) = day", [3]),
    ("CAST(ts AS DATE) = '2024-01-03'", [4]),
    ("CAST(flag AS INT) = 1", [1, 4]),
    ("CAST(id AS BOOLEAN) AND id < 3", [1, 2]),
    ("id::text = '4'", [4]),
    # quoted and case-folded names
    ('"my col" >= 20', [2, 3, 4]),
    ("`my col` < 30", [1, 2]),
    ('"id" = 1', [1]),
    ("ID = 1", [1]),  # unquoted names fold case when no column has the exact name
    ("Status = 'open'", [1, 3]),
    # functions
    ("lower(city) = 'amsterdam'", [1, 2]),
    ("upper(status) = 'OPEN'", [1, 3]),
    ("length(status) = 4", [1, 3]),
    ("LENGTH(city) > 8", [1, 2, 5]),
    ("abs(f) = 2", [3]),
    ("abs(-id) = 5", [5]),
    ("coalesce(status, 'none') = 'none'", [4]),
    ("coalesce(qty, id * 10) = 50", [5]),
    ("trim(' ' || status || ' ') = 'open'", [1, 3]),
    ("round(f) = 2", [1]),  # half away from zero, as SQL rounds
    ("round(f, 1) = 3.3", [4]),
]


@pytest.mark.parametrize(("sql", "ids"), CASES, ids=[c[0] for c in CASES])
def test_where(sql: str, ids: list[int]) -> None:
    assert selected(sql) == ids


def test_where_records_text_and_columns() -> None:
    pred = parse_where("status = 'open' AND \"my col\" > id", SCHEMA)
    assert isinstance(pred, Predicate)
    assert pred.text == "status = 'open' AND \"my col\" > id"
    assert pred.columns == frozenset({"status", "my col", "id"})
    assert parse_where("TRUE", SCHEMA).columns == frozenset()
    assert parse_where("ID = 1", SCHEMA).columns == frozenset({"id"})


def test_timestamps_of_other_zones_and_units() -> None:
    table = pa.table(
        {
            "id": [1, 2],
            "ams": pa.array(
                [dt.datetime(2024, 1, 1, 23, tzinfo=UTC), dt.datetime(2024, 1, 2, tzinfo=UTC)],
                pa.timestamp("us", tz="Europe/Amsterdam"),
            ),
            "ns": pa.array(
                [1_704_067_200_000_000_001, 1_704_067_200_000_000_000], pa.timestamp("ns")
            ),
            "sec": pa.array(
                [dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 1, 0, 0, 1)], pa.timestamp("s")
            ),
            "naive": pa.array([dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2)]),
            "d64": pa.array([dt.date(2024, 1, 1), dt.date(2024, 1, 2)], pa.date64()),
            "t": pa.array([dt.time(1, 2, 3), dt.time(4, 5, 6)]),
            "ls": pa.array(["a", "b"], pa.large_string()),
            "bin": pa.array([b"a", b"b"]),
            "u": pa.array([1, 2**63], pa.uint64()),
            "f32": pa.array([1.5, 0.1], pa.float32()),
        }
    )
    cases = [
        ("ams = '2024-01-02 00:00:00'", [1]),  # local time in Amsterdam (UTC+1)
        ("ams = '2024-01-01 23:00:00Z'", [1]),
        ("ams = TIMESTAMP '2024-01-02 01:00:00'", [2]),
        ("ns = '2024-01-01 00:00:00.000000001'", [1]),
        ("ns > '2024-01-01'", [1]),
        ("sec > '2024-01-01 00:00:00.5'", [2]),  # not truncated to the column's unit
        ("naive = '2024-01-02'", [2]),
        ("naive < TIMESTAMP '2024-01-01 12:00'", [1]),
        ("CAST(sec AS TIMESTAMP) = naive", [1]),
        ("d64 = '2024-01-02'", [2]),
        ("t > '02:00:00'", [2]),
        ("ls = 'b'", [2]),
        ("ls IN ('a', 'x')", [1]),
        ("ls || 'y' = 'ay'", [1]),
        ("bin = 'a'", [1]),
        ("u = 9223372036854775808", [2]),
        ("f32 = 1.5", [1]),
        ("f32 * 2 = 3", [1]),
    ]
    for sql, ids in cases:
        assert selected(sql, table) == ids, sql


ERRORS = [
    # bad SQL: the text quoted, what is wrong said
    ("status = ", r"invalid SQL 'status = ': Required keyword: 'expression' missing for EQ"),
    ("status = 'open", 'invalid SQL "status = \'open": Error tokenizing'),
    ("status = 'open' AND", "invalid SQL .*missing for And"),
    ("(id = 1", r"invalid SQL '\(id = 1': Expecting \)"),
    ("id = 1)", "invalid SQL 'id = 1\\)': Invalid expression / Unexpected token"),
    ("", "empty SQL expression"),
    ("   ", "empty SQL expression"),
    ("id = 1; id = 2", "expected one expression, not statements"),
    ("(" * 3000 + "TRUE" + ")" * 3000, "nested too deeply"),
    # unknown columns, naming the column and listing the table's
    ("nope = 1", f"unknown column 'nope' in 'nope = 1'; the table's columns are: {COLUMNS}"),
    ('"ID" = 1', "unknown column 'ID'"),  # quoted: exact
    ("status = 'a' OR x > 1", "unknown column 'x'"),
    ("t.status = 'open'", "unsupported column reference 't.status'"),
    # not boolean
    ("total + 1", r"where 'total \+ 1' is not a boolean expression \(its type is decimal128"),
    ("status", r"is not a boolean expression \(its type is string\)"),
    ("NOT id", r"'id' is not a boolean \(int32\)"),
    ("id AND flag", r"'id' is not a boolean \(int32\)"),
    # types that do not meet
    (
        "status > 5",
        "cannot evaluate 'status > 5' in 'status > 5': Function 'greater' has no kernel",
    ),
    ("day = '2024-13-01'", r"'2024-13-01' is not a date \(YYYY-MM-DD\)"),
    ("day = '2024-01-01 10:00'", "is not a date"),
    ("ts > 'yesterday'", "'yesterday' is not a timestamp"),
    ("id = 'abc'", "'abc' is not a valid int32"),
    ("total = 'abc'", "'abc' is not a decimal number"),
    (
        "id = 99999999999999999999999",
        "integer literal 99999999999999999999999 is out of the 64-bit range",
    ),
    ("CAST('x' AS INT) = 1", "'x' is not a valid int32 in \"CAST"),
    ("CAST(1.5 AS DATE) IS NULL", "cannot evaluate 'CAST\\(1.5 AS DATE\\)'"),
    ("lower(id) = 'a'", "cannot evaluate 'LOWER\\(id\\)'.*utf8_lower"),
    # unsupported constructs, named
    ("id IN (SELECT 1)", "unsupported IN"),
    ("id IN ()", "unsupported IN"),
    ("foo(id) = 1", r"unsupported function foo\(\) 'FOO\(id\)'"),
    ("date(ts) = '2024-01-01'", r"unsupported function date\(\)"),
    ("CASE WHEN id = 1 THEN TRUE END", "unsupported SQL construct Case"),
    ("id AS x", "unsupported SQL construct Alias"),
    ("id x", "unsupported SQL construct Alias"),
    ("*", "unsupported SQL construct Star"),
    ("id = ?", "unsupported SQL construct Placeholder"),
    ("status LIKE city", "unsupported LIKE pattern"),
    ("status LIKE 'a' ESCAPE '!!'", "unsupported ESCAPE"),
    ("CAST(id AS ARRAY<INT>) IS NULL", "unsupported CAST type ARRAY<INT>"),
    ("TRY_CAST(id AS INT) = 1", "unsupported TRY_CAST"),
    ("id BETWEEN SYMMETRIC 1 AND 2", "unsupported BETWEEN SYMMETRIC"),
    ("round(f, id) = 1", "unsupported ROUND digits"),
]


@pytest.mark.parametrize(("sql", "message"), ERRORS, ids=[e[0][:40] for e in ERRORS])
def test_where_errors(sql: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_where(sql, SCHEMA)


def test_error_messages_shorten_long_text() -> None:
    text = "nope = 1 AND " + " AND ".join(["id > 0"] * 200)
    with pytest.raises(ValueError, match="unknown column 'nope'") as info:
        parse_where(text, SCHEMA)
    assert len(str(info.value)) < 300 and "..." in str(info.value)


def test_case_folding_needs_a_unique_match() -> None:
    schema = pa.schema([("Name", pa.string()), ("NAME", pa.string()), ("Age", pa.int8())])
    assert parse_where("age > 1", schema).columns == frozenset({"Age"})
    assert parse_where("Name = NAME", schema).columns == frozenset({"Name", "NAME"})
    with pytest.raises(ValueError, match=r"unknown column 'name'.*columns are: Name, NAME, Age"):
        parse_where("name = 'x'", schema)


@pytest.mark.parametrize("where", [5, None, b"id = 1", ["id = 1"], True])
def test_where_of_the_wrong_type(where: Any) -> None:
    with pytest.raises(
        TypeError, match=r"where must be a SQL string or a pyarrow\.compute\.Expression"
    ):
        parse_where(where, SCHEMA)


def test_long_chains_do_not_recurse() -> None:
    text = " OR ".join(f"id = {i}" for i in range(2, 2000))
    assert selected(text) == [2, 3, 4, 5]


def test_division_by_zero_raises_when_evaluated() -> None:
    pred = parse_where("id / 0 = 1", SCHEMA)
    with pytest.raises(ValueError, match="divide by zero"):
        matches(ORDERS, pred)


# ---------------------------------------------------------------------------
# pc.Expression input
# ---------------------------------------------------------------------------


def test_expression_input() -> None:
    expr = (pc.field("id") > 2) & (pc.field("status") == "open")
    pred = parse_where(expr, SCHEMA)
    assert pred.expression.equals(expr)
    assert pred.columns is None
    assert pred.text == str(expr)
    assert selected(expr) == [3]
    assert selected(pc.field("flag")) == [1, 4]
    assert selected(pc.scalar(True)) == [1, 2, 3, 4, 5]
    assert selected(pc.field("status").isin(["open", "closed"])) == [1, 2, 3]


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        (
            pc.field("nope") == 1,
            "where \\(nope == 1\\) refers to unknown column 'nope';"
            f" the table's columns are: {COLUMNS}",
        ),
        (pc.field("id") + 1, r"is not a boolean expression \(its type is int32\)"),
        (pc.field("status"), r"is not a boolean expression \(its type is string\)"),
        (pc.field("status") == 5, "invalid where .*no kernel matching input types"),
    ],
)
def test_expression_input_errors(expr: pc.Expression, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_where(expr, SCHEMA)


# ---------------------------------------------------------------------------
# evaluate and matches
# ---------------------------------------------------------------------------


def test_evaluate_keeps_row_order_across_chunks() -> None:
    n = 50_000
    values = pa.chunked_array([pa.array(range(i, i + 1000)) for i in range(0, n, 1000)])
    table = pa.table({"x": values})
    got = evaluate(table, pc.field("x") * 2)
    assert got.to_pylist() == [2 * i for i in range(n)]
    assert matches(table, parse_where("x % 7 = 0", table.schema)).to_pylist() == [
        i % 7 == 0 for i in range(n)
    ]


def test_evaluate_and_matches_on_empty_tables_and_batches() -> None:
    empty = SCHEMA.empty_table()
    assert len(matches(empty, parse_where("id > 1", SCHEMA))) == 0
    assert evaluate(empty, pc.field("id") + 1).type == pa.int32()
    batch = ORDERS.to_batches()[0]
    assert matches(batch, parse_where("id > 3", SCHEMA)).to_pylist() == [False] * 3 + [True] * 2
    assert evaluate(ORDERS, pc.scalar(7)).to_pylist() == [7] * 5
    mask = matches(ORDERS, parse_where("NULL", SCHEMA))
    assert mask.type == pa.bool_() and mask.to_pylist() == [False] * 5


# ---------------------------------------------------------------------------
# parse_value: update values
# ---------------------------------------------------------------------------


def value(v: Any, column: str | pa.Field, *, nullable: bool = True) -> tuple[list[Any], set[str]]:
    field = column if isinstance(column, pa.Field) else SCHEMA.field(column).with_nullable(nullable)
    expr, columns = parse_value(v, SCHEMA, field)
    result = evaluate(ORDERS, expr)
    assert result.type == field.type
    return result.to_pylist(), set(columns)


def same(x: Any) -> list[Any]:
    return [x] * 5


VALUES = [
    ("'shipped'", "status", same("shipped"), set()),
    ("status || '!'", "status", ["open!", "closed!", "open!", None, "Shipped!"], {"status"}),
    ("upper(status)", "status", ["OPEN", "CLOSED", "OPEN", None, "SHIPPED"], {"status"}),
    ("NULL", "status", same(None), set()),
    (
        "total * 2",
        "total",
        [Decimal("100.00"), Decimal("300.50"), Decimal("400.00"), None, Decimal("200.00")],
        {"total"},
    ),
    ("5", "total", same(Decimal("5.00")), set()),
    ("1.5", "total", same(Decimal("1.50")), set()),
    (
        "qty",
        "total",
        [Decimal(1), Decimal(2), Decimal(3), Decimal(4), None],
        {"qty"},
    ),  # int -> decimal
    ("qty + id", "qty", [2, 4, 6, 8, None], {"qty", "id"}),
    ("id", "qty", [1, 2, 3, 4, 5], {"id"}),  # int32 -> int64
    ("id * 2", "id", [2, 4, 6, 8, 10], {"id"}),  # stays int32: 2 is typed by id
    ("qty", "id", [1, 2, 3, 4, None], {"qty"}),  # int64 -> int32, checked when evaluated
    ("-qty", "f", [-1.0, -2.0, -3.0, -4.0, None], {"qty"}),
    ("total", "f", [50.0, 150.25, 200.0, None, 100.0], {"total"}),
    ("'2024-05-01'", "day", same(dt.date(2024, 5, 1)), set()),
    ("DATE '2024-05-01'", "day", same(dt.date(2024, 5, 1)), set()),
    (
        "day",
        "ts",
        [
            dt.datetime(2024, 1, 1, tzinfo=UTC),
            None,
            dt.datetime(2024, 2, 1, tzinfo=UTC),
            dt.datetime(2024, 3, 1, tzinfo=UTC),
            dt.datetime(2023, 1, 1, tzinfo=UTC),
        ],
        {"day"},
    ),
    ("'2024-05-01 10:00'", "ts", same(dt.datetime(2024, 5, 1, 10, tzinfo=UTC)), set()),
    ("TIMESTAMP '2024-05-01 10:00'", "ts", same(dt.datetime(2024, 5, 1, 10, tzinfo=UTC)), set()),
    ("NOT flag", "flag", [False, True, None, False, True], {"flag"}),
    ("TRUE", "flag", same(True), set()),
    ("id > 2", "flag", [False, False, True, True, True], {"id"}),
    ('coalesce("my col", 0)', "my col", [10, 20, 30, 40, 0], {"my col"}),
    # Python values: literals, converted exactly
    (7, "qty", same(7), set()),
    (7, "total", same(Decimal("7.00")), set()),
    (7, "f", same(7.0), set()),
    (2.0, "qty", same(2), set()),
    (1.25, "total", same(Decimal("1.25")), set()),
    (Decimal("1.5"), "total", same(Decimal("1.50")), set()),
    (None, "total", same(None), set()),
    (True, "flag", same(True), set()),
    (dt.date(2024, 5, 1), "day", same(dt.date(2024, 5, 1)), set()),
    (dt.date(2024, 5, 1), "ts", same(dt.datetime(2024, 5, 1, tzinfo=UTC)), set()),
    (dt.datetime(2024, 5, 1, 10), "ts", same(dt.datetime(2024, 5, 1, 10, tzinfo=UTC)), set()),
    (
        dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        "ts",
        same(dt.datetime(2024, 5, 1, 10, tzinfo=UTC)),
        set(),
    ),
    (b"zz", pa.field("b", pa.binary()), same(b"zz"), set()),
    (bytearray(b"q"), pa.field("b", pa.large_binary()), same(b"q"), set()),
    (5, pa.field("new", pa.int16()), same(5), set()),
    ("'x'", pa.field("new", pa.large_string()), same("x"), set()),
    ([1, 2], pa.field("new", pa.list_(pa.int32())), same([1, 2]), set()),
]


@pytest.mark.parametrize(
    ("v", "column", "expected", "columns"), VALUES, ids=[repr(c[0]) for c in VALUES]
)
def test_parse_value(
    v: Any, column: str | pa.Field, expected: list[Any], columns: set[str]
) -> None:
    assert value(v, column) == (expected, columns)


VALUE_ERRORS = [
    ("5", "status", r"cannot assign '5' \(int64\) to column 'status' \(string\)"),
    (5, "status", r"cannot assign 5 \(int64\) to column 'status' \(string\)"),
    (True, "qty", r"cannot assign True \(bool\) to column 'qty'"),
    (True, "total", "cannot assign True to column 'total'"),
    ("1.505", "total", r"cannot assign '1.505' to column 'total' \(decimal128\(10, 2\)\) exactly"),
    (1.505, "total", "cannot assign 1.505 to column 'total'"),
    (Decimal("1.555"), "total", "cannot assign Decimal\\('1.555'\\) to column 'total'"),
    (2.5, "qty", "cannot assign 2.5 to column 'qty'"),
    (
        "f * 2",
        "total",
        r"cannot assign 'f \* 2' \(double\) to column 'total' .*: the cast is not safe",
    ),
    ("f", "qty", "cannot assign 'f' .* to column 'qty'.*not safe"),
    ("status", "qty", "cannot assign 'status' .* to column 'qty'"),
    ("ts", "day", "cannot assign 'ts' .* to column 'day'"),
    ("'abc'", "qty", "'abc' is not a valid int64"),
    ("'2024-13-01'", "day", "is not a date"),
    (dt.datetime(2024, 1, 1, tzinfo=UTC), pa.field("n", pa.timestamp("us")), "with a time zone"),
    ("'2024-01-01 00:00+02:00'", pa.field("n", pa.timestamp("us")), "has a time zone offset"),
    ("nope + 1", "qty", "value for column 'qty': unknown column 'nope' in 'nope \\+ 1'"),
    ("qty +", "qty", "value for column 'qty': invalid SQL 'qty \\+'"),
    ("", "qty", "value for column 'qty': empty SQL expression"),
    ("foo(qty)", "qty", r"value for column 'qty': unsupported function foo\(\)"),
    (99999, pa.field("n", pa.int16()), "cannot assign 99999 to column 'n' \\(int16\\) exactly"),
    (-1, pa.field("n", pa.uint8()), "cannot assign -1 to column 'n'"),
    ({"a": 1}, "qty", "cannot assign .* to column 'qty'"),
]


@pytest.mark.parametrize(
    ("v", "column", "message"), VALUE_ERRORS, ids=[repr(e[0]) for e in VALUE_ERRORS]
)
def test_parse_value_errors(v: Any, column: str | pa.Field, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        value(v, column)


@pytest.mark.parametrize("v", [None, "NULL"])
def test_null_for_a_non_nullable_column(v: Any) -> None:
    with pytest.raises(ValueError, match="column 'qty' is not nullable"):
        value(v, "qty", nullable=False)


def test_a_value_that_does_not_fit_raises_when_evaluated() -> None:
    expr, _ = parse_value("qty * 1000", SCHEMA, pa.field("n", pa.decimal128(4, 1)))
    with pytest.raises(ValueError, match="does not fit in precision"):
        evaluate(ORDERS, expr)
