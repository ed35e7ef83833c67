"""Smoke tests of ``python -m lakehouse.bench`` at toy sizes (the real run takes minutes)."""

from __future__ import annotations

import importlib.util
import json

from lakehouse import bench


def test_bench_runs_and_reports(tmp_path, capsys):
    iceberg = 4 if importlib.util.find_spec("pyiceberg") is not None else 0
    out = tmp_path / "res.json"
    code = bench.main(
        [
            "--only", "meta",
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
    assert "data" not in res


def test_data_bench_quick_ours_only(tmp_path, capsys):
    out = tmp_path / "res.json"
    root = tmp_path / "b"
    code = bench.main(
        ["--only", "data", "--quick", "--systems", "ours", "--root", str(root), "--json", str(out)]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "appends, commits/s" in text and "time travel" in text
    assert not root.exists()  # the bench data is removed
    res = json.loads(out.read_text())["data"]
    assert res["systems"] == ["ours"]
    (r,) = res["rounds"]
    sz = res["sizes"]
    assert r["append_per_s"]["ours"] > 0 and r["append_per_s"]["ours, fsync off"] > 0
    # the delete wrote no data file and replaced no live one (run() also asserts it)
    assert r["delete_files"]["ours"] == {"new_data_files": 0, "live_files_replaced": 0}
    c = r["concurrent"]["ours"]
    assert c["committed"] == c["attempted"] == sz["threads"] * sz["per_thread"]
    assert c["rows_match"] and not c["errors"]
    s = res["summary"]
    assert s["time_travel_ratio"]["ours"]["median"] > 0
    assert s["read_s"]["latest"]["ours"]["median"] > 0
