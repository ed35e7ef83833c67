"""The tables both sides of the iceberg bench hold: their names, schema and
rows, and the checks of what a side returns."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

NS = "bench"
READ, LOAD, FAST = f"{NS}.read", f"{NS}.load", f"{NS}.load_fast"
NOCHECK = f"{NS}.load_nocheck"
SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.int32()), ("name", pa.string()),
                    ("amount", pa.float64())])  # fmt: skip
PROPS = {"compaction.auto": "false", "inline.max_rows": "0"}


def rows(start: int, files: int, per_file: int) -> pa.Table:
    """``files * per_file`` rows with ids from ``start``: file (partition) ``p`` holds
    ids ``start + p * per_file ..`` (contiguous), deterministic."""
    ids = np.arange(start, start + files * per_file, dtype=np.int64)
    p = ((ids - start) // per_file).astype(np.int32)
    names = pc.binary_join_element_wise("name-", pc.cast(pa.array(ids), pa.string()), "")
    return pa.table([pa.array(ids), pa.array(p), names, pa.array(ids * 0.25)], schema=SCHEMA)


def check(what: str, got: Any, want: Any) -> None:
    """A benchmark result that differs from the expected one is an error, not a number."""
    if got != want:
        raise AssertionError(f"{what}: {got!r}, expected {want!r}")


def same_rows(what: str, got: pa.Table, want: pa.Table) -> None:
    """``got`` holds exactly ``want``'s rows (column order and Arrow string flavour aside)."""
    check(f"{what}: rows", got.num_rows, want.num_rows)
    g = got.select(SCHEMA.names).sort_by("id")
    w = want.select(SCHEMA.names).sort_by("id")
    for name in SCHEMA.names:
        check(f"{what}: column {name}", g[name].to_pylist(), w[name].to_pylist())


def totals(summary_: Any) -> tuple[int, int, int]:
    """(added files, total files, total records) of a snapshot summary (a mapping)."""
    get = summary_.get if hasattr(summary_, "get") else summary_.__getitem__
    return (int(get("added-data-files") or 0), int(get("total-data-files")),
            int(get("total-records")))  # fmt: skip


def metadata_summary(location: str) -> Any:
    """The current snapshot's summary in a metadata JSON file (ours)."""
    with open(location.removeprefix("file://"), "rb") as f:
        meta = json.load(f)
    snap = next(s for s in meta["snapshots"] if s["snapshot-id"] == meta["current-snapshot-id"])
    return snap["summary"]
