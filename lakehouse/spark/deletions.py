"""Deletion vectors applied in Spark's JVM Parquet scan, in the cheapest form for their shape.

Spark's Parquet reader knows each row's file (``_metadata.file_size`` or
``_metadata.file_name``) and position (``_metadata.row_index``, exact per
file whatever the row groups). A scan of files with deletions carries two
hidden columns, a *file key* and the *row index*, and drops deleted rows in
one of two ways, chosen per scan group from the deletion vectors alone:

* **Few ranges** (at most :data:`RANGES_MAX` runs of consecutive deleted
  positions over the group: a deleted key range of a sorted table, a file's
  head or tail): a filter ``NOT (key = k1 AND row BETWEEN a AND b OR ...)``,
  evaluated in Spark's generated code, no join, nothing broadcast.
* **Many scattered rows**: a broadcast left-anti join with a small relation
  of one row per (file, bucket of 65,536 positions) holding a deletion
  bucket as a dense bitmap (``array<bigint>``, 1,024 words, 8 KiB). The join
  matches the row's (file key, ``row >> 16``) and its condition tests the
  row's bit::

      rows (key, row) ── broadcast hash join on (key, row >> 16) ── left anti ─▶ live rows
                                         └─ condition: bit (row & 65535) of bits is set

  The relation is ``rows / 8`` bytes at most (a bit per position of the
  buckets that have deletions) whatever the number deleted: 3M rows with
  10% scattered deleted give 46 rows (380 KiB), where one row per deleted
  position gave 300,000 (and 0.2-0.3 s of ``createDataFrame`` per read).
  With file sizes as the key (local files of distinct sizes) both join keys
  are ints, which Spark packs into one long: the probe is one lookup in a
  hash table of a few dozen entries, resident in cache.

The relation is a ``LocalRelation`` (built from Arrow on the driver, so the
broadcast needs no job) and is kept per Spark session for the last few
deletion states it was built for (keyed by the files and a digest of their
deletion vectors): reading one table version again, or a later version
that did not change these files' deletions, reuses it.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

#: runs of consecutive deleted positions in one scan group up to which a filter is
#: used instead of the bitmap join (each run is two comparisons per row read)
RANGES_MAX = 32
#: log2 of the positions per bitmap bucket (65,536: a roaring container)
BUCKET_SHIFT = 16
_WORDS = (1 << BUCKET_SHIFT) // 64

#: the hidden columns a scan with deletions carries (file key, row index)
KEY = "_lh_dkey"
ROW = "_lh_drow"
_BKEY = "_lh_bkey"
_BUCKET = "_lh_bucket"
_BITS = "_lh_bits"
#: relations kept (per process; an entry serves the session that built it)
_CACHE_SIZE = 8
_cache: OrderedDict[bytes, tuple[SparkSession, DataFrame]] = OrderedDict()
_lock = threading.Lock()


def positions_of(deleted: Any) -> np.ndarray:
    """A deletion vector's positions (sorted) as int64, without a Python loop."""
    return np.frombuffer(deleted.to_array(), dtype=np.uint32).astype(np.int64)


