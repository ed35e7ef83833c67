"""The main job (``python -m lakehouse.spark_demo``) and the Spark benchmark, run
small on the shared session so they cannot rot."""

from __future__ import annotations

import datetime as dt
import math
import os
import re

import pyarrow as pa
import pyarrow.compute as pc
import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")

from lakehouse import spark_demo
from lakehouse.spark import bench

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark


@pytest.mark.slow
def test_main_job_runs_end_to_end(spark, tmp_path, capsys):
    scale = 0.01
    out = spark_demo.main(str(tmp_path), scale=scale, spark=spark)
    text = capsys.readouterr().out
    assert out["serializable_attempts"] == 2  # the late load made attempt 1 conflict
    assert out["oldest"] == out["version"]  # expire_versions(keep_last=1)
    _check_demo_counts(out, text, os.path.join(str(tmp_path), "spark-lakehouse"), scale)
    for step in (
        "SERIALIZABLE attempt 1 refused",
        "Change batch merged",
        "lh.rollback(",
        "Compaction rewrote",
        "raises VersionExpired",
        "In SQL (lakehouse.spark.sql): MERGE INTO shop.customers",
        "A SqlSession: CREATE TABLE shop.segment_changes, then BEGIN;",
        "In lakehouse.spark.sql, no views: SELECT status",
    ):
        assert step in text, step


def _printed(pattern: str, text: str) -> list[int]:
    m = re.search(pattern, text, re.M)
    assert m is not None, pattern
    return [int(g.replace(",", "")) for g in m.groups()]


def _check_demo_counts(out: dict, text: str, path: str, scale: float) -> None:
    """The demo's summary and printed counts against the tables it left, read back
    with the lakehouse (no Spark), and against its loads' sizes."""
    import lakehouse

    n = lambda rows: max(1000, int(rows * scale))  # noqa: E731 - the demo's sizing
    loads = [n(1_000_000), n(800_000), n(600_000), n(600_000)]  # order ids from 0, in order
    early = loads[0] + loads[1]  # ids below this: weeks 1-2, the only ones the delete may touch
    before_merge = sum(loads) + n(500_000)  # the merge inserts ids from here
    facts = before_merge + 50  # and the 50 late orders (ids from 10,000,000)
    with lakehouse.open(path) as lh:
        assert lh.version == out["version"]
        orders = lh.read("shop.orders", columns=["order_id", "status"])
        daily = lh.read("shop.daily_revenue")
        customers = lh.read("shop.customers", columns=["customer_id", "segment"])
        changes = lh.read("shop.segment_changes")
    rows = list(zip(orders["order_id"].to_pylist(), orders["status"].to_pylist()))
    assert out["orders"] == len(rows) == len({i for i, _ in rows})  # no duplicate order
    # 4. the delete: the first two weeks' cancelled orders, and nothing else
    deleted, marked = _printed(r"^4\. Deleted ([\d,]+) .*deletion vectors: ([\d,]+) rows", text)
    assert deleted == marked == out["deleted"] > 0
    assert out["deleted"] == early - sum(1 for i, _ in rows if i < early)
    assert not [i for i, st in rows if i < early and st == "cancelled"]
    assert sum(1 for i, _ in rows if early <= i < before_merge) == before_merge - early
    # the merge: every shipped order with id % 10 = 3 delivered; the late ones inserted
    updated, inserted = _printed(r"merged in [\d.]+s: ([\d,]+) shipped .*?([\d,]+) late", text)
    late = [st for i, st in rows if before_merge <= i < before_merge + n(20_000)]
    assert inserted == len(late) == n(20_000)
    assert not [i for i, st in rows if i < before_merge and i % 10 == 3 and st == "shipped"]
    assert out["orders"] == facts - out["deleted"] + inserted
    # 3. the SERIALIZABLE aggregate counts every order it saw, once
    agg, counted = _printed(r"sum\(daily_revenue\.orders\) = ([\d,]+) = .* = ([\d,]+)\.", text)
    assert agg == counted == facts
    # ... and February's aggregates, recomputed by replace_partitions after the merge,
    # count the late orders the merge inserted (all on February 4th); January is as it was
    assert daily.num_rows == out["daily_revenue"]
    assert pc.sum(daily["orders"]).as_py() == facts + inserted
    feb = daily.filter(pc.greater_equal(daily["day"], pa.scalar(dt.date(2025, 2, 1))))
    assert _printed(r"rewrote that month only \(([\d,]+) rows\)", text) == [feb.num_rows]
    # 5. orders per status, before the changes and now: the changes account for the difference
    then, now = {}, {}
    for st in spark_demo.STATUSES:
        then[st], now[st] = _printed(rf"^   {st} +([\d,]+) +([\d,]+)$", text)
        assert now[st] == sum(1 for _, s in rows if s == st), st
    assert sum(then.values()) == facts
    added = {st: late.count(st) for st in spark_demo.STATUSES}
    assert now["delivered"] == then["delivered"] + updated + added["delivered"]
    assert now["shipped"] == then["shipped"] - updated + added["shipped"]
    assert now["cancelled"] == then["cancelled"] - out["deleted"] + added["cancelled"]
    # 6. a load repeating order ids 0 .. is refused by the primary key; a bad load of
    # new ids is rolled back; 7. compaction keeps every row
    (refused,) = _printed(r"^6\. A load of ([\d,]+) rows repeating order ids is refused", text)
    assert refused == n(200_000) and "(duplicate key order_id=" in text
    bad, negative = _printed(r"^   Load 6 \(([\d,]+) new orders, .*?: ([\d,]+) rows with", text)
    assert bad == negative == n(200_000)
    (dupes,) = _printed(r"^   \(([\d,]+) duplicate order ids\)", text)
    assert dupes == 0
    assert not [i for i, _ in rows if i >= 1_000_000_000]  # the bad load was rolled back
    assert _printed(r"; ([\d,]+) rows again\.", text) == [out["orders"]]
    assert _printed(r"rows unchanged \(([\d,]+)\)", text) == [out["orders"]]
    _check_sql_steps(text, customers, changes, then, n(200_000), facts)


