"""Deletion vectors: the deleted row positions of one data file.

A delete or an update does not rewrite a Parquet data file; it records the
positions (0-based row numbers within the file) of the rows it removed in a
*deletion vector*, a set of 32-bit positions held in a Roaring bitmap
(``pyroaring.BitMap``). A reader drops those rows; compaction eventually
rewrites the file without them. Two transactions that delete disjoint rows of
one file both commit: their vectors are merged with a union.

A deletion vector is stored as one kvstore value (and inside version
records), encoded by this module and only this module::

    offset  size  field
    ------  ----  -----------------------------------------------------------
         0     4  magic         b"LKDV"
         4     1  version       1
         5     8  cardinality   u64 LE: the number of positions (0 .. 2**32)
        13     4  crc32c        u32 LE: crc32c of bytes 0..12, then of the payload
        17     n  payload       the bitmap in the portable Roaring format
                                (pyroaring ``BitMap.serialize()``)

    +------+---+-------------+--------+--------------------------------+
    | LKDV | 1 | cardinality | crc32c | portable Roaring bitmap ...    |
    +------+---+-------------+--------+--------------------------------+
    0      4   5             13       17                          17 + n

Rules:

* The checksum covers the whole value but itself: magic, version,
  cardinality and payload. Any flipped bit is reported.
* A vector is written whole (a kvstore value, or one field of a version
  record) and never appended to, so there is no torn tail: bytes missing or
  left over after the bitmap are corruption, not a cut to recover from.
* :func:`encode` run-optimizes a copy of the set first (a range of deleted
  rows costs a few bytes), so equal sets written by this module encode to
  equal bytes; :func:`decode` accepts any valid portable bitmap.
* :func:`decode` raises :class:`~lakehouse.errors.CorruptionError` and
  nothing else for malformed input: short value, wrong magic, unknown
  version, bad checksum, a payload the Roaring decoder refuses (or that it
  reads without using every byte), or a cardinality that disagrees with the
  bitmap. An unknown version is refused rather than guessed at; a future
  format change bumps it.
* Positions are unsigned 32-bit integers: a data file holds fewer than
  ``2**32`` rows (writers split larger files).
"""

from __future__ import annotations

import array
import operator
import struct
from collections.abc import Iterable
from typing import Any, SupportsIndex

import numpy as np
import pyarrow as pa
from crc32c import crc32c
from pyroaring import AbstractBitMap, BitMap

from lakehouse.errors import CorruptionError

MAGIC = b"LKDV"
VERSION = 1
HEADER = struct.Struct("<4sBQ")  # magic, version, cardinality: what the crc covers first
_CRC = struct.Struct("<I")
HEADER_SIZE = HEADER.size + _CRC.size  # 17
MAX_POSITION = (1 << 32) - 1

__all__ = ["HEADER_SIZE", "MAGIC", "MAX_POSITION", "VERSION", "decode", "encode", "from_positions"]


def encode(positions: AbstractBitMap) -> bytes:
    """The stored form of a set of deleted row positions (see the module docstring)."""
    if not isinstance(positions, AbstractBitMap):
        raise TypeError(
            f"positions must be a pyroaring BitMap, not {type(positions).__name__}"
            " (use lakehouse.data.dv.from_positions)"
        )
    bitmap = BitMap(positions)
    bitmap.run_optimize()
    payload = bitmap.serialize()
    head = HEADER.pack(MAGIC, VERSION, len(bitmap))
    return b"".join((head, _CRC.pack(crc32c(payload, crc32c(head))), payload))


