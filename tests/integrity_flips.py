"""Bit flips in Parquet data files, by region (shared by the integrity tests).

A file's bytes are split into the regions a reader trusts differently:
dictionary pages, data pages (headers included), the footer (Thrift
FileMetaData) and the rest (the leading and trailing ``PAR1``, the footer
length, page indexes between the last row group and the footer).
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REGIONS = ("dictionary", "data", "footer", "other")


def regions(data: bytes) -> dict[str, list[tuple[int, int]]]:
    """Byte ranges ``[start, end)`` of each region of the Parquet file ``data``."""
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    flen = int.from_bytes(data[-8:-4], "little")
    footer = (len(data) - 8 - flen, len(data) - 8)
    out: dict[str, list[tuple[int, int]]] = {r: [] for r in REGIONS}
    covered: list[tuple[int, int]] = [footer]
    for rg in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            col = meta.row_group(rg).column(c)
            end = (
                col.dictionary_page_offset
                if col.has_dictionary_page and col.dictionary_page_offset is not None
                else col.data_page_offset
            ) + col.total_compressed_size
            if col.has_dictionary_page and col.dictionary_page_offset is not None:
                out["dictionary"].append((col.dictionary_page_offset, col.data_page_offset))
                covered.append((col.dictionary_page_offset, col.data_page_offset))
            out["data"].append((col.data_page_offset, end))
            covered.append((col.data_page_offset, end))
    out["footer"].append(footer)
    pos = 0
    for start, end in sorted(covered):
        if start > pos:
            out["other"].append((pos, start))
        pos = max(pos, end)
    if pos < len(data):
        out["other"].append((pos, len(data)))
    return {r: [(a, b) for a, b in spans if b > a] for r, spans in out.items()}


def pick(rng: random.Random, spans: list[tuple[int, int]]) -> int:
    """A byte offset uniformly inside ``spans``."""
    total = sum(b - a for a, b in spans)
    k = rng.randrange(total)
    for a, b in spans:
        if k < b - a:
            return a + k
        k -= b - a
    raise AssertionError("unreachable")


def flips(
    rng: random.Random, files: dict[Path, bytes], per_region: int
) -> list[tuple[Path, str, int, int]]:
    """``per_region`` flips ``(file, region, byte offset, bit)`` of each region that
    exists in ``files``, spread over the files that have it."""
    out = []
    by_region: dict[str, list[tuple[Path, list[tuple[int, int]]]]] = {r: [] for r in REGIONS}
    for path, data in files.items():
        for r, spans in regions(data).items():
            if spans:
                by_region[r].append((path, spans))
    for r, holders in by_region.items():
        for k in range(per_region if holders else 0):
            path, spans = holders[k % len(holders)]
            out.append((path, r, pick(rng, spans), rng.randrange(8)))
    rng.shuffle(out)
    return out


def flipped(data: bytes, offset: int, bit: int) -> bytes:
    b = bytearray(data)
    b[offset] ^= 1 << bit
    return bytes(b)
