"""Smoke test of ``python -m kvstore.bench``: tiny sizes, every available store, no timings."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest

from kvstore.bench import STORES, Config, run
from kvstore.bench.__main__ import main, parse_count, render
from kvstore.bench.adapters import ROW_GROUPS
from kvstore.bench.workloads import ROW_ORDER, UNITS, batches, key

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
        txn_keys=50,
        txn_seconds=0.2,
        hot_threads=3,
        hot_keys=10,
        overwrite_puts=1_500,
        overwrite_keys=300,
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
        na = {w for s, w in report.not_applicable if s == store}
        assert not got & na, store
        assert got | na == set(ROW_ORDER), store  # every row: measured or n/a
        expected_na = {w for g in STORES[store].not_run for w in ROW_GROUPS[g]}
        assert na == expected_na, store
    # kvstore runs every row; the transaction rows run where the adapters say
    assert {w for s, w in report.not_applicable if s == "kvstore"} == set()
    for r in report.rows:
        assert r.ops > 0 and math.isfinite(r.seconds) and r.seconds > 0, r
        if r.workload.endswith("_aborts"):
            # the rate is the aborts its note counts over the attempts
            m = re.match(r"(\d+) aborts in (\d+) attempts", r.note)
            assert m is not None and int(m.group(2)) == r.ops, r
            assert r.value == pytest.approx(100.0 * int(m.group(1)) / r.ops), r
            continue
        if r.unit == "ops/s":  # a rate is the operations done over the seconds timed
            assert r.value == pytest.approx(r.ops / r.seconds, rel=1e-9), r
        assert math.isfinite(r.value) and r.value > 0, r
        if r.workload in ("load", "scan"):
            assert r.ops == 2_000, r  # every key loaded and scanned back
        if r.workload == "overwrite":
            assert r.ops == 1_500, r  # no time bound hit at this size
    kv = {r.workload: r for r in report.rows if r.store == "kvstore"}
    assert kv["txn_hot_snapshot_aborts"].unit == "%" and kv["overwrite_max_ms"].unit == "ms"
    assert 0.5 < kv["space_amp"].value < 10 and kv["space_amp"].unit == "x"
    assert set(UNITS) <= set(ROW_ORDER)
    names = {t.workload for t in report.targets}
    assert {"txn_rmw", "txn_open100", "overwrite_max_ms", "space_amp"} <= names
    assert {"get_after_overwrite", "get_after_compact"} <= names
    assert report.raw_fsync_ops and report.raw_fsync_ops > 0
    assert report.targets
    if set(AVAILABLE) == set(STORES):
        assert all(t.actual is not None for t in report.targets)
    assert os.listdir(str(tmp_path)) == []  # the data directory was removed
    text = render(report, markdown=False)
    md = render(report, markdown=True)
    for store in AVAILABLE:
        assert store in text and store in md
    assert "abort rate" in text and "n/a" in text
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


def test_new_workloads_subset(tmp_path: Path) -> None:
    """Only the transaction and overwrite workloads: their rows, no load rows."""
    cfg = tiny(
        tmp_path, stores=("kvstore", "sqlite3"), workloads=("txn_rmw", "txn_open100", "overwrite")
    )
    report = run(cfg)
    assert report.errors == []
    got = {(r.store, r.workload) for r in report.rows}
    assert ("kvstore", "load") not in got
    for w in ROW_ORDER[ROW_ORDER.index("txn_rmw") :]:
        assert ("kvstore", w) in got, w
    assert ("sqlite3", "txn_hot_serializable") in got
    assert ("sqlite3", "txn_hot_snapshot") not in got
    assert ("sqlite3", "txn_hot_snapshot") in report.not_applicable
    assert report.value("sqlite3", "txn_hot_serializable_aborts", None) == 0.0
    assert os.listdir(str(tmp_path)) == []
