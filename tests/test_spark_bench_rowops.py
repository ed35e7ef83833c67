"""The row-operation benchmark (``python -m lakehouse.spark.bench --rowops``), run tiny on
the shared session: its table and JSON hold every row, and its checks refuse a wrong
result instead of timing it."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")

import lakehouse.spark as lhs
from lakehouse.spark import bench, bench_rowops

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark

ROWS = 20_000


def test_rowops_benchmark_runs(spark, tmp_path):
    res = bench_rowops.run_rowops(
        rows=ROWS, repeats=1, root=str(tmp_path), spark=spark, files=4, warmup=False
    )
    assert (res["rows"], res["repeats"], res["files"]) == (ROWS, 1, 4)
    # the delete's condition is order_id % 10 = 3 over order ids 0 .. ROWS-1
    assert res["deleted_rows"] == sum(1 for i in range(ROWS) if i % 10 == 3)
    plain = bench.orders_frame(spark, ROWS)
    assert res["updated_rows"] == plain.where("product_id = 42").count() > 0
    assert res["merge_rows"] == 1000
    table = bench_rowops.format_rowops(res)
    assert f"{ROWS:,} rows in 4 files, 1 repeats" in table
    for key, label, target in bench_rowops.ROWS:
        r = res[key]
        p, q = r["plain_s"], r["lakehouse_s"]
        for x in (*p.values(), *q.values()):
            assert math.isfinite(x) and x > 0, (key, r)
        assert p["min"] == p["median"] == p["max"] and q["min"] == q["median"] == q["max"]
        assert r["ratio"] == pytest.approx(q["median"] / p["median"])
        assert r["ratio_range"] == pytest.approx([r["ratio"], r["ratio"]])
        assert r["target"] == target
        assert r["met"] == (None if target is None else r["ratio"] <= target)
        line = next(x for x in table.splitlines() if x.startswith(f"{label:30} "))
        assert f"{q['min']:.2f} / {q['median']:.2f}" in line and f"{r['ratio']:>5.2f}x" in line
    mem = res["memory"]
    if mem is not None:  # psutil installed
        assert mem["deleted_rows"] == sum(1 for i in range(ROWS) if i % 10 < 3)
        assert mem["growth_mb"] == pytest.approx(mem["rss_peak_mb"] - mem["rss_before_mb"])
        assert mem["growth_mb"] >= 0 and mem["met"] == (mem["growth_mb"] <= 20)
        assert f"+{mem['growth_mb']:.1f} MB RSS" in table


def test_rowops_benchmark_refuses_a_wrong_delete(spark, tmp_path, monkeypatch):
    real = lhs.delete

    def short(lh, spark, table, condition, **kw):  # misses one of the rows
        return real(lh, spark, table, f"({condition}) AND order_id <> 3", **kw)

    monkeypatch.setattr(lhs, "delete", short)
    with pytest.raises(AssertionError, match="rows deleted"):
        bench_rowops.run_rowops(
            rows=ROWS, repeats=1, root=str(tmp_path), spark=spark, files=2, warmup=False
        )


def test_rowops_benchmark_refuses_a_read_with_deleted_rows(spark, tmp_path, monkeypatch):
    real = lhs.read

    def stale(lh, spark, table, **kw):  # the version before the last commit
        return real(lh, spark, table, version=lh.version - 1)

    monkeypatch.setattr(lhs, "read", stale)
    with pytest.raises(AssertionError, match="count\\(\\) after the delete"):
        bench_rowops.run_rowops(
            rows=ROWS, repeats=1, root=str(tmp_path), spark=spark, files=2, warmup=False
        )