def decode(data: bytes | bytearray | memoryview) -> BitMap:
    """The positions stored by :func:`encode`; :class:`CorruptionError` if ``data`` is malformed."""
    view = memoryview(data)
    if len(view) < HEADER_SIZE:
        raise CorruptionError(
            f"deletion vector: {len(view)} bytes, shorter than its {HEADER_SIZE}-byte header"
        )
    magic, version, cardinality = HEADER.unpack_from(view, 0)
    if magic != MAGIC:
        raise CorruptionError(f"deletion vector: bad magic {bytes(magic)!r} (expected {MAGIC!r})")
    if version != VERSION:
        raise CorruptionError(
            f"deletion vector: unknown format version {version} (this code reads {VERSION})"
        )
    (stored_crc,) = _CRC.unpack_from(view, HEADER.size)
    payload = view[HEADER_SIZE:]
    actual_crc = crc32c(payload, crc32c(view[: HEADER.size]))
    if stored_crc != actual_crc:
        raise CorruptionError(
            f"deletion vector: checksum mismatch (stored {stored_crc:#010x},"
            f" computed {actual_crc:#010x})"
        )
    try:
        bitmap = BitMap.deserialize(bytes(payload))
        used = len(bitmap.serialize())
    except Exception as exc:  # pyroaring: ValueError, IndexError (empty input), ...
        raise CorruptionError(f"deletion vector: bad Roaring bitmap: {exc}") from None
    if used != len(payload):
        raise CorruptionError(
            f"deletion vector: the bitmap uses {used} of the payload's {len(payload)} bytes"
        )
    if len(bitmap) != cardinality:
        raise CorruptionError(
            f"deletion vector: header says {cardinality} positions, the bitmap holds {len(bitmap)}"
        )
    return bitmap


def from_positions(positions: Iterable[SupportsIndex]) -> BitMap:
    """A bitmap of row positions, each an integer in ``0 <= p < 2**32``.

    Raises :class:`TypeError` for a non-integer (a bool included) and
    :class:`ValueError` for one out of range, naming it.

    A bitmap is copied; a one-dimensional numpy array of any integer dtype, an
    ``array.array`` of integers and a pyarrow integer array without nulls are
    checked and converted whole (no Python step per position: ~4 ms for
    900,000 positions); anything else is read one item at a time.
    """
    if isinstance(positions, AbstractBitMap):
        return BitMap(positions)
    if isinstance(positions, (pa.Array, pa.ChunkedArray)):
        if pa.types.is_integer(positions.type) and not positions.null_count:
            return _from_ints(positions.to_numpy())
    elif isinstance(positions, (np.ndarray, array.array)):
        return _from_ints(np.asarray(positions))
    if isinstance(positions, range):
        ends = (positions[0], positions[-1]) if len(positions) else (0, 0)
        if min(ends) < 0 or max(ends) > MAX_POSITION:
            raise ValueError(f"row positions must be in 0..{MAX_POSITION}, got {positions}")
        return BitMap(positions)
    values: list[int] = []
    for item in positions:
        if type(item) is int:
            p = item
        elif isinstance(item, bool) or not hasattr(item, "__index__"):
            raise TypeError(
                f"a row position must be an integer, not {type(item).__name__}: {item!r}"
            )
        else:
            p = operator.index(item)
        if not 0 <= p <= MAX_POSITION:
            raise ValueError(f"row position {p} is out of range 0..{MAX_POSITION}")
        values.append(p)
    return BitMap(values)


def _from_ints(a: np.ndarray[Any, Any]) -> BitMap:
    """:func:`from_positions` of an array: vectorised checks, one conversion."""
    if a.ndim != 1:
        raise TypeError(f"row positions must be a 1-dimensional array, not {a.ndim}-dimensional")
    if not len(a):
        return BitMap()
    if a.dtype.kind not in "iu":
        if a.dtype.kind == "O":  # Python objects: checked one by one
            return from_positions(a.tolist())
        raise TypeError(f"a row position must be an integer, not {a.dtype}: {a[0].item()!r}")
    low, high = int(a.min()), int(a.max())
    if low < 0 or high > MAX_POSITION:
        p = int(a[np.flatnonzero((a < 0) | (a > MAX_POSITION))[0]])  # the first, as a loop would
        raise ValueError(f"row position {p} is out of range 0..{MAX_POSITION}")
    return BitMap(array.array("I", a.astype(np.uint32).tobytes()))
