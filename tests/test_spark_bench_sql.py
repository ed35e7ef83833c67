"""The SQL benchmark (``python -m lakehouse.spark.bench --sql``), run tiny on the shared
session: every statement runs on both sides, its checks compare the two with each other
and with plain Spark, and a wrong result is refused instead of timed."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")

import lakehouse.spark as lhs
from lakehouse.spark import bench_common, bench_sql

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark

ROWS = 20_000


def test_sql_benchmark_runs(spark, tmp_path):
    res = bench_sql.run_sql(
        rows=ROWS, repeats=1, root=str(tmp_path), spark=spark, files=4, merge_rows=100,
        warmup=False,
    )  # fmt: skip
    assert (res["rows"], res["repeats"], res["files"]) == (ROWS, 1, 4)
    # the delete's condition is order_id % 10 = 3 over order ids 0 .. ROWS-1
    assert res["deleted_rows"] == sum(1 for i in range(ROWS) if i % 10 == 3)
    plain = bench_common.orders_frame(spark, ROWS)
    assert res["updated_rows"] == plain.where("product_id = 42").count() > 0
    assert (res["merge_rows"], res["insert_rows"]) == (100, ROWS // 10)
    groups = plain.where("status = 'paid'").select("product_id").distinct().count()
    assert res["select_groups"] == groups > 0
    table = bench_sql.format_sql(res)
    assert f"{ROWS:,} rows in 4 files, 1 repeats" in table
    for key, label in bench_sql.ROWS:
        r = res[key]
        p, q = r["plain_s"], r["lakehouse_s"]
        for x in (*p.values(), *q.values()):
            assert math.isfinite(x) and x > 0, (key, r)
        assert p["min"] == p["median"] == p["max"] and q["min"] == q["median"] == q["max"]
        assert r["ratio"] == pytest.approx(q["median"] / p["median"])
        assert r["min_ratio"] == pytest.approx(r["ratio"])
        assert r["ratio_range"] == pytest.approx([r["ratio"], r["ratio"]])
        assert r["met"] == (r["ratio"] <= 1.1)
        line = next(x for x in table.splitlines() if x.startswith(f"{label:31} "))
        assert f"{q['min']:.2f} / {q['median']:.2f}" in line and f"{r['ratio']:>6.2f}x" in line
    # nothing left behind in the session's catalog
    names = {t.name for t in spark.catalog.listTables()}
    assert not names & {bench_sql.MERGE_VIEW, bench_sql.INSERT_VIEW}


def test_sql_benchmark_refuses_a_wrong_delete(spark, tmp_path, monkeypatch):
    real = lhs.delete

    def short(lh, spark, table, condition, **kw):  # misses one of the rows
        return real(lh, spark, table, f"({condition}) AND order_id <> 3", **kw)

    monkeypatch.setattr(lhs, "delete", short)
    with pytest.raises(AssertionError, match="DELETE: rows deleted"):
        bench_sql.run_sql(
            rows=ROWS, repeats=1, root=str(tmp_path), spark=spark, files=2, merge_rows=100,
            warmup=False,
        )  # fmt: skip
