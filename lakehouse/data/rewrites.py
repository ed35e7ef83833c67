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
it is stored in the version record, not recomputed. ``order`` is empty
when output row ``j`` is input row ``j`` (no sort keys, or rows already in
order); otherwise it is the permutation, encoded as::

    byte 0    format (1)
    byte 1    width of the deltas: 1, 2, 4 or 8 bytes
    rest      zlib of the deltas (little-endian signed): order[j] - order[j-1] - 1
              (order[-1] = -1), so runs that keep their input order are zeros

Measured (docs/lakehouse.md, "Compaction and clustering"): 1M rows from files
that each hold a sorted range of the keys encode to a few hundred bytes;
1M rows of 100 files with random keys interleaved, ~1.3 bytes per row.

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

FORMAT = 1


# -- the permutation --------------------------------------------------------------------
def encode_order(order: np.ndarray) -> bytes:
    """``order`` (output row -> input row) encoded; ``b""`` for the identity."""
    order = np.asarray(order, dtype=np.int64)
    deltas = np.diff(order, prepend=-1) - 1
    if not deltas.any():
        return b""
    lo, hi = int(deltas.min()), int(deltas.max())
    width = next(w for w in (1, 2, 4, 8) if -(1 << (8 * w - 1)) <= lo and hi < 1 << (8 * w - 1))
    body = deltas.astype(f"<i{width}").tobytes()
    return bytes([FORMAT, width]) + zlib.compress(body, 6)


@functools.lru_cache(maxsize=64)
def decode_order(raw: bytes) -> np.ndarray:
    """The permutation ``raw`` encodes (read-only; ValueError if malformed)."""
    if len(raw) < 2 or raw[0] != FORMAT or raw[1] not in (1, 2, 4, 8):
        raise ValueError("bad rewrite order header")
    try:
        body = zlib.decompress(raw[2:])
    except zlib.error as exc:
        raise ValueError(f"bad rewrite order: {exc}") from None
    if len(body) % raw[1]:
        raise ValueError("bad rewrite order length")
    order = np.cumsum(np.frombuffer(body, dtype=f"<i{raw[1]}").astype(np.int64) + 1) - 1
    if len(order) and (
        order.min() < 0 or len(np.unique(order)) != len(order) or order.max() >= len(order)
    ):
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
