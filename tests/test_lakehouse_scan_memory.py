"""``scan_batches`` holds at most one decoded data file (issue 25, part 5).

The memory test runs the scan in a fresh Python process, whose Arrow memory
pool has allocated next to nothing before the scan: the pool's peak
(``max_memory``) then is the scan's own peak, transient allocations included
(a file decoded while the previous one is still referenced shows there, not
in a sample taken between batches). Both are checked against the largest
file's decoded size.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lakehouse

#: the bound documented in docs/lakehouse.md ("Table data") and scan.scan_batches
BOUND = 1.3

COLUMNS = 8

CHILD = textwrap.dedent(
    """
    import json, sys
    import pyarrow as pa
    import lakehouse

    lh = lakehouse.open(sys.argv[1])
    pool = pa.default_memory_pool()
    reader = lh.scan_batches("s.t")
    base = pool.bytes_allocated()
    before = pool.max_memory()
    rows = 0
    total = 0
    held = 0
    for batch in reader:
        rows += batch.num_rows
        total += pa.compute.sum(batch.column("id")).as_py() or 0
        held = max(held, pa.total_allocated_bytes() - base)
        del batch
    print(json.dumps({"base": base, "before": before, "peak": pool.max_memory() - base,
                      "held": held, "rows": rows, "sum": total}))
    lh.close()
    """
)


def chunk(n: int, start: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    cols = {"id": pa.array(np.arange(start, start + n, dtype=np.int64))}
    for i in range(COLUMNS - 1):
        cols[f"c{i}"] = pa.array(rng.random(n))
    return pa.table(cols)


@pytest.fixture
def table(tmp_path):
    """Four files of 20-40 MB decoded (one append each), two with deleted rows."""
    url = str(tmp_path / "lh")
    sizes = []
    with lakehouse.open(url) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table("s.t", chunk(1, 0, 0).schema)
        start = 0
        for k, n in enumerate([320_000, 500_000, 400_000, 600_000]):
            t = chunk(n, start, k)
            sizes.append(t.nbytes)
            lh.append("s.t", t)
            start += n
        with lh.begin() as txn:  # a deletion vector on two files
            txn.delete("s.t", "id % 7 = 3 AND id < 820000")
        files = lh.list_data_files("s.t")
        assert len(files) == 4 and sorted(f.rows for f in files) == sorted(
            [320_000, 500_000, 400_000, 600_000]
        )
        assert sum(f.deleted_rows > 0 for f in files) == 2
        live = lh.read("s.t", columns=["id"])
        expect = {"rows": live.num_rows, "sum": pc.sum(live.column("id")).as_py()}
    assert all(20e6 <= s <= 40e6 for s in sizes), sizes
    return url, max(sizes), expect


def test_scan_batches_holds_at_most_one_decoded_file(table):
    url, largest, expect = table
    out = subprocess.run(
        [sys.executable, "-c", CHILD, url], capture_output=True, text=True, check=True
    )
    got = json.loads(out.stdout)
    assert {"rows": got["rows"], "sum": got["sum"]} == expect
    # nothing before the scan could hide its peak
    assert got["before"] - got["base"] < 0.1 * largest
    assert got["held"] < BOUND * largest, (got, largest)
    assert got["peak"] < BOUND * largest, (got, largest)


# -- the same rows as read, whatever a file needs (the streamed path must not change them)
@pytest.fixture
def lh():
    h = lakehouse.open(f"memory://scanmem-{uuid.uuid4().hex}")
    yield h
    h.close()


def test_streamed_files_give_the_rows_read_gives(lh, monkeypatch):
    from lakehouse.data import files as datafiles

    monkeypatch.setattr(datafiles, "STREAM_BATCH_ROWS", 1000)  # many parts per file
    schema = pa.schema([("id", pa.int64()), ("v", pa.int32()), ("s", pa.string())])
    with lh.begin() as txn:
        txn.create_namespace("s")
        txn.create_table("s.t", schema, properties={"inline.max_rows": "10"})

    def rows(start: int, n: int) -> pa.Table:
        ids = np.arange(start, start + n, dtype=np.int64)
        return pa.table(
            {"id": ids, "v": (ids % 13).astype(np.int32), "s": [f"r{i}" for i in ids]},
            schema=schema,
        )

    lh.append("s.t", rows(0, 5000))
    lh.append("s.t", rows(5000, 3))  # inline
    with lh.begin() as txn:
        txn.alter_table("s.t", rename_columns={"v": "w"})
    with lh.begin() as txn:  # a column the older files lack (read as nulls)
        renamed = pa.schema([("id", pa.int64()), ("w", pa.int32()), ("s", pa.string())])
        txn.alter_table("s.t", schema=renamed.append(pa.field("z", pa.int64())))
    lh.append("s.t", rows(6000, 4000).rename_columns(["id", "w", "s"]))  # no z
    with lh.begin() as txn:  # scattered deletions, one whole part, in both files
        txn.delete("s.t", "id % 5 = 1 OR (id >= 2000 AND id < 3000) OR id = 5001 OR id >= 9990")
    for columns, where in [
        (None, None),
        (["id"], None),
        (["w", "id"], "w > 6"),
        (["s"], "id >= 1500 AND id < 7500"),
        ([], None),
        ([], "w = 2"),
    ]:
        want = lh.read("s.t", columns=columns, where=where)
        reader = lh.scan_batches("s.t", columns=columns, where=where)
        got = reader.read_all()
        assert got.schema == want.schema
        assert got.num_rows == want.num_rows
        if columns != []:  # read puts inline files last; the stream goes file by file
            keys = [(n, "ascending") for n in want.column_names]
            assert got.sort_by(keys).equals(want.sort_by(keys)), (columns, where)


def test_streaming_reads_each_part_once(lh, monkeypatch):
    """A file is decoded by parts: the stream takes its batches before the file ends."""
    from lakehouse.data import files as datafiles

    monkeypatch.setattr(datafiles, "STREAM_BATCH_ROWS", 1000)
    with lh.begin() as txn:
        txn.create_namespace("s")
        txn.create_table("s.t", chunk(1, 0, 0).schema)
    lh.append("s.t", chunk(20_000, 0, 1))  # above inline.max_rows: a stored file
    reader = lh.scan_batches("s.t")
    sizes = [b.num_rows for b in reader]
    assert sizes == [1000] * 20
