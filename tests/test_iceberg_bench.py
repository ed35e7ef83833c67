"""Smoke tests of ``python -m lakehouse.bench --only iceberg`` at toy sizes (no timings
asserted): it runs, reports, and its cross-checks fail when a side is wrong."""

from __future__ import annotations

import json
import sys

import pytest

pytest.importorskip("pyiceberg")

from lakehouse import bench
from lakehouse.bench import iceberg as ib

try:
    from lakehouse.iceberg import Server, write_metadata  # noqa: F401

    OURS = True
except ImportError:  # the catalog is not there: pyiceberg's side only
    OURS = False

TINY = ["--iceberg-read-files", "6", "--iceberg-load-files", "8", "--iceberg-load-commits",
        "2", "--iceberg-append-files", "2,3", "--iceberg-rows-per-file", "2",
        "--repeats", "2"]  # fmt: skip


def _run(tmp_path, *extra: str) -> tuple[int, dict, str]:
    out = tmp_path / "res.json"
    code = bench.main(["--only", "iceberg", "--root", str(tmp_path / "b"), *TINY, *extra,
                       "--json", str(out)])  # fmt: skip
    return code, json.loads(out.read_text())["iceberg"], str(out)


def test_iceberg_bench_runs_and_reports(tmp_path, capsys):
    code, res, _ = _run(tmp_path, "--iceberg-profile")
    assert code == 0
    text = capsys.readouterr().out
    assert res["sizes"] == {"read_files": 6, "load_files": 8, "load_commits": 2,
                            "append_files": [2, 3], "rows_per_file": 2, "repeats": 2}  # fmt: skip
    # three rounds of two appends each after the 8 built files
    assert res["load_files_at_end"] == 8 + 3 * (2 + 3)
    assert set(res["pairs"]) == {"read", "load", "commit_2", "commit_3"}
    for key, p in res["pairs"].items():
        a = p["plain_s"]
        assert 0 < a["min"] <= a["median"] <= a["max"], key
        assert f"{ib._ms(a['median'])} ({ib._ms(a['min'])}-{ib._ms(a['max'])})" in text
        if OURS:
            b = p["lakehouse_s"]
            assert 0 < b["min"] <= b["median"] <= b["max"], key
            lo, hi = p["ratio_range"]
            assert 0 < lo <= hi
            assert p["ratio"] == pytest.approx(b["median"] / a["median"])
    got = {t["key"]: t for t in res["targets"]}
    assert list(got) == ["read", "load", "commit_2", "commit_3"]
    for t in got.values():
        if OURS:
            assert t["pass"] == (t["value"] <= float(t["target"].split()[1].rstrip("x")))
            assert f"{t['value']:.3g}x (target {t['target']})" in text
        else:
            assert t["value"] is None and t["pass"] is None
    assert "| read 6 files (load + scan) |" in text and "| commit 3 more files |" in text
    if OURS:
        assert res["missing"] is None
        assert any(k.startswith("write_metadata") for k in res["profile"])
        assert "profile of one write_metadata (3 more files):" in text
    else:
        assert "lakehouse.iceberg is not available" in res["missing"]


def test_a_pyiceberg_side_missing_a_file_fails(tmp_path, monkeypatch):
    real = ib.PyIceberg.data_files

    def one_short(self, name, batch, per_file):
        files = real(self, name, batch, per_file)
        return files[:-1] if name == ib.LOAD and len(files) == 3 else files

    monkeypatch.setattr(ib.PyIceberg, "data_files", one_short)
    with pytest.raises(AssertionError, match="pyiceberg commit of 3: added, total files"):
        _run(tmp_path)


def test_wrong_rows_fail():
    want = ib.rows(0, 3, 2)
    ib.same_rows("same", want.select(["name", "id", "amount", "p"]), want)  # order aside
    with pytest.raises(AssertionError, match="x: rows"):
        ib.same_rows("x", want.slice(1), want)
    other = ib.rows(1, 3, 2)
    with pytest.raises(AssertionError, match="x: column id"):
        ib.same_rows("x", other, want)


@pytest.mark.skipif(not OURS, reason="lakehouse.iceberg is not there yet")
def test_stale_metadata_from_our_side_fails(tmp_path, monkeypatch):
    """write_metadata answering with the metadata of an older version is caught."""
    real = ib.Ours.write_metadata
    first: dict[str, str] = {}

    def stale(self, name):
        loc = real(self, name)
        return first.setdefault(name, loc)

    monkeypatch.setattr(ib.Ours, "write_metadata", stale)
    with pytest.raises(AssertionError, match="write_metadata of 2 more"):
        _run(tmp_path)


@pytest.mark.skipif(not OURS, reason="lakehouse.iceberg is not there yet")
def test_a_rest_read_missing_rows_fails(tmp_path, monkeypatch):
    """A row deleted behind the bench's back (after its own check of ``lh.read``):
    the rows pyiceberg reads through our catalog no longer match pyiceberg's."""
    real = ib.Ours.serve

    def serve_then_delete(self):
        with self.lh.begin() as txn:
            txn.delete(ib.READ, "id = 0")
        real(self)

    monkeypatch.setattr(ib.Ours, "serve", serve_then_delete)
    with pytest.raises(AssertionError, match=r"pyiceberg read \(our REST catalog\): rows"):
        _run(tmp_path)


def test_without_the_catalog_pyiceberg_side_only(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "lakehouse.iceberg", None)  # import fails
    code, res, _ = _run(tmp_path)
    assert code == 0
    assert "lakehouse.iceberg is not available" in res["missing"]
    assert all("lakehouse_s" not in p and p["plain_s"]["min"] > 0 for p in res["pairs"].values())
    assert [t["pass"] for t in res["targets"]] == [None] * 4
