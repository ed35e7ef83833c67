"""Smoke test of ``python -m lakehouse.bench`` at toy sizes (the real run takes minutes)."""

from __future__ import annotations

import importlib.util
import json

from lakehouse import bench


def test_bench_runs_and_reports(tmp_path, capsys):
    iceberg = 4 if importlib.util.find_spec("pyiceberg") is not None else 0
    out = tmp_path / "res.json"
    code = bench.main(
        [
            "--root", str(tmp_path / "b"), "--commits", "16", "--rounds", "1",
            "--iceberg-commits", str(iceberg), "--versions", "60", "--repeat", "5",
            "--json", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    text = capsys.readouterr().out
    assert "raw append+fdatasync" in text and "lakehouse, 8 threads" in text
    res = json.loads(out.read_text())
    t = res["throughput"]
    assert t["raw_fsync_per_s"] > 0 and t["lakehouse_1_thread_per_s"] > 0
    assert t["lakehouse_8_threads_per_s"] > 0
    if iceberg:
        assert t["iceberg_1_thread_per_s"] > 0
    assert [tt["tables"] for tt in res["time_travel"]] == [1000, 100, 1]
    assert all(tt["compacted"]["ratio"] > 0 for tt in res["time_travel"])