def runs(pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique positions as runs of consecutive ones: (firsts, lasts)."""
    if not len(pos):
        return pos, pos
    cut = np.flatnonzero(np.diff(pos) != 1) + 1
    return pos[np.r_[0, cut]], pos[np.r_[cut - 1, len(pos) - 1]]


def drop_deleted(
    spark: SparkSession, frame: DataFrame, files: Sequence[Any], keys: Sequence[Any]
) -> DataFrame:
    """``frame`` (one scan of ``files``, with :data:`KEY` and :data:`ROW`) without
    the rows the files' deletion vectors name; ``keys``: each file's key value (its
    size, an int, or its base name) as :data:`KEY` holds it. The helper columns are
    dropped from the result."""
    # runs counted by roaring itself (positions not followed by their predecessor)
    n_runs = sum(
        len(f.deleted) - f.deleted.intersection_cardinality(f.deleted.shift(1)) for f in files
    )
    if n_runs <= RANGES_MAX:
        spans = [runs(positions_of(f.deleted)) for f in files]
        return frame.where(F.expr(f"NOT ({_in_ranges(keys, spans)})")).drop(KEY, ROW)
    rel = _relation(spark, files, keys)
    # one SQL string: each Column operator would be a call into the JVM
    mask = (1 << BUCKET_SHIFT) - 1
    cond = F.expr(
        f"{KEY} = {_BKEY} AND int(shiftright({ROW}, {BUCKET_SHIFT})) = {_BUCKET} AND "
        f"shiftright(element_at({_BITS}, int(shiftright({ROW} & {mask}, 6)) + 1), "
        f"int({ROW} & 63)) & 1 = 1"
    )
    return frame.join(F.broadcast(rel), cond, "left_anti").drop(KEY, ROW)


def _sql_literal(v: Any) -> str:
    from lakehouse.data.sql import string_literal  # loads sqlglot: only when needed

    return str(int(v)) if isinstance(v, int) else string_literal(str(v))


def _in_ranges(keys: Sequence[Any], spans: list[tuple[np.ndarray, np.ndarray]]) -> str:
    """SQL: the row is in one of the files' deleted runs."""
    terms = []
    for key, (lo, hi) in zip(keys, spans):
        if not len(lo):
            continue
        rows = " OR ".join(
            f"{ROW} = {a}" if a == b else f"{ROW} BETWEEN {a} AND {b}"
            for a, b in zip(lo.tolist(), hi.tolist())
        )
        terms.append(f"({KEY} = {_sql_literal(key)} AND ({rows}))")
    return " OR ".join(terms) or "false"


def _relation(spark: SparkSession, files: Sequence[Any], keys: Sequence[Any]) -> DataFrame:
    """The (key, bucket, bits) relation of ``files``' deletions, from the cache when
    the same deletions were read before in this session."""
    digest = hashlib.blake2b(digest_size=16)
    for f, k in zip(files, keys):
        digest.update(f"{f.path}\0{k}\0".encode())
        digest.update(f.deleted.serialize())
    ck = digest.digest()
    with _lock:
        hit = _cache.get(ck)
        if hit is not None and hit[0] is spark:  # a relation belongs to its session
            _cache.move_to_end(ck)
            return hit[1]
    rel = spark.createDataFrame(_bitmaps(keys, [f.deleted for f in files]))
    with _lock:
        _cache[ck] = (spark, rel)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return rel


def _bitmaps(keys: Sequence[Any], vectors: Sequence[Any]) -> pa.Table:
    """One row per (file, bucket with deletions): key, bucket, 1,024 words of bits;
    ``vectors``: each file's deletion vector (a BitMap), decoded one at a time so the
    driver holds one file's positions beside the result (at most a bit per row)."""
    out_keys: list[Any] = []
    buckets: list[np.ndarray] = []
    words: list[np.ndarray] = []
    for key, vector in zip(keys, vectors):
        if not vector:
            continue
        pos = positions_of(vector)
        b = pos >> BUCKET_SHIFT
        ub = np.unique(b)
        # slot of each position's word in its file's dense block (positions are sorted
        # and unique, so the bits of one word are distinct powers: their sum is their OR)
        bucket_idx = np.searchsorted(ub, b)
        slot = bucket_idx * _WORDS + ((pos & ((1 << BUCKET_SHIFT) - 1)) >> 6)
        bits = np.left_shift(np.uint64(1), (pos & 63).astype(np.uint64))
        dense = np.zeros(len(ub) * _WORDS, dtype=np.uint64)
        starts = np.flatnonzero(np.r_[True, slot[1:] != slot[:-1]])
        dense[slot[starts]] = np.add.reduceat(bits, starts)
        out_keys.extend([key] * len(ub))
        buckets.append(ub.astype(np.int32))
        words.append(dense.view(np.int64))
    n = len(out_keys)
    flat = np.concatenate(words) if words else np.zeros(0, np.int64)
    key_type = pa.int32() if n and isinstance(out_keys[0], int) else pa.string()
    return pa.table(
        {
            _BKEY: pa.array(out_keys, key_type),
            _BUCKET: pa.array(np.concatenate(buckets) if buckets else np.zeros(0, np.int32)),
            _BITS: pa.ListArray.from_arrays(
                pa.array(np.arange(0, (n + 1) * _WORDS, _WORDS, dtype=np.int32)), pa.array(flat)
            ),
        }
    )
