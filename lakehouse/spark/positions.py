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
from pyroaring import BitMap
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.spark.jobs import spark_job
from lakehouse.spark.reader import FILE_COL, ROW_COL

#: positions per bucket: Spark's fixed bitmap size (``bitmap_construct_agg``)
BUCKET_BITS = 32_768
_BUCKET = "_lh_bucket"
_BITS = "_lh_bits"
#: bucket rows decoded at once on the driver (~64 x 32 KiB of unpacked bits)
_CHUNK = 64


def bitmap_frame(frame: DataFrame) -> DataFrame:
    """``frame``'s ``(_lh_file, _lh_row)`` pairs as one row per (file, bucket):
    ``_lh_file``, ``_lh_bucket`` (from 1), ``_lh_bits`` (4,096 bytes)."""
    shifted = F.col(ROW_COL) + F.lit(1)
    return frame.groupBy(F.col(FILE_COL), F.bitmap_bucket_number(shifted).alias(_BUCKET)).agg(
        F.bitmap_construct_agg(F.bitmap_bit_position(shifted)).alias(_BITS)
    )


def collect_bitmaps(frame: DataFrame, by_name: dict[str, str], what: str) -> dict[str, BitMap]:
    """Run one job over ``frame`` (columns ``_lh_file`` and ``_lh_row``) and return
    its positions as ``{data file path: BitMap}`` (``by_name``: base name -> path);
    the driver holds one small row per (file, bucket), never one per position."""
    with spark_job(what):
        got = bitmap_frame(frame.select(FILE_COL, ROW_COL)).toArrow()
    return bitmaps_of(got, by_name)


def bitmaps_of(got: pa.Table, by_name: dict[str, str]) -> dict[str, BitMap]:
    """Rows of :func:`bitmap_frame` as ``{path: BitMap}``."""
    out: dict[str, BitMap] = {}
    if not got.num_rows:
        return out
    for name, positions in _positions(got):
        path = by_name[name]
        bm = out.get(path)
        add = BitMap(array.array("I", positions.astype(np.uint32).tobytes()))
        out[path] = add if bm is None else bm | add
    return out


def _positions(got: pa.Table) -> Iterator[tuple[str, np.ndarray]]:
    """(file name, positions) per chunk of bucket rows, decoded in numpy."""
    names = got.column(FILE_COL).to_pylist()
    buckets = got.column(_BUCKET).to_numpy()
    bits = got.column(_BITS)
    for lo in range(0, got.num_rows, _CHUNK):
        hi = min(lo + _CHUNK, got.num_rows)
        raw = b"".join(bits.slice(lo, hi - lo).to_pylist())
        width = BUCKET_BITS // 8
        if len(raw) != width * (hi - lo):
            raise RuntimeError("Spark returned a bitmap of an unexpected size")
        dense = np.unpackbits(
            np.frombuffer(raw, np.uint8).reshape(hi - lo, width), axis=1, bitorder="little"
        )
        row, bit = np.nonzero(dense)
        pos = (buckets[lo:hi][row] - 1) * BUCKET_BITS + bit
        chunk_names = names[lo:hi]
        # rows of one file are usually adjacent: cut where the name changes
        owner = np.asarray([chunk_names[r] for r in range(hi - lo)], dtype=object)[row]
        if len(owner) == 0:
            continue
        cuts = np.flatnonzero(owner[1:] != owner[:-1]) + 1
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(owner)]):
            yield str(owner[a]), pos[a:b]
