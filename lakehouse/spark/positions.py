"""Row positions found by executors, returned to the driver as bitmaps per file.

A delete or an update finds its rows in a Spark job over the table's rows
with ``_lh_file`` (the data file's base name) and ``_lh_row`` (the row's
position in it). The positions do not come back one row each: executors
group them by file and by *bucket* of 32,768 positions and fold each group
into a 4 KiB bitmap with Spark's own ``bitmap_construct_agg`` (partial
aggregation before the shuffle, so a task sends one bitmap per bucket it
touched). The driver receives one row per (file, bucket) — at most
``rows / 32,768`` rows of 4 KiB, whatever fraction of the rows matched —
and turns each into positions with numpy and each file's into a roaring
bitmap without a Python step per position::

    executors: rows ── where(cond) ── (file, bucket, bit) ── bitmap_construct_agg
    driver:    one 4 KiB bitmap per (file, bucket) ── numpy ── BitMap per file

Spark's bucket numbers start at 1 for positive values, so the job feeds it
``_lh_row + 1`` (bucket ``b``, bit ``i`` is position ``(b - 1) * 32768 + i``).
"""

from __future__ import annotations

import array
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.spark.jobs import spark_job
from lakehouse.spark.reader import FILE_COL, ROW_COL

#: positions per bucket: Spark's fixed bitmap size (``bitmap_construct_agg``)
BUCKET_BITS = 32_768
_BUCKET = "_lh_bucket"
_BITS = "_lh_bits"
#: bucket rows decoded at once on the driver: 8 x 32 KiB of unpacked bits and at
#: most 8 x 32,768 positions (a few MB of int64 temporaries however dense the rows)
_CHUNK = 8


def bitmap_frame(frame: DataFrame) -> DataFrame:
    """``frame``'s ``(_lh_file, _lh_row)`` pairs as one row per (file, bucket):
    ``_lh_file``, ``_lh_bucket`` (from 1), ``_lh_bits`` (4,096 bytes)."""
    # SQL strings: each Column operator would be one more call into the JVM
    return frame.groupBy(
        F.col(FILE_COL), F.expr(f"bitmap_bucket_number({ROW_COL} + 1) AS {_BUCKET}")
    ).agg(F.expr(f"bitmap_construct_agg(bitmap_bit_position({ROW_COL} + 1)) AS {_BITS}"))


def collect_bitmaps(frame: DataFrame, by_name: dict[str, str], what: str) -> dict[str, BitMap]:
    """Run one job over ``frame`` (columns ``_lh_file`` and ``_lh_row``) and return
    its positions as ``{data file path: BitMap}`` (``by_name``: base name -> path);
    the driver holds one small row per (file, bucket), never one per position."""
    with spark_job(what):
        # one final task: the result is at most a row per 32,768 rows (measured: ~20%
        # of the job's time went to scheduling the default shuffle partitions)
        got = bitmap_frame(frame.select(FILE_COL, ROW_COL)).coalesce(1).toArrow()
    return bitmaps_of(got, by_name)


def bitmaps_of(got: pa.Table, by_name: dict[str, str]) -> dict[str, BitMap]:
    """Rows of :func:`bitmap_frame` as ``{path: BitMap}``."""
    out: dict[str, BitMap] = {}
    for name, positions in _positions(got):
        path = by_name[name]
        add = BitMap(array.array("I", positions.astype(np.uint32).tobytes()))
        bm = out.get(path)
        if bm is None:
            out[path] = add
        else:
            bm |= add
    return out


def _positions(got: pa.Table) -> Iterator[tuple[str, np.ndarray]]:
    """(file name, positions) per run of one file's bucket rows in a chunk, decoded
    in numpy. Rows are taken in (file, bucket) order, so a file's buckets are
    adjacent; the driver's extra memory is one chunk's, not the table's."""
    if not got.num_rows:
        return
    order = pc.sort_indices(got, [(FILE_COL, "ascending"), (_BUCKET, "ascending")])
    names = got.column(FILE_COL).take(order).to_pylist()
    buckets = got.column(_BUCKET).take(order).to_numpy()
    width = BUCKET_BITS // 8
    shift = BUCKET_BITS.bit_length() - 1  # bit i of chunk row r is flat index r * 32768 + i
    for lo in range(0, got.num_rows, _CHUNK):
        hi = min(lo + _CHUNK, got.num_rows)
        raw = b"".join(got.column(_BITS).take(order[lo:hi]).to_pylist())
        if len(raw) != width * (hi - lo):
            raise RuntimeError("Spark returned a bitmap of an unexpected size")
        flat = np.flatnonzero(np.unpackbits(np.frombuffer(raw, np.uint8), bitorder="little"))
        row = flat >> shift
        flat &= BUCKET_BITS - 1
        flat += ((buckets[lo:hi] - 1) * BUCKET_BITS)[row]  # now positions in the file
        start = lo
        for r in range(lo + 1, hi + 1):
            if r < hi and names[r] == names[start]:
                continue
            a, b = np.searchsorted(row, [start - lo, r - lo])
            if b > a:
                yield names[start], flat[a:b]
            start = r
