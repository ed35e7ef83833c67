"""Smoke test of ``python -m kvstore.bench``: tiny sizes, every available store, no timings."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kvstore.bench import STORES, Config, run
from kvstore.bench.__main__ import main, parse_count, render
from kvstore.bench.workloads import ROW_ORDER, batches, key

AVAILABLE = [name for name, cls in STORES.items() if cls.missing() is None]


def tiny(tmp_path: Path, **overrides: object) -> Config:
    return Config.quick(
        sizes=(2_000,),
        root=str(tmp_path),
        get_ops=500,
        put_ops=50,
        put_seconds=0.3,
        threads=3,
        fsync_seconds=0.1,
        **overrides,  # type: ignore[arg-type]
    )


def test_keys_are_distinct_16_bytes() -> None:
    keys = [key(i) for i in range(10_000)]
    assert len(set(keys)) == len(keys)
    assert {len(k) for k in keys} == {16}
    sizes = [len(b) for b in batches(2_500, 1_000)]
    assert sizes == [1_000, 1_000, 500]


def test_every_available_store_runs_every_workload(tmp_path: Path) -> None:
    report = run(tiny(tmp_path))
    assert report.errors == []
    assert set(report.skipped) == set(STORES) - set(AVAILABLE)
    assert "kvstore" in report.stores
    for store in AVAILABLE:
        got = {r.workload for r in report.rows if r.store == store}
        assert got == set(ROW_ORDER), store
    for r in report.rows:
        assert r.value > 0 and r.ops > 0, r
        if r.workload in ("load", "scan"):
            assert r.ops == 2_000, r  # every key loaded and scanned back
    assert report.raw_fsync_ops and report.raw_fsync_ops > 0
    assert report.targets
    if set(AVAILABLE) == set(STORES):
        assert all(t.actual is not None for t in report.targets)
    assert os.listdir(str(tmp_path)) == []  # the data directory was removed
    text = render(report, markdown=False)
    md = render(report, markdown=True)
    for store in AVAILABLE:
        assert store in text and store in md
    json.dumps(report.to_json())


def test_cli_subset_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = os.path.join(str(tmp_path), "bench.md")
    data_dir = os.path.join(str(tmp_path), "data")
    rc = main(
        [
            "--quick",
            "--keys",
            "2k",
            "--stores",
            "kvstore,sqlite3",
            "--workloads",
            "load,get",
            "--json",
            "--out",
            out,
            "--dir",
            data_dir,
            "--quiet",
        ]
    )
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert {(r["store"], r["workload"]) for r in data["rows"]} == {
        (s, w) for s in ("kvstore", "sqlite3") for w in ("load", "get")
    }
    with open(out, encoding="utf-8") as f:
        assert "| workload |" in f.read()
    assert os.listdir(data_dir) == []


def test_cli_rejects_unknown_names() -> None:
    with pytest.raises(SystemExit):
        main(["--stores", "nosuchdb"])
    assert parse_count("100k") == 100_000 and parse_count("1M") == 1_000_000
