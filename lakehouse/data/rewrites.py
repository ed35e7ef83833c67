"""Where a compaction put each row it moved (:class:`~lakehouse.model.Rewrite`).

A compaction reads the rows of its sources that are live when it is planned
(the *input*: source after source, each in position order), optionally sorts
them by the table's sort keys (clustering), and writes them as one or more
files (the *output*: file after file)::

    sources   a: 0 1 2 3 (2 deleted)   b: 0 1 2
    input        0 1 . 2                  3 4 5        (live rows, numbered)
    order     [3, 0, 4, 1, 5, 2]                       (sorted by the sort keys)
    outputs   x: 0 1 2                 y: 0 1 2
              (=input 3 0 4)              (=input 1 5 2)

Concurrent deletes of moved rows follow them through this map, in either
commit order (:mod:`lakehouse.data.rebase_head`), so the map must be exact:
it is stored in the version record, not recomputed (recomputing it would
need the sources' bytes at every rebase, and the exact same sort). ``order``
is empty when output row ``j`` is input row ``j`` (no sort keys, or rows
already in order); otherwise it is the permutation in the smaller of two
encodings::

    byte 0    1: deltas                          2: merge
    byte 1    width: 1, 2, 4 or 8 bytes          width: 1 or 2 bytes
    rest      zlib of order[j] - order[j-1] - 1  zlib of the source of each
              (order[-1] = -1; little-endian     output row (when every source
              signed): rows that keep their      keeps its own row order, as a
              input order are zeros              stable sort of sorted files does)

Measured for 1M rows (docs/lakehouse.md, "Compaction and clustering"): from
100 files each holding a sorted range of the keys, 1.2 KB; from 100 (10,000)
sorted files of random keys, 0.84 (1.84) bytes per row (merge); from
unsorted files of random keys, 3.3 bytes per row (deltas).

All functions here are pure and work on positions as :class:`BitMap` values.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Iterable

import numpy as np
from pyroaring import AbstractBitMap, BitMap

from lakehouse.data import dv as dvfmt
from lakehouse.model import Rewrite

#: the two encodings of ``order`` (its first byte)
DELTAS, MERGE = 1, 2


# -- the permutation --------------------------------------------------------------------
def encode_order(order: np.ndarray, sizes: Iterable[int] | None = None) -> bytes:
    """``order`` (output row -> input row) encoded; ``b""`` for the identity.
    ``sizes``: live rows per source (the input, source after source), which lets a
    merge of sorted sources be stored as one source number per row."""
    order = np.asarray(order, dtype=np.int64)
    deltas = np.diff(order, prepend=-1) - 1
    if not deltas.any():
        return b""
    best = _deltas(deltas)
    if sizes is not None:
        merged = _merge(order, list(sizes))
        if merged is not None and len(merged) < len(best):
            best = merged
    return best


def _deltas(deltas: np.ndarray) -> bytes:
    lo, hi = int(deltas.min()), int(deltas.max())
    width = next(w for w in (1, 2, 4, 8) if -(1 << (8 * w - 1)) <= lo and hi < 1 << (8 * w - 1))
    return bytes([DELTAS, width]) + zlib.compress(deltas.astype(f"<i{width}").tobytes(), 6)


def _merge(order: np.ndarray, sizes: list[int]) -> bytes | None:
    """The source of each output row, when every source's rows keep their order
    (a stable sort of sources that were each sorted already); None otherwise."""
    if len(sizes) > 1 << 16 or sum(sizes) != len(order):
        return None
    source = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)[order]
    if not np.array_equal(_from_sources(source), order):
        return None
    width = 1 if len(sizes) <= 256 else 2
    return bytes([MERGE, width]) + zlib.compress(source.astype(f"<u{width}").tobytes(), 6)


def _from_sources(source: np.ndarray) -> np.ndarray:
    order = np.empty(len(source), dtype=np.int64)
    order[np.argsort(source, kind="stable")] = np.arange(len(source), dtype=np.int64)
    return order


@functools.lru_cache(maxsize=64)
def decode_order(raw: bytes) -> np.ndarray:
    """The permutation ``raw`` encodes (read-only; ValueError if malformed)."""
    if len(raw) < 2 or raw[0] not in (DELTAS, MERGE) or raw[1] not in (1, 2, 4, 8):
        raise ValueError("bad rewrite order header")
    try:
        body = zlib.decompress(raw[2:])
    except zlib.error as exc:
        raise ValueError(f"bad rewrite order: {exc}") from None
    if len(body) % raw[1]:
        raise ValueError("bad rewrite order length")
    if raw[0] == MERGE:
        order = _from_sources(np.frombuffer(body, dtype=f"<u{raw[1]}").astype(np.int64))
    else:
        order = np.cumsum(np.frombuffer(body, dtype=f"<i{raw[1]}").astype(np.int64) + 1) - 1
    n = len(order)
    if n and (order.min() < 0 or order.max() >= n or np.bincount(order, minlength=n).max() > 1):
        raise ValueError("rewrite order is not a permutation")
    order.setflags(write=False)
    return order


@functools.lru_cache(maxsize=64)
def _inverse(raw: bytes) -> np.ndarray:
    order = decode_order(raw)
    inv = np.empty_like(order)
    inv[order] = np.arange(len(order), dtype=np.int64)
    inv.setflags(write=False)
    return inv


# -- the shape of a rewrite -------------------------------------------------------------
def outputs(r: Rewrite) -> tuple[tuple[str, int], ...]:
    """The files ``r`` wrote, with their row counts, in output order."""
    if r.outputs:
        return r.outputs
    if not r.new_id:
        return ()
    return ((r.new_id, sum(n - len(dvfmt.decode(raw)) for _, n, raw in r.sources)),)


def output_ids(rewrites: Iterable[Rewrite]) -> set[str]:
    """The files ``rewrites`` wrote."""
    return {fid for r in rewrites for fid, _ in outputs(r)}


def compacted_by(rewrites: Iterable[Rewrite]) -> set[str]:
    """The files ``rewrites`` consumed."""
    return {fid for r in rewrites for fid, _, _ in r.sources}


def _live(rows: int, raw: bytes) -> np.ndarray:
    dv = dvfmt.decode(raw)
    if not dv:
        return np.arange(rows, dtype=np.int64)
    return np.frombuffer((BitMap(range(rows)) - dv).to_array(), dtype=np.uint32).astype(np.int64)


def _array(positions: AbstractBitMap) -> np.ndarray:
    return np.frombuffer(BitMap(positions).to_array(), dtype=np.uint32).astype(np.int64)


def _bitmap(values: np.ndarray) -> BitMap:
    return BitMap(np.asarray(values, dtype=np.uint32))


# -- positions through a rewrite ----------------------------------------------------------
def translate(r: Rewrite, src: str, positions: AbstractBitMap) -> BitMap:
    """Positions of source ``src`` of ``r`` in its output (counted across its output
    files; see :func:`place`). Rows deleted when ``r`` was planned have none."""
    offset = 0
    for fid, rows, raw in r.sources:
        live = _live(rows, raw)
        if fid == src:
            pos = _array(positions)
            idx = np.searchsorted(live, pos)
            ok = idx < len(live)
            ok[ok] = live[idx[ok]] == pos[ok]
            got = idx[ok] + offset
            if r.order:
                got = _inverse(r.order)[got]
            return _bitmap(got)
        offset += len(live)
    raise KeyError(src)


def untranslate(r: Rewrite, positions: AbstractBitMap) -> dict[str, BitMap]:
    """Where output positions of ``r`` (counted across its files) came from:
    ``{source: positions}``."""
    got = _array(positions)
    if r.order:
        got = decode_order(r.order)[got]
    out: dict[str, BitMap] = {}
    offset = 0
    for fid, rows, raw in r.sources:
        live = _live(rows, raw)
        mine = got[(got >= offset) & (got < offset + len(live))] - offset
        if len(mine):
            out[fid] = _bitmap(live[mine])
        offset += len(live)
    return out


def place(r: Rewrite, positions: AbstractBitMap) -> dict[str, BitMap]:
    """Output positions of ``r`` (counted across its files) by output file:
    ``{file id: positions in it}`` (files without any left out)."""
    out: dict[str, BitMap] = {}
    files = outputs(r)
    if len(files) == 1:
        return {files[0][0]: BitMap(positions)} if positions else {}
    pos = _array(positions)
    offset = 0
    for fid, n in files:
        mine = pos[(pos >= offset) & (pos < offset + n)] - offset
        if len(mine):
            out[fid] = _bitmap(mine)
        offset += n
    return out


def gather(r: Rewrite, fid: str, positions: AbstractBitMap) -> BitMap:
    """Positions of ``r``'s output file ``fid``, counted across its files."""
    offset = 0
    for out, n in outputs(r):
        if out == fid:
            return _bitmap(_array(positions) + offset)
        offset += n
    raise KeyError(fid)
