"""WAL frames: the unit of durability.

A WAL segment (a local journal file or one immutable WAL object) is a
sequence of frames, one per write (a put, a delete, a batch, a committed
transaction)::

    frame   := header payload
    header  := length:u32  header_crc:u32  payload_crc:u32        (12 bytes, LE)
               header_crc  = crc32c(length as 4 bytes)
               payload_crc = crc32c(payload)
    payload := seq:u64  count:u32
               kinds:   count x u8      1 = put, 0 = delete
               klens:   count x u32
               vlens:   count x u32
               keys:    the keys, concatenated
               values:  the values, concatenated

The payload is columnar so that encoding and decoding are a handful of C
calls (``struct`` on whole arrays) rather than a Python loop per entry.

Containers. A local journal segment starts with a 16-byte header; a WAL
object (object stores) with a 24-byte header that also fixes its exact size
and frame count, so an object cut at a frame boundary is detected::

    segment header := magic "KVWLOG\x00\x01"  version:u16  flags:u16  crc32c(first 12):u32
    object header  := magic "KVWOBJ\x00\x01"  version:u16  flags:u16
                      body_len:u32  frames:u32  crc32c(first 20):u32
                      flags bit 0 = fence (body empty): written by a new writer at
                      the next WAL id so the old writer's next object is refused

Torn tail rule (applied by :func:`decode_frames`, see docs/format/wal.md).
A local journal is pre-written with zeros (``kvstore/objstore/local.py``): while it is
open, and after a crash, the bytes after the last frame are zeros up to the
allocated end. So a power cut can leave the last frame incomplete in two ways:
cut short at the end of the file, or partially written and followed by zeros
(the pre-written zeros). Scanning from the start of a segment, at
each frame start ``pos``:

1. fewer than 12 bytes left: a *torn tail*, stop there.
2. every byte from ``pos`` to the end is zero: a torn tail (a zero-filled,
   unsynced extent, or the pre-written padding after the last frame).
3. the header checksum fails: its length cannot be trusted, so the frame is
   taken to be its 12 header bytes. A torn tail if it is followed by *zero
   padding* (at least one byte after ``pos + 12``, every one zero); otherwise
   :class:`~kvstore.errors.CorruptionError`.
4. the header is valid but the payload runs past the end: a torn tail.
5. the payload checksum fails: a torn tail if the frame is followed by zero
   padding (at least one byte after ``pos + 12 + length``, every one zero);
   otherwise :class:`~kvstore.errors.CorruptionError`.

So a frame followed by any non-zero byte is never cut: bit rot in any frame
but the last is reported, and so is bit rot in the last frame of a closed
segment (a clean close truncates the file to its content, leaving no
padding), and so is a damaged header of any frame that has a payload after
it. The one blind spot is deliberate: a payload checksum failure in the very
last frame of a pre-written segment (one that was open when the process or
machine died) cannot be told apart from a torn write, and is cut, as SQLite's
WAL and RocksDB's point-in-time recovery also do. It only ever loses that one
frame. The rule assumes a torn write left a prefix of its bytes followed by
zeros; if the disk persisted a later page of an unfinished write but not an
earlier one, the result is non-zero data behind a bad frame, reported as
corruption rather than guessed at. (A reader of a *live* journal can see the
same pattern while a write is in progress; ``replay`` in ``kvstore/wal.py``
reads such a segment again before it believes the error.)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from itertools import accumulate
from typing import cast

from crc32c import crc32c

from kvstore._accel import speedups as _c
from kvstore.errors import CorruptionError

HEADER = struct.Struct("<III")
HEADER_SIZE = HEADER.size
_LEN = struct.Struct("<I")
_PAYLOAD_HEAD = struct.Struct("<QI")
MAX_FRAME = 1 << 31

PUT = 1
DELETE = 0


@dataclass(frozen=True, slots=True)
class WalRecord:
    """One write: its sequence number and its entries (value None = delete)."""

    seq: int
    keys: list[bytes]
    values: list[bytes | None]


def encode_record(seq: int, keys: list[bytes], values: list[bytes | None]) -> bytes:
    """Encode one write as a complete frame (header + payload)."""
    if _c is not None:
        return cast(bytes, _c.wal_frame(seq, keys, values))
    return encode_record_py(seq, keys, values)


def encode_record_py(seq: int, keys: list[bytes], values: list[bytes | None]) -> bytes:
    """The pure-Python :func:`encode_record` (the C one must match it byte for byte)."""
    n = len(keys)
    kinds = bytes(PUT if v is not None else DELETE for v in values)
    vals = [v if v is not None else b"" for v in values]
    payload = b"".join(
        (
            _PAYLOAD_HEAD.pack(seq, n),
            kinds,
            struct.pack(f"<{n}I", *map(len, keys)),
            struct.pack(f"<{n}I", *map(len, vals)),
            b"".join(keys),
            b"".join(vals),
        )
    )
    return encode_frame(payload)


def encode_frame(payload: bytes) -> bytes:
    length = len(payload)
    if length >= MAX_FRAME:
        raise ValueError(f"write of {length} bytes exceeds the WAL frame limit")
    return HEADER.pack(length, crc32c(_LEN.pack(length)), crc32c(payload)) + payload


def decode_payload(payload: bytes, *, where: str = "WAL") -> WalRecord:
    try:
        seq, n = _PAYLOAD_HEAD.unpack_from(payload, 0)
        pos = _PAYLOAD_HEAD.size
        kinds = payload[pos : pos + n]
        pos += n
        klens = struct.unpack_from(f"<{n}I", payload, pos)
        pos += 4 * n
        vlens = struct.unpack_from(f"<{n}I", payload, pos)
        pos += 4 * n
    except struct.error as exc:
        raise CorruptionError(f"malformed WAL record: {exc}", object_name=where) from None
    if len(kinds) != n or pos + sum(klens) + sum(vlens) != len(payload):
        raise CorruptionError("WAL record lengths do not add up", object_name=where)
    keys: list[bytes] = []
    koff = list(accumulate(klens, initial=pos))
    keys = [payload[a:b] for a, b in zip(koff, koff[1:])]
    voff = list(accumulate(vlens, initial=koff[-1]))
    values: list[bytes | None] = [
        payload[a:b] if kind == PUT else None for a, b, kind in zip(voff, voff[1:], kinds)
    ]
    if any(k not in (PUT, DELETE) for k in kinds):
        raise CorruptionError("unknown entry kind in WAL record", object_name=where)
    return WalRecord(seq, keys, values)


@dataclass(frozen=True, slots=True)
class DecodedSegment:
    records: list[WalRecord]
    valid_length: int  # bytes up to the end of the last complete frame
    torn: bool  # a torn tail was cut after valid_length


def decode_frames(data: bytes, *, where: str = "WAL") -> DecodedSegment:
    """Decode every complete frame of a segment, applying the torn-tail rule."""
    return _decode_frames_from(data, 0, where)


def _decode_frames_from(data: bytes, pos: int, where: str, lenient: bool = False) -> DecodedSegment:
    """:func:`decode_frames` of ``data[pos:]`` without copying it (offsets stay absolute).

    ``lenient``: stop at the first damaged frame, as at a torn tail, instead
    of raising (only for a writer that accepts losing WAL data)."""
    records: list[WalRecord] = []
    end = len(data)
    while pos < end:
        if end - pos < HEADER_SIZE:  # rule 1
            return DecodedSegment(records, pos, True)
        length, header_crc, payload_crc = HEADER.unpack_from(data, pos)
        body_start = pos + HEADER_SIZE
        if header_crc != crc32c(_LEN.pack(length)):  # (a zero header fails it too)
            if lenient or all_zero(data, pos) or _zero_padding(data, body_start):  # rules 2, 3
                return DecodedSegment(records, pos, True)
            raise CorruptionError(
                f"WAL frame header checksum mismatch at offset {pos}", object_name=where
            )
        body_end = body_start + length
        if body_end > end:  # rule 4
            return DecodedSegment(records, pos, True)
        payload = data[body_start:body_end]
        if crc32c(payload) != payload_crc:
            if lenient or _zero_padding(data, body_end):  # rule 5
                return DecodedSegment(records, pos, True)
            raise CorruptionError(f"WAL frame checksum mismatch at offset {pos}", object_name=where)
        try:
            records.append(decode_payload(payload, where=where))
        except CorruptionError:
            if not lenient:
                raise
            return DecodedSegment(records, pos, True)
        pos = body_end
    return DecodedSegment(records, pos, False)


_ZEROS = bytes(1 << 16)


def all_zero(data: bytes, start: int) -> bool:
    """Every byte of ``data`` from ``start`` on is zero (a memcmp, 64 KiB at a time)."""
    end = len(data)
    step = len(_ZEROS)
    while start < end:
        n = min(step, end - start)
        if not data.startswith(_ZEROS if n == step else _ZEROS[:n], start):
            return False
        start += n
    return True


def _zero_padding(data: bytes, start: int) -> bool:
    """At least one byte from ``start`` on, and every one of them zero."""
    return start < len(data) and all_zero(data, start)


SEGMENT_MAGIC = b"KVWLOG\x00\x01"
OBJECT_MAGIC = b"KVWOBJ\x00\x01"
CONTAINER_VERSION = 1
_SEG_HEAD = struct.Struct("<8sHHI")
_OBJ_HEAD = struct.Struct("<8sHHIII")
SEGMENT_HEADER_SIZE = _SEG_HEAD.size
OBJECT_HEADER_SIZE = _OBJ_HEAD.size
FLAG_FENCE = 1


def segment_header() -> bytes:
    head = _SEG_HEAD.pack(SEGMENT_MAGIC, CONTAINER_VERSION, 0, 0)[:12]
    return head + struct.pack("<I", crc32c(head))


def decode_segment(data: bytes, *, where: str = "WAL", lenient: bool = False) -> DecodedSegment:
    """Decode a journal segment: header, then frames (a torn tail is cut).

    A header whose checksum fails is a torn header when zero padding follows
    it (the first append of a preallocated segment was cut): no frame was
    ever written behind it. Followed by anything else, or by nothing, it is
    corruption.
    """
    if len(data) < SEGMENT_HEADER_SIZE:
        # the header itself was torn: the segment never held a frame
        return DecodedSegment([], 0, bool(data))
    magic, version, flags, crc = _SEG_HEAD.unpack_from(data, 0)
    if crc32c(data[:12]) != crc or magic != SEGMENT_MAGIC:
        # zeros from the first byte, or a torn header in front of preallocated
        # zeros: the segment never held a frame (rules 2 and 3, for the header)
        if lenient or all_zero(data, 0) or _zero_padding(data, SEGMENT_HEADER_SIZE):
            return DecodedSegment([], 0, True)
        raise CorruptionError("bad WAL segment header", object_name=where)
    if version != CONTAINER_VERSION or flags:
        raise CorruptionError(f"unsupported WAL segment version {version}", object_name=where)
    return _decode_frames_from(data, SEGMENT_HEADER_SIZE, where, lenient)


def encode_object(frames: bytes, count: int, *, fence: bool = False) -> bytes:
    head = _OBJ_HEAD.pack(
        OBJECT_MAGIC, CONTAINER_VERSION, FLAG_FENCE if fence else 0, len(frames), count, 0
    )[:20]
    return head + struct.pack("<I", crc32c(head)) + frames


def fence_object() -> bytes:
    return encode_object(b"", 0, fence=True)


def decode_object(data: bytes, *, where: str = "WAL") -> tuple[list[WalRecord], bool]:
    """Decode a whole WAL object: ``(records, is_fence)``. Any damage is corruption."""
    if len(data) < OBJECT_HEADER_SIZE:
        raise CorruptionError("WAL object shorter than its header", object_name=where)
    magic, version, flags, body_len, count, crc = _OBJ_HEAD.unpack_from(data, 0)
    if magic != OBJECT_MAGIC or crc32c(data[:20]) != crc:
        raise CorruptionError("bad WAL object header", object_name=where)
    if version != CONTAINER_VERSION or flags & ~FLAG_FENCE:
        raise CorruptionError(f"unsupported WAL object version {version}", object_name=where)
    if len(data) - OBJECT_HEADER_SIZE != body_len:
        raise CorruptionError("WAL object length does not match its header", object_name=where)
    if flags & FLAG_FENCE:
        if body_len or count:
            raise CorruptionError("fence WAL object with a body", object_name=where)
        return [], True
    decoded = decode_frames(data[OBJECT_HEADER_SIZE:], where=where)
    if decoded.torn or len(decoded.records) != count:
        raise CorruptionError("WAL object frame count does not match", object_name=where)
    return decoded.records, False
