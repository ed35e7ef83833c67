"""The main job (``python -m lakehouse.spark_demo``) and the Spark benchmark, run
small on the shared session so they cannot rot."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")

from lakehouse import spark_demo
from lakehouse.spark import bench

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark


@pytest.mark.slow
def test_main_job_runs_end_to_end(spark, tmp_path, capsys):
    out = spark_demo.main(str(tmp_path), scale=0.01, spark=spark)
    text = capsys.readouterr().out
    assert out["serializable_attempts"] == 2  # the late load made attempt 1 conflict
    assert out["deleted"] > 0 and out["orders"] > 0 and out["daily_revenue"] > 0
    assert out["oldest"] == out["version"]  # expire_versions(keep_last=1)
    for step in (
        "SERIALIZABLE attempt 1 refused",
        "Change batch merged",
        "lh.rollback(",
        "Compaction rewrote",
        "raises VersionExpired",
    ):
        assert step in text, step


def test_benchmark_runs(spark, tmp_path):
    res = bench.run(rows=20_000, repeats=1, root=str(tmp_path), spark=spark)
    for key in ("write", "read", "read_1pct_deleted"):
        assert res[key]["ratio"] > 0
    assert res["deleted_rows"] == 200
    assert "read, 1% deleted" in bench.format_table(res)