def _check_sql_steps(
    text: str, customers: pa.Table, changes: pa.Table, then: dict, n_customers: int, facts: int
) -> None:
    """The SQL steps: the MERGE INTO customers (ids n-50 .. n+49: the existing 50 become
    enterprise where they were not, 50 new ones), the BEGIN ... COMMIT moving consumers
    with id % 97 = 0 to enterprise and logging them (one version), the VERSION AS OF
    query (the view's counts), against the tables read back without Spark."""
    c = n_customers  # the demo's customers: enterprise when id % 20 = 0
    updated, inserted = _printed(
        r"THEN INSERT \*: ([\d,]+) customers moved to enterprise, ([\d,]+) new ones", text
    )
    assert updated == sum(1 for i in range(c - 50, c) if i % 20 != 0) > 0
    assert inserted == 50
    moved = [i for i in range(c - 50) if i % 97 == 0 and i % 20 != 0]
    logged, updated_txn, v_created, v_txn = _printed(
        r"^   ([\d,]+) changes logged and ([\d,]+) customers updated in [\d.]+s as one "
        r"version \(([\d,]+) -> ([\d,]+):",
        text,
    )
    assert logged == updated_txn == len(moved) > 0
    assert v_txn == v_created + 1  # both tables in one version
    assert sorted(changes["customer_id"].to_pylist()) == moved
    assert set(changes["segment"].to_pylist()) == {"enterprise"}
    assert set(changes["changed_on"].to_pylist()) == {dt.date(2025, 2, 5)}
    segments = dict(zip(customers["customer_id"].to_pylist(), customers["segment"].to_pylist()))
    moved_ids = set(moved)
    want = {
        i: "enterprise" if i % 20 == 0 or i >= c - 50 or i in moved_ids else "consumer"
        for i in range(c + 50)
    }
    assert segments == want
    total, delivered = _printed(
        r"^   -> ([\d,]+) orders, ([\d,]+) delivered \(the same counts as the view's\)", text
    )
    assert (total, delivered) == (facts, then["delivered"])


def test_benchmark_runs(spark, tmp_path):
    rows = 20_000
    res = bench.run(rows=rows, repeats=1, root=str(tmp_path), spark=spark)
    assert (res["rows"], res["repeats"]) == (rows, 1)
    # the delete's predicate is order_id % 100 = 7 over order ids 0 .. rows-1
    assert res["deleted_rows"] == sum(1 for i in range(rows) if i % 100 == 7)
    table = bench.format_table(res)
    assert f"{rows:,} rows, 1 repeats" in table
    for key, label in (
        ("write", "write"),
        ("read", "read"),
        ("read_1pct_deleted", "read, 1% deleted"),
    ):
        r = res[key]
        p, q = r["plain_s"], r["lakehouse_s"]
        for x in (*p.values(), *q.values()):
            assert math.isfinite(x) and x > 0, (key, r)
        # one repeat: median = min = max, and the ratio is the two times divided
        assert p["min"] == p["median"] == p["max"] and q["min"] == q["median"] == q["max"]
        assert r["ratio"] == pytest.approx(q["median"] / p["median"])
        assert r["ratio_range"] == pytest.approx([r["ratio"], r["ratio"]])
        if "cpu_ratio" in r:
            assert r["cpu_ratio"] == pytest.approx(r["cpu_lakehouse_s"] / r["cpu_plain_s"])
        line = next(x for x in table.splitlines() if x.startswith(f"{label:18} "))
        assert f"{p['median']:>9.2f} " in line and f"{r['ratio']:>5.2f}x" in line, line


@pytest.mark.parametrize("primary_key", [True, False])
def test_merge_benchmark_runs(spark, tmp_path, primary_key):
    """``--merge``: a merge of keyed rows (half new) vs a write of them; the bench
    checks both tables' row counts after each (and raises otherwise)."""
    rows, merge_rows = 20_000, 100
    res = bench.run_merge(rows=rows, repeats=1, root=str(tmp_path), spark=spark,
                          merge_rows=merge_rows, primary_key=primary_key)  # fmt: skip
    assert (res["rows"], res["repeats"], res["merge_rows"]) == (rows, 1, merge_rows)
    assert res["primary_key"] is primary_key
    assert res["inserted"] == 2 * (merge_rows // 2)  # the warm-up round and the measured one
    r = res["merge"]
    p, q = r["plain_s"], r["lakehouse_s"]
    assert all(math.isfinite(x) and x > 0 for x in (*p.values(), *q.values())), r
    assert r["ratio"] == pytest.approx(q["median"] / p["median"])
    line = next(x for x in bench.format_table(res).splitlines() if x.startswith("merge vs write"))
    assert f"{r['ratio']:>5.2f}x" in line, line
