"""The deletion relation of lakehouse.spark.deletions, decoded back on the driver.

The Spark side (the filter and the anti-join reading exactly the live rows)
is tested in test_spark_dv_shapes.py; here the numpy encoding is checked
against the positions it encodes, bit by bit, without Spark.
"""

from __future__ import annotations

import numpy as np
import pytest
from pyroaring import BitMap

pytest.importorskip("pyspark")

from lakehouse.spark import deletions


def _decode(rel, key):
    """Positions of ``key`` in a relation table (the inverse of _bitmaps)."""
    out = []
    for k, b, words in zip(
        rel.column("_lh_bkey").to_pylist(),
        rel.column("_lh_bucket").to_pylist(),
        rel.column("_lh_bits").to_pylist(),
    ):
        if k != key:
            continue
        assert len(words) == 1024
        bits = np.unpackbits(np.asarray(words, dtype=np.int64).view(np.uint8), bitorder="little")
        out.append((b << 16) + np.flatnonzero(bits))
    return np.sort(np.concatenate(out)) if out else np.zeros(0, np.int64)


CASES = {
    "one": [0],
    "edges": [0, 63, 64, 65535, 65536, 131071, 131072],
    "word": list(range(64, 128)),
    "every_7th": list(range(0, 300_000, 7)),
    "sign_bit": [63, 127, 65535],
    "random": sorted(np.random.default_rng(3).choice(1_000_000, 50_000, replace=False).tolist()),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bitmaps_encode_exactly_the_positions(name):
    pos = CASES[name]
    bm = BitMap(pos)
    other = BitMap([5, 70_000])
    rel = deletions._bitmaps([11, 12], [bm, other])
    assert np.array_equal(_decode(rel, 11), np.asarray(pos))
    assert np.array_equal(_decode(rel, 12), np.asarray([5, 70_000]))
    # one row per bucket with deletions, no more
    assert rel.num_rows == len({p >> 16 for p in pos}) + 2


def test_bitmaps_with_name_keys_and_empty_files():
    rel = deletions._bitmaps(["a.parquet", "b.parquet"], [BitMap(), BitMap([3, 4])])
    assert rel.column("_lh_bkey").to_pylist() == ["b.parquet"]
    assert np.array_equal(_decode(rel, "b.parquet"), [3, 4])


@pytest.mark.parametrize(
    ("pos", "firsts", "lasts"),
    [
        ([], [], []),
        ([5], [5], [5]),
        ([1, 2, 3, 7, 9, 10], [1, 7, 9], [3, 7, 10]),
        ([0, 65535, 65536], [0, 65535], [0, 65536]),
    ],
)
def test_runs(pos, firsts, lasts):
    lo, hi = deletions.runs(np.asarray(pos, dtype=np.int64))
    assert lo.tolist() == firsts and hi.tolist() == lasts


def test_range_condition_quotes_names():
    spans = [deletions.runs(np.asarray([1, 2, 5], np.int64))]
    sql = deletions._in_ranges(["it's.parquet"], spans)
    assert "'it''s.parquet'" in sql
    assert "BETWEEN 1 AND 2" in sql and "= 5" in sql
