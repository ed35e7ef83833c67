"""Sorted string tables: the SST file layout and its builder.

An SST is an immutable file of internal entries (:mod:`kvstore.entries`) in
internal order: key ascending, then seq descending (newest first), so the
first entry at or after ``(key, read_seq)`` is the version a read at
``read_seq`` sees. The versions of one key may span several data blocks.

File layout (all integers little-endian)::

    +----------------+----------------+-----+-------+-------+-------+--------+
    | data block 0   | data block 1   | ... | bloom | index | props | footer |
    +----------------+----------------+-----+-------+-------+-------+--------+

The blocks are contiguous and tile the file. Every one is a stored block
(body, compression byte, crc32c: :mod:`kvstore.format.block`, which also
encodes and decodes the data blocks)::

    bloom   := see kvstore/format/bloom.py                     (absent: bits_per_key 0)
    index   := n:u32  offsets: n x u64  sizes: n x u32  first_seqs: n x u64
               first_key_lens: n x u16  first keys, concatenated
               (one row per data block: where it is, its first entry)
    props   := count:u64  tombstones:u64  min_seq:u64  max_seq:u64
               first_len:u16  first_key  last_len:u16  last_key
    footer  := bloom_off:u64  bloom_len:u32  index_off:u64  index_len:u32
               props_off:u64  props_len:u32  format_version:u16  flags:u16
               crc32c(previous 40 bytes):u32  magic "KVSST\\x00\\x00\\x01"   (52 bytes)

:func:`build_sst` writes one and returns it with its :class:`SstSummary` (what
the manifest records). It cuts a data block after the entry at which the
running estimate ``sum(16 + len(key) + len(value))`` reaches ``block_bytes``;
data and index blocks are compressed with zstd when that pays (data that did
not compress in ``COMPRESS_PROBES`` blocks in a row is tried again only every
``COMPRESS_SAMPLE``-th block), bloom and props never. Entries out of internal
order, or a key longer than ``MAX_KEY_LEN``, raise ``ValueError``.

Reading is :class:`~kvstore.format.sst_reader.SstReader`, which checks the
footer (magic, crc, version, offsets that tile the file) before trusting any
of it. docs/format/sst.md has the byte layouts and every check.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate, compress, repeat
from operator import add, eq, le, ne

import zstandard
from crc32c import crc32c

from kvstore._accel import speedups as _c
from kvstore.entries import MAX_KEY_LEN, Columns, Entry
from kvstore.format import bloom as bloom_format
from kvstore.format.block import (
    COMPRESS_ZSTD,
    TRAILER,
    encode_block_columns_py,
    seal_block,
)

MAGIC = b"KVSST\x00\x00\x01"
FORMAT_VERSION = 1
FOOTER = struct.Struct("<QIQIQIHHI8s")
FOOTER_SIZE = FOOTER.size
COMPRESS_PROBES = 8
COMPRESS_SAMPLE = 16


@dataclass(frozen=True, slots=True)
class SstSummary:
    """What the manifest records about an SST."""

    count: int
    tombstones: int
    min_seq: int
    max_seq: int
    first_key: bytes
    last_key: bytes
    size: int


def build_sst(
    entries: Iterable[Entry] | Columns,
    *,
    block_bytes: int = 4096,
    bloom_bits_per_key: int = 10,
    compression: str = "zstd",
    compression_level: int = 1,
) -> tuple[bytes, SstSummary]:
    """Encode sorted internal entries as an SST; returns the bytes and a summary.

    Works on whole columns (keys, seqs, values) so the per-entry work is a
    handful of C-level passes rather than a Python loop.
    """
    if isinstance(entries, Columns):
        keys, seqs, values = entries
        if not (len(keys) == len(seqs) == len(values)):
            raise ValueError("SST columns differ in length")
    else:
        ents = entries if isinstance(entries, list) else list(entries)
        keys = [e[0] for e in ents]
        seqs = [e[1] for e in ents]
        values = [e[2] for e in ents]
    if not keys:
        raise ValueError("an SST needs at least one entry")
    n = len(keys)
    if _c is not None:  # the checks and the summary below, in one C pass
        tombstones, min_seq, max_seq, versions = _c.sst_stats(keys, seqs, values)
    else:
        if max(map(len, keys)) > MAX_KEY_LEN:
            raise ValueError(f"a key exceeds {MAX_KEY_LEN} bytes")
        if not all(map(le, keys, keys[1:])):
            raise ValueError("SST entries must be sorted by key asc, seq desc")
        same = list(map(eq, keys, keys[1:]))
        versions = any(same)
        if versions and any(seqs[i] <= seqs[i + 1] for i in compress(range(n - 1), same)):
            raise ValueError("SST entries must be sorted by key asc, seq desc")
        tombstones = values.count(None)
        min_seq, max_seq = min(seqs), max(seqs)

    compressor = (
        zstandard.ZstdCompressor(level=compression_level) if compression == "zstd" else None
    )
    blocks, starts = (
        _c.build_blocks(keys, seqs, values, block_bytes)
        if _c is not None
        else _build_blocks_py(keys, seqs, values, block_bytes)
    )
    if compressor is not None:
        # Data that did not compress in COMPRESS_PROBES blocks in a row (random
        # values, already-compressed payloads) is tried again only every
        # COMPRESS_SAMPLE-th block; one block that compresses resumes every block.
        misses = 0
        for i, sealed in enumerate(blocks):
            if misses < COMPRESS_PROBES or misses % COMPRESS_SAMPLE == 0:
                packed = seal_block(sealed[: -TRAILER.size], compressor)
                if packed[-TRAILER.size] == COMPRESS_ZSTD:
                    blocks[i] = packed
                    misses = 0
                    continue
            misses += 1
    block_sizes = list(map(len, blocks))
    offsets = list(accumulate(block_sizes, initial=0))
    offset = offsets.pop()
    first_keys = [keys[i] for i in starts]
    first_seqs = [seqs[i] for i in starts]
    out = blocks

    bloom_off = offset
    bloom_stored = b""
    if bloom_bits_per_key > 0:
        distinct = keys if not versions else list(compress(keys, map(ne, keys, [None, *keys])))
        bloom_stored = seal_block(
            bloom_format.build(distinct, len(distinct), bloom_bits_per_key), None
        )
    out.append(bloom_stored)
    offset += len(bloom_stored)

    nb = len(offsets)
    index_body = b"".join(
        (
            struct.pack(
                f"<I{nb}Q{nb}I{nb}Q{nb}H",
                nb,
                *offsets,
                *block_sizes,
                *first_seqs,
                *map(len, first_keys),
            ),
            b"".join(first_keys),
        )
    )
    index_off = offset
    index_stored = seal_block(index_body, compressor)
    out.append(index_stored)
    offset += len(index_stored)

    first_key, last_key = keys[0], keys[-1]
    props_body = struct.pack("<QQQQ", n, tombstones, min_seq, max_seq) + b"".join(
        (struct.pack("<H", len(first_key)), first_key, struct.pack("<H", len(last_key)), last_key)
    )
    props_off = offset
    props_stored = seal_block(props_body, None)
    out.append(props_stored)
    offset += len(props_stored)

    head = FOOTER.pack(
        bloom_off,
        len(bloom_stored),
        index_off,
        len(index_stored),
        props_off,
        len(props_stored),
        FORMAT_VERSION,
        0,
        0,
        MAGIC,
    )[: FOOTER_SIZE - 12]
    out.append(head + struct.pack("<I", crc32c(head)) + MAGIC)
    data = b"".join(out)
    summary = SstSummary(n, tombstones, min_seq, max_seq, first_key, last_key, len(data))
    return data, summary


def _build_blocks_py(
    keys: list[bytes], seqs: list[int], values: list[bytes | None], block_bytes: int
) -> tuple[list[bytes], list[int]]:
    """The pure-Python ``_speedups.build_blocks``: sealed uncompressed blocks and
    the index of each block's first entry. A block ends with the entry that
    brings it to ``block_bytes`` (each entry counts 16 + key + value bytes)."""
    vlens = map(len, values) if None not in values else (len(v or b"") for v in values)  # type: ignore[arg-type]
    cum = list(accumulate(map(add, map(add, map(len, keys), vlens), repeat(16))))
    n = len(keys)
    blocks: list[bytes] = []
    starts: list[int] = []
    start = 0
    while start < n:
        base = cum[start - 1] if start else 0
        end = min(bisect_left(cum, base + block_bytes, start) + 1, n)
        body = encode_block_columns_py(keys[start:end], seqs[start:end], values[start:end])
        blocks.append(seal_block(body, None))
        starts.append(start)
        start = end
    return blocks, starts
