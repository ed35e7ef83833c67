#!/usr/bin/env python3
"""Inlined rows against Parquet files: what ``inline.max_rows`` was chosen by.

    .venv/bin/python tools/inline_rows.py [--rounds 2] [--json]

On a local directory with durable commits (the defaults of
``lakehouse.open``), tables of the issue benchmark's shape (``id int64, name
string, amount float64``, ``lakehouse.bench.data.make_batches``) and
``compaction.auto = "false"`` so nothing is flushed behind the measurement:

* the median latency of an append of 1,000, 3,000 and 10,000 rows, inlined
  (``inline.max_rows = 10000``) and as a Parquet file (``0``), and the bytes
  of the inline payload / the Parquet file;
* 300 appends of 1,000 rows: commits per second, then the median of 9 reads
  of the whole latest table and of 9 point reads (``id = x``).

Each round runs both modes in turn, so load drifting on a shared machine
slows both alike; the report gives every round's numbers. A dev tool, not
part of the package (docs/lakehouse.md, "Inlined rows").
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from typing import Any

import lakehouse
from lakehouse.bench.data import SCHEMA, make_batches

MODES = {"inline": {"inline.max_rows": "10000"}, "parquet": {"inline.max_rows": "0"}}


def _open(root: str, mode: str) -> Any:
    lh = lakehouse.open(root)
    with lh.begin() as txn:
        txn.create_namespace("b")
        txn.create_table("b.t", SCHEMA, {"compaction.auto": "false", **MODES[mode]})
    return lh


def appends(rows: int, n: int, mode: str) -> dict[str, float]:
    root = tempfile.mkdtemp()
    try:
        lh = _open(root, mode)
        batches = make_batches(n + 3, rows, seed=rows)
        for b in batches[:3]:  # warm up
            lh.append("b.t", b)
        took = []
        for b in batches[3:]:
            t0 = time.perf_counter()
            lh.append("b.t", b)
            took.append(time.perf_counter() - t0)
        size = lh.list_data_files("b.t")[-1].bytes
        lh.close()
    finally:
        shutil.rmtree(root)
    return {"ms": round(statistics.median(took) * 1e3, 2), "bytes": size}


def read_after(n: int, mode: str) -> dict[str, float]:
    root = tempfile.mkdtemp()
    try:
        lh = _open(root, mode)
        t0 = time.perf_counter()
        for b in make_batches(n, 1000):
            lh.append("b.t", b)
        commits = n / (time.perf_counter() - t0)
        assert lh.read("b.t").num_rows == n * 1000
        whole, point = [], []
        for i in range(9):
            t0 = time.perf_counter()
            lh.read("b.t")
            whole.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            lh.read("b.t", where=f"id = {i * 7919}")
            point.append(time.perf_counter() - t0)
        lh.close()
    finally:
        shutil.rmtree(root)
    return {
        "commits_per_s": round(commits),
        "read_ms": round(statistics.median(whole) * 1e3, 1),
        "point_read_ms": round(statistics.median(point) * 1e3, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    a = ap.parse_args()
    out: list[dict[str, Any]] = []
    for r in range(a.rounds):
        one: dict[str, Any] = {"round": r + 1}
        for rows, n in ((1000, 40), (3000, 25), (10000, 20)):
            for mode in MODES:
                one[f"append {rows} rows, {mode}"] = appends(rows, n, mode)
        for mode in MODES:
            one[f"300 appends of 1,000 rows, {mode}"] = read_after(300, mode)
        out.append(one)
        if not a.json:
            for k, v in one.items():
                print(f"{k:40s} {v}")
    if a.json:
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
