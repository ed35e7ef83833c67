"""Round trips, ordering and damage detection for every persisted format.

One section per module of :mod:`kvstore.format` (WAL frames and their
containers, SST, bloom, manifest) plus the pure iterator helpers of :mod:`kvstore.iterators` that
decide which versions an SST keeps and which a reader sees.

Reference models are deliberately naive (sorted lists, linear scans) so a
disagreement points at the format code, not at the model.
"""

from __future__ import annotations

import random
import struct
from bisect import bisect_left
from itertools import accumulate
from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvstore import CorruptionError
from kvstore.format import block as block_format
from kvstore.format import bloom as bloom_format
from kvstore.format import sst as sst_format
from kvstore.format.block import (
    RESTART_INTERVAL,
    decode_data_block,
    encode_data_block,
    open_block,
    seal_block,
)
from kvstore.format.bloom import BloomFilter, optimal_k
from kvstore.format.manifest import Manifest, SstMeta
from kvstore.format.sst import FOOTER, FOOTER_SIZE, MAGIC, build_sst
from kvstore.format.sst_reader import SstReader
from kvstore.format.wal import (
    HEADER_SIZE,
    OBJECT_HEADER_SIZE,
    SEGMENT_HEADER_SIZE,
    DecodedSegment,
    WalRecord,
    decode_frames,
    decode_object,
    decode_payload,
    decode_segment,
    encode_frame,
    encode_object,
    encode_record,
    fence_object,
    segment_header,
)
from kvstore.iterators import merge, retain, visible

Entry = tuple[bytes, int, "bytes | None"]

PROPERTY = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Keys from a small alphabet share prefixes (exercising prefix compression)
# and include 0x00 / 0xFF (exercising byte order at the extremes).
key_st = st.lists(st.sampled_from([0x00, 0x01, 0x61, 0x62, 0xFF]), min_size=0, max_size=8).map(
    bytes
)
value_st = st.one_of(st.none(), st.binary(max_size=40))
seq_st = st.integers(0, (1 << 64) - 1)


# ===========================================================================
# WAL frames
# ===========================================================================


@st.composite
def wal_records(draw: st.DrawFn, max_records: int = 6) -> list[WalRecord]:
    n = draw(st.integers(1, max_records))
    out = []
    for _ in range(n):
        keys = draw(st.lists(st.binary(max_size=12), max_size=6, unique=True))
        values = [draw(value_st) for _ in keys]
        out.append(WalRecord(draw(seq_st), keys, values))
    return out


def segment(records: list[WalRecord]) -> tuple[bytes, list[int]]:
    """Encode records as one segment; also return the frame end offsets."""
    frames = [encode_record(r.seq, r.keys, r.values) for r in records]
    return b"".join(frames), list(accumulate(map(len, frames)))


def test_wal_record_round_trip_basic() -> None:
    keys = [b"put", b"del", b"empty", b"\x00\xff\x00"]
    values: list[bytes | None] = [b"v", None, b"", b"\xff" * 3]
    frame = encode_record(7, keys, values)
    decoded = decode_frames(frame)
    assert decoded == DecodedSegment([WalRecord(7, keys, values)], len(frame), False)
    # An empty value and a delete stay distinct.
    assert decoded.records[0].values[1] is None
    assert decoded.records[0].values[2] == b""


def test_wal_record_layout_matches_docs() -> None:
    frame = encode_record(0x0102030405060708, [b"ab", b"c"], [b"xyz", None])
    length, header_crc, payload_crc = struct.unpack_from("<III", frame, 0)
    payload = frame[HEADER_SIZE:]
    assert length == len(payload)
    assert header_crc == crc32c(struct.pack("<I", length))
    assert payload_crc == crc32c(payload)
    assert payload == b"".join(
        (
            struct.pack("<QI", 0x0102030405060708, 2),
            bytes([1, 0]),  # kinds: put, delete
            struct.pack("<2I", 2, 1),  # key lengths
            struct.pack("<2I", 3, 0),  # value lengths (a delete stores none)
            b"abc",
            b"xyz",
        )
    )


def test_wal_empty_record_and_extreme_seqs() -> None:
    for seq in (0, 1, (1 << 64) - 1):
        frame = encode_record(seq, [], [])
        assert decode_frames(frame).records == [WalRecord(seq, [], [])]


def test_wal_many_entries() -> None:
    rng = random.Random(1)
    keys = [b"k%06d" % i for i in range(20_000)]
    values: list[bytes | None] = [
        None if i % 5 == 0 else rng.randbytes(rng.randrange(0, 20)) for i in range(len(keys))
    ]
    frame = encode_record(42, keys, values)
    rec = decode_payload(frame[HEADER_SIZE:])
    assert rec == WalRecord(42, keys, values)


def test_wal_large_value() -> None:
    big = bytes(range(256)) * 4096
    frame = encode_record(3, [b"big"], [big])
    assert decode_frames(frame).records[0].values == [big]


def test_encode_frame_rejects_oversized_payload() -> None:
    class Huge(bytes):
        def __len__(self) -> int:
            return 1 << 31

    with pytest.raises(ValueError, match="frame limit"):
        encode_frame(Huge())


@PROPERTY
@given(wal_records())
def test_wal_round_trip(records: list[WalRecord]) -> None:
    data, ends = segment(records)
    decoded = decode_frames(data)
    assert decoded.records == records
    assert decoded.valid_length == len(data) == ends[-1]
    assert not decoded.torn
    for r in records:
        frame = encode_record(r.seq, r.keys, r.values)
        assert decode_payload(frame[HEADER_SIZE:]) == r


def check_every_truncation(records: list[WalRecord]) -> None:
    data, ends = segment(records)
    boundaries = [0, *ends]
    for cut in range(len(data) + 1):
        decoded = decode_frames(data[:cut])
        whole = bisect_left(boundaries, cut + 1) - 1  # frames ending at or before cut
        assert decoded.records == records[:whole], cut
        assert decoded.valid_length == boundaries[whole], cut
        assert decoded.torn == (cut != boundaries[whole]), cut


def test_wal_every_truncation_point_of_a_segment() -> None:
    records = [
        WalRecord(1, [b"a"], [b"1"]),
        WalRecord(2, [b"b", b"c"], [None, b""]),
        WalRecord(3, [], []),
        WalRecord(4, [b"\x00" * 30], [b"\xff" * 50]),
        WalRecord(5, [b"d"], [None]),
    ]
    check_every_truncation(records)


@PROPERTY
@given(wal_records(max_records=4))
def test_wal_every_truncation_point_property(records: list[WalRecord]) -> None:
    check_every_truncation(records)


@pytest.mark.parametrize("zeros", [1, 4, 11, 12, 13, 40, 4096])
def test_wal_zero_filled_tail_is_torn(zeros: int) -> None:
    data, _ = segment([WalRecord(1, [b"a"], [b"x"]), WalRecord(2, [b"b"], [None])])
    decoded = decode_frames(data + bytes(zeros))
    assert decoded.records == [WalRecord(1, [b"a"], [b"x"]), WalRecord(2, [b"b"], [None])]
    assert decoded.valid_length == len(data)
    assert decoded.torn


def test_wal_all_zero_segment_is_torn_at_zero() -> None:
    assert decode_frames(bytes(100)) == DecodedSegment([], 0, True)
    assert decode_frames(b"") == DecodedSegment([], 0, False)


def test_wal_zeros_followed_by_data_is_corruption() -> None:
    frame = encode_record(1, [b"a"], [b"x"])
    with pytest.raises(CorruptionError):
        decode_frames(frame + bytes(HEADER_SIZE) + frame)
    with pytest.raises(CorruptionError):
        decode_frames(frame + bytes(64) + b"\x01")


def test_wal_flipped_byte_in_any_complete_frame_is_corruption() -> None:
    data, _ = segment(
        [
            WalRecord(1, [b"alpha"], [b"one"]),
            WalRecord(2, [b"beta", b"gamma"], [None, b""]),
            WalRecord(3, [b"delta"], [b"three" * 3]),
        ]
    )
    for pos in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            bad = bytearray(data)
            bad[pos] ^= mask
            with pytest.raises(CorruptionError):
                decode_frames(bytes(bad), where="seg")


def test_wal_flip_before_a_torn_tail_is_still_corruption() -> None:
    data, ends = segment([WalRecord(1, [b"a"], [b"x"]), WalRecord(2, [b"b"], [b"y"])])
    torn = data[: ends[1] - 3]  # second frame incomplete
    assert decode_frames(torn).torn
    bad = bytearray(torn)
    bad[ends[0] - 1] ^= 0x10  # damage the last byte of the complete first frame
    with pytest.raises(CorruptionError):
        decode_frames(bytes(bad))


@pytest.mark.parametrize(
    "payload",
    [
        b"",  # no header
        b"\x00" * 11,  # short header
        struct.pack("<QI", 1, 1),  # count 1 but no columns
        struct.pack("<QI", 1, 1) + b"\x01" + struct.pack("<II", 1, 1) + b"k",  # value missing
        struct.pack("<QI", 1, 1) + b"\x01" + struct.pack("<II", 1, 1) + b"kvX",  # extra byte
        struct.pack("<QI", 1, 1) + b"\x07" + struct.pack("<II", 1, 1) + b"kv",  # bad kind
        struct.pack("<QI", 1, 0xFFFFFFFF),  # absurd count
        struct.pack("<QI", 1, 0) + b"\x00",  # trailing garbage
    ],
)
def test_wal_malformed_payload_is_corruption(payload: bytes) -> None:
    with pytest.raises(CorruptionError):
        decode_payload(payload)
    # The same payload behind a valid frame header is corruption too.
    with pytest.raises(CorruptionError):
        decode_frames(encode_frame(payload))


# ===========================================================================
# WAL containers: journal segments and WAL objects
# ===========================================================================

SEG_MAGIC = b"KVWLOG\x00\x01"
OBJ_MAGIC = b"KVWOBJ\x00\x01"


def seg_head(*, magic: bytes = SEG_MAGIC, version: int = 1, flags: int = 0) -> bytes:
    """A segment header per docs/format/wal.md, with a correct CRC."""
    head = struct.pack("<8sHH", magic, version, flags)
    return head + struct.pack("<I", crc32c(head))


def obj_head(
    body_len: int,
    frames: int,
    *,
    magic: bytes = OBJ_MAGIC,
    version: int = 1,
    flags: int = 0,
) -> bytes:
    """An object header per docs/format/wal.md, with a correct CRC."""
    head = struct.pack("<8sHHII", magic, version, flags, body_len, frames)
    return head + struct.pack("<I", crc32c(head))


def test_segment_header_layout_matches_docs() -> None:
    head = segment_header()
    assert SEGMENT_HEADER_SIZE == len(head) == 16
    assert head == seg_head()
    magic, version, flags, crc = struct.unpack("<8sHHI", head)
    assert (magic, version, flags, crc) == (SEG_MAGIC, 1, 0, crc32c(head[:12]))


def test_object_header_layout_matches_docs() -> None:
    frames, _ = segment([WalRecord(1, [b"a"], [b"x"]), WalRecord(2, [b"b"], [None])])
    data = encode_object(frames, 2)
    assert OBJECT_HEADER_SIZE == 24
    magic, version, flags, body_len, count, crc = struct.unpack_from("<8sHHIII", data, 0)
    assert (magic, version, flags, body_len, count) == (OBJ_MAGIC, 1, 0, len(frames), 2)
    assert crc == crc32c(data[:20])
    assert data == obj_head(len(frames), 2) + frames


def test_fence_object_layout_matches_docs() -> None:
    fence = fence_object()
    assert fence == obj_head(0, 0, flags=1)
    assert len(fence) == OBJECT_HEADER_SIZE
    assert decode_object(fence) == ([], True)
    assert encode_object(b"", 0, fence=True) == fence


def test_empty_data_object_is_not_a_fence() -> None:
    """The fence flag, not the size, makes a fence."""
    assert decode_object(encode_object(b"", 0)) == ([], False)


def doc_hex_examples(path: str) -> list[bytes]:
    """The bytes of each fenced example in a format doc (hex before the comment)."""
    from pathlib import Path

    text = (Path(__file__).parents[1] / path).read_text()
    blocks = text.split("```")[1::2]
    out = []
    for block in blocks:
        data = b""
        for line in block.strip().splitlines():
            hex_part = line.split("  ")[0].strip()
            data += bytes.fromhex(hex_part)
        out.append(data)
    return out


def test_wal_doc_examples_match_code() -> None:
    frame = encode_record(7, [b"ab", b"c"], [b"xyz", None])
    assert doc_hex_examples("docs/format/wal.md") == [
        segment_header(),
        fence_object(),
        frame,
        encode_object(frame, 1)[:OBJECT_HEADER_SIZE],
    ]


# -- journal segments --------------------------------------------------------


@PROPERTY
@given(wal_records())
def test_segment_round_trip(records: list[WalRecord]) -> None:
    frames, _ = segment(records)
    data = segment_header() + frames
    decoded = decode_segment(data, where="seg")
    assert decoded == DecodedSegment(records, len(data), False)
    # The header only: a segment that never got a frame.
    assert decode_segment(segment_header()) == DecodedSegment([], SEGMENT_HEADER_SIZE, False)


def check_every_segment_truncation(records: list[WalRecord]) -> None:
    frames, ends = segment(records)
    data = segment_header() + frames
    boundaries = [SEGMENT_HEADER_SIZE, *(SEGMENT_HEADER_SIZE + e for e in ends)]
    for cut in range(len(data) + 1):
        decoded = decode_segment(data[:cut])
        if cut < SEGMENT_HEADER_SIZE:
            # the header itself was torn: the segment never held a frame
            assert decoded == DecodedSegment([], 0, cut > 0), cut
            continue
        whole = bisect_left(boundaries, cut + 1) - 1
        assert decoded.records == records[:whole], cut
        assert decoded.valid_length == boundaries[whole], cut
        assert decoded.torn == (cut != boundaries[whole]), cut


def test_segment_every_truncation_point() -> None:
    check_every_segment_truncation(
        [
            WalRecord(1, [b"a"], [b"1"]),
            WalRecord(2, [b"b", b"c"], [None, b""]),
            WalRecord(3, [], []),
            WalRecord(4, [b"\x00" * 30], [b"\xff" * 50]),
        ]
    )


@PROPERTY
@given(wal_records(max_records=4))
def test_segment_every_truncation_point_property(records: list[WalRecord]) -> None:
    check_every_segment_truncation(records)


def test_segment_shorter_than_its_header_is_empty_and_torn() -> None:
    assert decode_segment(b"") == DecodedSegment([], 0, False)
    for n in range(1, SEGMENT_HEADER_SIZE):
        # any prefix, even of garbage: a header write that never completed
        assert decode_segment(segment_header()[:n]) == DecodedSegment([], 0, True)
        assert decode_segment(b"\xa5" * n) == DecodedSegment([], 0, True)


@pytest.mark.parametrize("size", [SEGMENT_HEADER_SIZE, SEGMENT_HEADER_SIZE + 1, 40, 4096])
def test_all_zero_segment_is_empty_and_torn(size: int) -> None:
    """A zero-filled extent from the first byte (header included) is a torn tail."""
    assert decode_segment(bytes(size)) == DecodedSegment([], 0, True)


@pytest.mark.parametrize("zeros", [1, 11, 12, 13, 4096])
def test_segment_zero_filled_tail_is_torn(zeros: int) -> None:
    frames, _ = segment([WalRecord(1, [b"a"], [b"x"])])
    data = segment_header() + frames
    decoded = decode_segment(data + bytes(zeros))
    assert decoded == DecodedSegment([WalRecord(1, [b"a"], [b"x"])], len(data), True)


def test_segment_flipped_header_byte_is_corruption() -> None:
    frames, _ = segment([WalRecord(1, [b"a"], [b"x"])])
    for data in (segment_header(), segment_header() + frames):
        for pos in range(SEGMENT_HEADER_SIZE):
            for mask in (0x01, 0x80, 0xFF):
                bad = bytearray(data)
                bad[pos] ^= mask
                with pytest.raises(CorruptionError, match="segment"):
                    decode_segment(bytes(bad), where="seg")


def test_segment_flipped_frame_byte_is_corruption() -> None:
    frames, _ = segment([WalRecord(1, [b"alpha"], [b"one"]), WalRecord(2, [b"b"], [None])])
    data = segment_header() + frames
    for pos in range(SEGMENT_HEADER_SIZE, len(data)):
        bad = bytearray(data)
        bad[pos] ^= 0x20
        with pytest.raises(CorruptionError):
            decode_segment(bytes(bad))


@pytest.mark.parametrize(
    "head",
    [
        seg_head(version=2),  # a valid CRC does not make another version acceptable
        seg_head(version=0),
        seg_head(flags=1),
        seg_head(flags=0x8000),
        seg_head(magic=b"KVWLOG\x00\x02"),
        seg_head(magic=OBJ_MAGIC),  # an object header is not a segment header
        bytes(SEGMENT_HEADER_SIZE),  # zeros, but frames follow: not a torn tail
    ],
)
def test_segment_bad_header_is_corruption(head: bytes) -> None:
    frames, _ = segment([WalRecord(1, [b"a"], [b"x"])])
    with pytest.raises(CorruptionError):
        decode_segment(head + frames)


def test_segment_without_header_is_corruption() -> None:
    """Bare frames (the layout before containers) are not a segment."""
    frames, _ = segment([WalRecord(1, [b"a"], [b"x"]), WalRecord(2, [b"b"], [b"y"])])
    with pytest.raises(CorruptionError):
        decode_segment(frames)


# -- WAL objects ---------------------------------------------------------------


@PROPERTY
@given(wal_records())
def test_object_round_trip(records: list[WalRecord]) -> None:
    frames, _ = segment(records)
    data = encode_object(frames, len(records))
    assert len(data) == OBJECT_HEADER_SIZE + len(frames)
    assert decode_object(data, where="obj") == (records, False)


def test_object_every_truncation_is_corruption() -> None:
    """Objects are written whole: any cut, including at a frame boundary or to zero
    bytes, is corruption (never a torn tail, never a fence)."""
    records = [WalRecord(1, [b"a"], [b"1"]), WalRecord(2, [], []), WalRecord(3, [b"b"], [None])]
    frames, ends = segment(records)
    data = encode_object(frames, len(records))
    assert {OBJECT_HEADER_SIZE + e for e in ends[:-1]} < set(range(len(data)))
    for cut in range(len(data)):
        with pytest.raises(CorruptionError):
            decode_object(data[:cut])
    for cut in range(OBJECT_HEADER_SIZE):
        with pytest.raises(CorruptionError):
            decode_object(fence_object()[:cut])


def test_zero_byte_object_is_corruption() -> None:
    with pytest.raises(CorruptionError, match="shorter than its header"):
        decode_object(b"", where="obj")


@pytest.mark.parametrize("extra", [b"\x00", bytes(12), b"junk"])
def test_object_with_bytes_appended_is_corruption(extra: bytes) -> None:
    frames, _ = segment([WalRecord(1, [b"a"], [b"x"])])
    for data in (encode_object(frames, 1), fence_object()):
        with pytest.raises(CorruptionError, match="length"):
            decode_object(data + extra)


def test_object_every_byte_flip_is_corruption() -> None:
    frames, _ = segment([WalRecord(1, [b"alpha"], [b"one"]), WalRecord(2, [b"b"], [None])])
    for data in (encode_object(frames, 2), fence_object()):
        for pos in range(len(data)):
            for mask in (0x01, 0x80, 0xFF):
                bad = bytearray(data)
                bad[pos] ^= mask
                with pytest.raises(CorruptionError):
                    decode_object(bytes(bad))


_TWO_FRAMES, _ = segment([WalRecord(1, [b"a"], [b"x"]), WalRecord(2, [b"b"], [None])])
_ONE_FRAME, _ = segment([WalRecord(1, [b"a"], [b"x"])])


@pytest.mark.parametrize(
    "data, message",
    [
        # wrong frame count under a valid header CRC (a buggy writer, or frames lost)
        (obj_head(len(_TWO_FRAMES), 1) + _TWO_FRAMES, "frame count"),
        (obj_head(len(_TWO_FRAMES), 3) + _TWO_FRAMES, "frame count"),
        (obj_head(len(_TWO_FRAMES), 0) + _TWO_FRAMES, "frame count"),
        (obj_head(0, 1), "frame count"),
        # body_len does not match the bytes after the header
        (obj_head(len(_TWO_FRAMES) - 1, 2) + _TWO_FRAMES, "length"),
        (obj_head(len(_TWO_FRAMES) + 1, 2) + _TWO_FRAMES, "length"),
        (obj_head(len(_ONE_FRAME), 1) + _TWO_FRAMES, "length"),
        (obj_head(1 << 31, 2) + _TWO_FRAMES, "length"),
        # a body that ends inside a frame, although body_len matches
        (obj_head(len(_TWO_FRAMES) - 3, 2) + _TWO_FRAMES[:-3], "frame count"),
        # a zero-filled body (an unsynced extent is never acceptable in an object)
        (obj_head(16, 0) + bytes(16), "frame count"),
        # fences carry nothing
        (obj_head(len(_ONE_FRAME), 1, flags=1) + _ONE_FRAME, "fence"),
        (obj_head(0, 1, flags=1), "fence"),
        (obj_head(len(_ONE_FRAME), 0, flags=1) + _ONE_FRAME, "fence"),
        # unknown flags, versions and magics are refused even with a valid CRC
        (obj_head(len(_ONE_FRAME), 1, flags=2) + _ONE_FRAME, "version"),
        (obj_head(0, 0, flags=3), "version"),
        (obj_head(len(_ONE_FRAME), 1, version=2) + _ONE_FRAME, "version"),
        (obj_head(len(_ONE_FRAME), 1, version=0) + _ONE_FRAME, "version"),
        (obj_head(len(_ONE_FRAME), 1, magic=b"KVWOBJ\x00\x02") + _ONE_FRAME, "header"),
        (seg_head() + _ONE_FRAME, "header"),  # a journal segment is not an object
        (_ONE_FRAME, "header"),  # bare frames (the layout before containers)
        (bytes(OBJECT_HEADER_SIZE), "header"),  # a zero-filled object
    ],
)
def test_object_bad_header_is_corruption(data: bytes, message: str) -> None:
    with pytest.raises(CorruptionError, match=message):
        decode_object(data, where="obj")


def test_object_damaged_frame_is_corruption() -> None:
    """A frame that fails its own CRC is corruption even when the header is fine."""
    bad = bytearray(_TWO_FRAMES)
    bad[-1] ^= 0x01
    with pytest.raises(CorruptionError, match="checksum"):
        decode_object(obj_head(len(bad), 2) + bytes(bad))


# ===========================================================================
# SST
# ===========================================================================


def reader_for(data: bytes, cache: Any = None) -> SstReader:
    return SstReader(lambda off, n: data[off : off + n], len(data), name="x", block_cache=cache)


@st.composite
def sst_entries(draw: st.DrawFn, max_keys: int = 30) -> list[Entry]:
    keys = sorted(draw(st.sets(key_st, min_size=1, max_size=max_keys)))
    versions = [draw(st.integers(1, 4)) for _ in keys]
    seqs = draw(
        st.lists(
            st.one_of(st.integers(0, 300), seq_st),
            min_size=sum(versions),
            max_size=sum(versions),
            unique=True,
        )
    )
    out: list[Entry] = []
    it = iter(seqs)
    for key, n in zip(keys, versions):
        for seq in sorted((next(it) for _ in range(n)), reverse=True):
            out.append((key, seq, draw(value_st)))
    return out


def ref_get(entries: list[Entry], key: bytes, read_seq: int) -> Entry | None:
    for e in entries:
        if e[0] == key and e[1] <= read_seq:
            return e
    return None


def ref_range(entries: list[Entry], start: bytes | None, end: bytes | None) -> list[Entry]:
    return [e for e in entries if (start is None or e[0] >= start) and (end is None or e[0] < end)]


def ref_reverse(entries: list[Entry], start: bytes | None, end: bytes | None) -> list[Entry]:
    """Key descending, and within a key still seq descending."""
    return sorted(ref_range(entries, start, end), key=lambda e: (e[0], e[1]), reverse=True)


def check_sst(data: bytes, entries: list[Entry], probes: list[bytes], bounds: list) -> None:
    r = reader_for(data)
    assert list(r.iter_forward(None, None)) == entries
    assert list(r.iter_reverse(None, None)) == ref_reverse(entries, None, None)
    assert (r.count, r.tombstones) == (len(entries), sum(e[2] is None for e in entries))
    assert (r.min_seq, r.max_seq) == (min(e[1] for e in entries), max(e[1] for e in entries))
    assert (r.first_key, r.last_key) == (entries[0][0], entries[-1][0])
    seqs = {e[1] for e in entries}
    read_seqs = sorted(
        {0, (1 << 64) - 1} | seqs | {s + 1 for s in seqs} | {max(s - 1, 0) for s in seqs}
    )
    for key in {e[0] for e in entries} | set(probes):
        for rs in read_seqs:
            assert r.get(key, rs) == ref_get(entries, key, rs), (key, rs)
        if key not in {e[0] for e in entries}:
            assert r.get(key, (1 << 64) - 1) is None
    for start, end in bounds:
        assert list(r.iter_forward(start, end)) == ref_range(entries, start, end), (start, end)
        assert list(r.iter_reverse(start, end)) == ref_reverse(entries, start, end), (start, end)


@PROPERTY
@given(
    entries=sst_entries(),
    block_bytes=st.sampled_from([1, 24, 64, 200, 4096]),
    bloom=st.sampled_from([0, 1, 10]),
    compression=st.sampled_from(["none", "zstd"]),
    probes=st.lists(key_st, max_size=6),
    bounds=st.lists(st.tuples(st.none() | key_st, st.none() | key_st), max_size=6),
)
def test_sst_matches_reference(
    entries: list[Entry],
    block_bytes: int,
    bloom: int,
    compression: str,
    probes: list[bytes],
    bounds: list,
) -> None:
    data, summary = build_sst(
        entries, block_bytes=block_bytes, bloom_bits_per_key=bloom, compression=compression
    )
    assert summary.size == len(data)
    assert summary.count == len(entries)
    assert (summary.first_key, summary.last_key) == (entries[0][0], entries[-1][0])
    bounds = bounds + [(e[0], None) for e in entries[:2]] + [(None, entries[-1][0])]
    check_sst(data, entries, probes, bounds)
    r = reader_for(data)
    assert (r.bloom is None) == (bloom == 0)
    if block_bytes == 1:
        assert r.num_blocks == len(entries)  # one entry per block: versions span blocks


def test_sst_versions_span_many_blocks() -> None:
    entries: list[Entry] = [(b"a", 1000, b"a")]
    entries += [(b"hot", seq, None if seq % 7 == 0 else b"v%d" % seq) for seq in range(999, 0, -3)]
    entries += [(b"z", 5, b"z")]
    for compression in ("none", "zstd"):
        data, _ = build_sst(entries, block_bytes=48, compression=compression)
        r = reader_for(data)
        assert r.num_blocks > 20
        # Every read seq: the newest version at or below it.
        for rs in range(0, 1002):
            assert r.get(b"hot", rs) == ref_get(entries, b"hot", rs), rs
        check_sst(data, entries, [b"ho", b"hot\x00", b"b"], [(b"hot", b"hot\x00"), (b"b", b"y")])


def test_sst_tombstones_and_empty_values() -> None:
    entries: list[Entry] = [(b"a", 3, None), (b"a", 2, b""), (b"a", 1, b"old"), (b"b", 4, b"")]
    data, summary = build_sst(entries, block_bytes=1)
    assert summary.tombstones == 1
    r = reader_for(data)
    assert r.get(b"a", 9) == (b"a", 3, None)
    assert r.get(b"a", 2) == (b"a", 2, b"")
    assert r.get(b"a", 1) == (b"a", 1, b"old")
    assert r.get(b"a", 0) is None
    assert r.get(b"b", 4) == (b"b", 4, b"")
    assert list(r.iter_forward(None, None)) == entries


@pytest.mark.parametrize("compression", ["none", "zstd"])
@pytest.mark.parametrize("block_bytes", [1, 100, 4096, 1 << 22])
def test_sst_block_sizes(compression: str, block_bytes: int) -> None:
    rng = random.Random(block_bytes)
    entries: list[Entry] = [
        (b"user:%08d" % i, 10_000 - i, None if i % 11 == 0 else b"payload-%d" % rng.randrange(99))
        for i in range(3000)
    ]
    data, _ = build_sst(entries, block_bytes=block_bytes, compression=compression)
    r = reader_for(data)
    if block_bytes == 1:
        assert r.num_blocks == len(entries)
    if block_bytes == 1 << 22:
        assert r.num_blocks == 1
    assert list(r.iter_forward(None, None)) == entries
    assert list(r.iter_reverse(b"user:00001000", b"user:00002000")) == ref_reverse(
        entries, b"user:00001000", b"user:00002000"
    )
    for i in range(0, 3000, 97):
        e = entries[i]
        assert r.get(e[0], (1 << 64) - 1) == e
        assert r.get(e[0], e[1] - 1) is None


def test_sst_large_values() -> None:
    big = bytes(range(256)) * 2000  # 512 KB
    entries: list[Entry] = [(b"a", 2, big), (b"a", 1, b"small"), (b"b", 3, big[::-1])]
    for compression in ("none", "zstd"):
        data, _ = build_sst(entries, block_bytes=64, compression=compression)
        r = reader_for(data)
        assert list(r.iter_forward(None, None)) == entries
        assert r.get(b"b", 3) == entries[2]


def test_sst_zstd_compresses_and_none_does_not() -> None:
    entries: list[Entry] = [(b"k%05d" % i, 1, b"x" * 100) for i in range(500)]
    packed, _ = build_sst(entries, compression="zstd")
    plain, _ = build_sst(entries, compression="none")
    assert len(packed) < len(plain) // 4
    for data, kind in ((packed, block_format.COMPRESS_ZSTD), (plain, block_format.COMPRESS_NONE)):
        for off, size in sst_regions(data)["data"]:
            assert data[off + size - 5] == kind


def test_sst_block_cache_is_used() -> None:
    class DictCache:
        def __init__(self) -> None:
            self.items: dict = {}
            self.puts = 0

        def get(self, key: object) -> object:
            return self.items.get(key)

        def put(self, key: object, block: object, charge: int) -> None:
            assert charge > 0
            self.puts += 1
            self.items[key] = block

    entries: list[Entry] = [(b"k%03d" % i, 1, b"v") for i in range(200)]
    data, _ = build_sst(entries, block_bytes=100)
    reads = []

    def read(off: int, n: int) -> bytes:
        reads.append((off, n))
        return data[off : off + n]

    cache = DictCache()
    r = SstReader(read, len(data), name="x", block_cache=cache)
    assert list(r.iter_forward(None, None)) == entries
    assert cache.puts == r.num_blocks
    reads.clear()
    assert list(r.iter_forward(None, None)) == entries
    assert r.get(b"k100", 1) == (b"k100", 1, b"v")
    assert reads == []  # everything came from the cache


@pytest.mark.parametrize(
    "entries, message",
    [
        ([], "at least one entry"),
        ([(b"b", 1, b""), (b"a", 2, b"")], "sorted"),
        ([(b"a", 1, b""), (b"a", 2, b"")], "sorted"),
        ([(b"a", 1, b""), (b"a", 1, b"")], "sorted"),
        ([(b"k" * 0x10000, 1, b"")], "exceeds"),
    ],
)
def test_build_sst_rejects_bad_input(entries: list[Entry], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_sst(entries)


def test_data_block_round_trip_and_restarts() -> None:
    entries: list[Entry] = [(b"prefix/%04d" % (i // 2), 100 - i, b"v%d" % i) for i in range(50)]
    entries[7] = (entries[7][0], entries[7][1], None)
    body = encode_data_block(entries)
    block = decode_data_block(body, where="b")
    assert list(zip(block.keys, block.seqs, block.values)) == entries
    (n,) = struct.unpack_from("<I", body, 0)
    shared = struct.unpack_from(f"<{n}H", body, 4)
    (r,) = struct.unpack_from("<I", body, len(body) - 4 * (1 + (n + 15) // 16))
    restarts = struct.unpack_from(f"<{r}I", body, len(body) - 4 * r)
    assert restarts == tuple(range(0, n, RESTART_INTERVAL))
    assert all(shared[i] == 0 for i in restarts)
    assert any(s > 0 for s in shared)  # prefix compression happened


@pytest.mark.parametrize("body", [b"", b"x", b"x" * 64, bytes(range(256)) * 10])
def test_seal_and_open_block(body: bytes) -> None:
    import zstandard

    for compressor in (None, zstandard.ZstdCompressor(level=3)):
        stored = seal_block(body, compressor)
        assert open_block(stored, where="b") == body
        # zstd is kept only when it makes the block smaller.
        assert len(stored) <= len(body) + 5


def test_open_block_rejects_damage() -> None:
    stored = seal_block(b"hello world" * 20, None)
    for pos in range(len(stored)):
        bad = bytearray(stored)
        bad[pos] ^= 0x04
        with pytest.raises(CorruptionError):
            open_block(bytes(bad), where="b")
    for cut in range(len(stored)):
        with pytest.raises(CorruptionError):
            open_block(stored[:cut], where="b")


def test_open_block_unknown_compression() -> None:
    head = b"body" + b"\x07"
    with pytest.raises(CorruptionError, match="compression"):
        open_block(head + struct.pack("<I", crc32c(head)), where="b")


def sst_regions(data: bytes) -> dict[str, list[tuple[int, int]]]:
    """(offset, size) of every block, parsed from the footer and index per docs/format/sst.md."""
    footer = FOOTER.unpack(data[-FOOTER_SIZE:])
    bloom_off, bloom_len, index_off, index_len, props_off, props_len = footer[:6]
    index = open_block(data[index_off : index_off + index_len], where="index")
    (n,) = struct.unpack_from("<I", index, 0)
    offsets = struct.unpack_from(f"<{n}Q", index, 4)
    sizes = struct.unpack_from(f"<{n}I", index, 4 + 8 * n)
    return {
        "data": list(zip(offsets, sizes)),
        "bloom": [(bloom_off, bloom_len)] if bloom_len else [],
        "index": [(index_off, index_len)],
        "props": [(props_off, props_len)],
        "footer": [(len(data) - FOOTER_SIZE, FOOTER_SIZE)],
    }


def test_sst_layout_matches_docs() -> None:
    entries: list[Entry] = [(b"k%03d" % i, 500 - i, b"v" * 30) for i in range(100)]
    data, _ = build_sst(entries, block_bytes=256, compression="none")
    regions = sst_regions(data)
    # The blocks tile the file with no gaps: every byte is under some checksum.
    spans = sorted(span for spans in regions.values() for span in spans)
    pos = 0
    for off, size in spans:
        assert off == pos
        pos += size
    assert pos == len(data)
    assert data[-8:] == MAGIC
    fields = FOOTER.unpack(data[-FOOTER_SIZE:])
    assert fields[6] == sst_format.FORMAT_VERSION
    assert fields[8] == crc32c(data[-FOOTER_SIZE:-12])
    props = open_block(data[regions["props"][0][0] : -FOOTER_SIZE], where="props")
    assert struct.unpack_from("<QQQQ", props) == (100, 0, 401, 500)


def test_sst_every_byte_flip_is_detected() -> None:
    """Flip every byte of a small SST: construction or a full read must raise."""
    entries: list[Entry] = [
        (b"k%02d" % i, 100 - i, None if i % 5 == 0 else b"v") for i in range(40)
    ]
    for compression in ("none", "zstd"):
        data, _ = build_sst(entries, block_bytes=64, compression=compression)
        for pos in range(len(data)):
            bad = bytearray(data)
            bad[pos] ^= 0x20
            with pytest.raises(CorruptionError):
                r = reader_for(bytes(bad))
                list(r.iter_forward(None, None))
                for key, seq, _ in entries:
                    r.get(key, seq)


def test_sst_short_files_are_corruption() -> None:
    data, _ = build_sst([(b"a", 1, b"x")])
    for cut in (0, 1, FOOTER_SIZE - 1, FOOTER_SIZE, len(data) - 1):
        with pytest.raises(CorruptionError):
            r = reader_for(data[:cut])
            list(r.iter_forward(None, None))
    with pytest.raises(CorruptionError, match="truncated"):
        SstReader(lambda off, n: data[off : off + n - 1], len(data), name="x")


# ===========================================================================
# bloom
# ===========================================================================


def measure_bloom(bits_per_key: int, n: int = 10_000, probes: int = 100_000) -> float:
    keys = [b"present-%d" % i for i in range(n)]
    bf = BloomFilter(bloom_format.build(keys, len(keys), bits_per_key))
    assert all(bf.may_contain(k) for k in keys)  # no false negatives, ever
    fp = sum(bf.may_contain(b"absent-%d" % i) for i in range(probes))
    return fp / probes


@pytest.mark.parametrize("bits_per_key, limit", [(5, 0.15), (10, 0.02), (20, 0.002)])
def test_bloom_false_positive_rate(bits_per_key: int, limit: float) -> None:
    assert measure_bloom(bits_per_key) < limit


def test_bloom_tiny_filter() -> None:
    data = bloom_format.build([b"one"], 1, 10)
    (k,) = struct.unpack_from("<B", data, 0)
    assert k == optimal_k(10)
    bf = BloomFilter(data)
    assert bf.may_contain(b"one")
    assert bf.size_bytes == len(data)
    # Empty input still builds a usable (all-negative) filter.
    empty = BloomFilter(bloom_format.build([], 0, 10))
    assert not empty.may_contain(b"one")


def test_bloom_optimal_k() -> None:
    ks = [optimal_k(b) for b in range(1, 64)]
    assert ks[0] == 1 and optimal_k(10) == 7
    assert all(k >= 1 for k in ks)
    assert ks == sorted(ks)  # more bits per key never means fewer probes


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x07\x40\x00\x00",  # shorter than the header
        struct.pack("<BI", 0, 64) + bytes(8),  # k = 0
        struct.pack("<BI", 7, 0),  # nbits = 0
        struct.pack("<BI", 7, 64) + bytes(7),  # bits shorter than nbits
        struct.pack("<BI", 7, 64) + bytes(9),  # bits longer than nbits
    ],
)
def test_bloom_rejects_bad_header(data: bytes) -> None:
    with pytest.raises(ValueError):
        BloomFilter(data)


@PROPERTY
@given(st.sets(st.binary(max_size=20), min_size=1, max_size=200), st.integers(1, 20))
def test_bloom_no_false_negatives(keys: set[bytes], bits_per_key: int) -> None:
    bf = BloomFilter(bloom_format.build(keys, len(keys), bits_per_key))
    assert all(bf.may_contain(k) for k in keys)


# ===========================================================================
# manifest
# ===========================================================================


def meta(
    sst_id: str, min_seq: int, max_seq: int, first: bytes = b"a", last: bytes = b"z"
) -> SstMeta:
    return SstMeta(sst_id, 100, 10, 1, min_seq, max_seq, first, last)


json_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-(1 << 70), 1 << 70), st.text(max_size=10)
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner)
    ),
    max_leaves=8,
)
sst_meta_st = st.builds(
    SstMeta,
    id=st.text(min_size=1, max_size=26),
    size=st.integers(0, 1 << 40),
    count=st.integers(0, 1 << 40),
    tombstones=st.integers(0, 1 << 40),
    min_seq=seq_st,
    max_seq=seq_st,
    first_key=st.binary(max_size=20),
    last_key=st.binary(max_size=20),
)
other_fields = dict(
    id=st.integers(1, 1 << 63),
    writer_epoch=st.integers(0, 1 << 63),
    wal_replay_from=st.integers(0, 1 << 63),
    retention_seq=seq_st,
    checkpoints=st.dictionaries(st.text(max_size=8), json_value, max_size=3),
    created_ms=st.integers(0, 1 << 50),
)
#: any field values, most of which break an invariant of Manifest.check
any_manifest_st = st.builds(
    Manifest,
    last_flushed_seq=seq_st,
    l0=st.lists(sst_meta_st, max_size=4).map(tuple),
    runs=st.lists(st.lists(sst_meta_st, max_size=3).map(tuple), max_size=3).map(tuple),
    **other_fields,
)


@st.composite
def valid_manifests(draw: st.DrawFn) -> Manifest:
    """Manifests built to satisfy every invariant of Manifest.check (docs/format/manifest.md):
    unique SST ids; L0 newest first with disjoint, descending seq ranges; each run's
    SSTs in ascending, disjoint key ranges; last_flushed_seq covering every SST."""
    n_l0 = draw(st.integers(0, 4))
    run_sizes = draw(st.lists(st.integers(0, 3), max_size=3))
    ids = iter(
        draw(
            st.lists(
                st.text(min_size=1, max_size=26),
                min_size=n_l0 + sum(run_sizes),
                max_size=n_l0 + sum(run_sizes),
                unique=True,
            )
        )
    )

    def sst(min_seq: int, max_seq: int, first: bytes, last: bytes) -> SstMeta:
        return draw(
            st.builds(
                SstMeta,
                id=st.just(next(ids)),
                size=st.integers(0, 1 << 40),
                count=st.integers(0, 1 << 40),
                tombstones=st.integers(0, 1 << 40),
                min_seq=st.just(min_seq),
                max_seq=st.just(max_seq),
                first_key=st.just(first),
                last_key=st.just(last),
            )
        )

    def ordered_pairs(values: list, single: list[bool]) -> list[tuple]:
        """Disjoint (low, high) pairs in ascending order; some with low == high."""
        return [
            (values[2 * i], values[2 * i] if one else values[2 * i + 1])
            for i, one in enumerate(single)
        ]

    # L0: 2*n distinct seqs, newest SST first
    seqs = sorted(draw(st.lists(seq_st, min_size=2 * n_l0, max_size=2 * n_l0, unique=True)))
    singles = draw(st.lists(st.booleans(), min_size=n_l0, max_size=n_l0))
    l0 = []
    for lo, hi in reversed(ordered_pairs(seqs, singles)):
        first, last = sorted((draw(st.binary(max_size=20)), draw(st.binary(max_size=20))))
        l0.append(sst(lo, hi, first, last))
    runs = []
    for size in run_sizes:
        keys = sorted(
            draw(
                st.lists(st.binary(max_size=20), min_size=2 * size, max_size=2 * size, unique=True)
            )
        )
        singles = draw(st.lists(st.booleans(), min_size=size, max_size=size))
        run = []
        for first, last in ordered_pairs(keys, singles):
            lo, hi = sorted((draw(seq_st), draw(seq_st)))
            run.append(sst(lo, hi, first, last))
        runs.append(tuple(run))
    covered = max((s.max_seq for s in [*l0, *(x for r in runs for x in r)]), default=0)
    manifest_id: int = draw(st.integers(1, 1 << 63))
    # checkpoints as the store writes them: each names an earlier (or this) manifest
    checkpoint = st.builds(
        lambda mid, extra: {**extra, "manifest_id": mid},
        st.integers(1, manifest_id),
        st.dictionaries(st.text(max_size=5), json_value, max_size=2),
    )
    m = draw(
        st.builds(
            Manifest,
            last_flushed_seq=st.integers(covered, (1 << 64) - 1),
            l0=st.just(tuple(l0)),
            runs=st.just(tuple(runs)),
            **{
                **other_fields,
                "id": st.just(manifest_id),
                "checkpoints": st.dictionaries(st.text(max_size=8), checkpoint, max_size=3),
            },
        )
    )
    m.check()  # the generator's own promise
    return m


@PROPERTY
@given(valid_manifests())
def test_manifest_round_trip(m: Manifest) -> None:
    data = m.encode()
    assert Manifest.decode(data) == m
    assert data.startswith(b"KVMANIF1")
    assert Manifest.decode(data).encode() == data  # canonical


@PROPERTY
@given(any_manifest_st)
def test_manifest_decode_accepts_exactly_what_check_accepts(m: Manifest) -> None:
    """decode(encode(m)) is m when m passes check(), else CorruptionError."""
    try:
        m.check()
        valid = True
    except AssertionError:
        valid = False
    if valid:
        assert Manifest.decode(m.encode()) == m
    else:
        with pytest.raises(CorruptionError, match="invariant"):
            Manifest.decode(m.encode())


def manifest_envelope(body: bytes, *, version: int = 1, flags: int = 0) -> bytes:
    """The documented envelope: the CRC covers the 16 header bytes before it and the body."""
    head = struct.pack("<8sHHI", b"KVMANIF1", version, flags, len(body))
    return head + struct.pack("<I", crc32c(head + body)) + body


def test_manifest_layout_matches_docs() -> None:
    m = Manifest(id=5, writer_epoch=2, l0=(meta("s1", 1, 9),), last_flushed_seq=9)
    data = m.encode()
    magic, version, flags, length, crc = struct.unpack_from("<8sHHII", data, 0)
    body = data[20:]
    assert (magic, version, flags, length) == (b"KVMANIF1", 1, 0, len(body))
    assert crc == crc32c(data[:16] + body)
    assert data == manifest_envelope(body)
    assert b'"first_key":"61"' in body  # keys are hex in the JSON body
    assert Manifest.decode(manifest_envelope(body)) == m


VALID = Manifest(
    id=9,
    writer_epoch=3,
    last_flushed_seq=100,
    l0=(meta("l0-new", 61, 100), meta("l0-old", 20, 60)),
    runs=((meta("r1a", 1, 19, b"a", b"f"), meta("r1b", 1, 19, b"g", b"m")),),
)


#: (changes to VALID, message): each breaks one invariant of Manifest.check
INVARIANT_BREAKS = [
    ({"id": 0}, "invalid"),
    ({"writer_epoch": -1}, "invalid"),
    ({"l0": (meta("x", 50, 100), meta("y", 20, 60))}, "not strictly newer"),  # overlap
    ({"l0": (meta("x", 50, 60), meta("y", 60, 70))}, "not strictly newer"),  # touching
    ({"l0": (meta("old", 1, 10), meta("new", 20, 30))}, "not strictly newer"),  # wrong order
    ({"l0": (meta("dup", 61, 100), meta("dup", 20, 60))}, "twice"),
    ({"runs": ((meta("l0-new", 1, 19),),)}, "twice"),  # same id in L0 and a run
    ({"runs": ((meta("a", 1, 5, b"a", b"g"), meta("b", 1, 5, b"g", b"m")),)}, "overlap"),
    ({"runs": ((meta("a", 1, 5, b"a", b"h"), meta("b", 1, 5, b"c", b"m")),)}, "overlap"),
    ({"runs": ((meta("a", 1, 5, b"m", b"z"), meta("b", 1, 5, b"a", b"c")),)}, "overlap"),
    ({"last_flushed_seq": 99}, "last_flushed_seq"),
    ({"runs": ((meta("r", 1, 101),),)}, "last_flushed_seq"),
    ({"runs": ((meta("r", 1, 5, b"z", b"a"),),)}, "inverted"),
    ({"l0": (meta("r", 9, 5),)}, "inverted"),
]


@pytest.mark.parametrize("changes, message", INVARIANT_BREAKS)
def test_manifest_check_rejects(changes: dict, message: str) -> None:
    VALID.check()
    with pytest.raises(AssertionError, match=message):
        VALID.evolve(**changes).check()


@pytest.mark.parametrize("changes, message", INVARIANT_BREAKS)
def test_manifest_decode_rejects_broken_invariants(changes: dict, message: str) -> None:
    """decode runs check(): a well-formed, correctly checksummed manifest that breaks
    an invariant (as a buggy writer could produce) is corruption, not a store state."""
    bad = VALID.evolve(**changes)
    data = bad.encode()  # encode does not check; ManifestStore.write does
    assert Manifest.decode(VALID.encode()) == VALID
    with pytest.raises(CorruptionError, match=f"invariant.*{message}"):
        Manifest.decode(data, where="m")


@pytest.mark.parametrize(
    "m",
    [
        Manifest(id=1, writer_epoch=0),
        VALID,
        VALID.evolve(runs=((meta("a", 1, 5, b"a", b"a"), meta("b", 1, 5, b"b", b"b")),)),
        VALID.evolve(l0=()),
    ],
)
def test_manifest_check_accepts(m: Manifest) -> None:
    m.check()


_GOOD = VALID.encode()


@pytest.mark.parametrize(
    "bad, message",
    [
        (_GOOD[:19], "shorter"),
        (b"KVMANIF2" + _GOOD[8:], "magic"),
        (_GOOD[:8] + struct.pack("<H", 2) + _GOOD[10:], "version"),
        (_GOOD[:-1], "length"),
        (_GOOD + b" ", "length"),
        (_GOOD[:16] + struct.pack("<I", crc32c(_GOOD[20:]) ^ 1) + _GOOD[20:], "checksum"),
        # A correct CRC does not make unknown flags or versions acceptable.
        (manifest_envelope(_GOOD[20:], flags=1), "flags"),
        (manifest_envelope(_GOOD[20:], version=2), "version"),
    ],
)
def test_manifest_decode_rejects_bad_envelopes(bad: bytes, message: str) -> None:
    with pytest.raises(CorruptionError, match=message):
        Manifest.decode(bad)


@pytest.mark.parametrize(
    "body",
    [b"", b"{", b"[]", b"null", b"{}", b'{"id": "x"}', b"\xff\xfe", b'{"id":1,"writer_epoch":1}'],
)
def test_manifest_decode_rejects_malformed_bodies(body: bytes) -> None:
    with pytest.raises(CorruptionError):
        Manifest.decode(manifest_envelope(body))


def test_manifest_every_byte_flip_is_detected() -> None:
    data = VALID.encode()
    undetected = []
    for pos in range(len(data)):
        bad = bytearray(data)
        bad[pos] ^= 0x01
        try:
            Manifest.decode(bytes(bad))
        except CorruptionError:
            continue
        undetected.append(pos)
    assert undetected == [], f"byte flips at offsets {undetected} were not detected"


# ===========================================================================
# iterators: merge, visible, retain
# ===========================================================================

E = Entry


@pytest.mark.parametrize(
    "entries, snapshots, kept",
    [
        # newest only, no snapshots
        ([(b"k", 9, b"c"), (b"k", 6, b"b"), (b"k", 2, b"a")], [], [9]),
        # the docstring's example: s=7 sees 6; s=1 sees nothing
        ([(b"k", 9, b"c"), (b"k", 6, b"b"), (b"k", 2, b"a")], [1, 7], [9, 6]),
        # a snapshot exactly at a version's seq sees it
        ([(b"k", 9, b"c"), (b"k", 6, b"b"), (b"k", 2, b"a")], [2, 6], [9, 6, 2]),
        # a snapshot newer than every version sees only the newest
        ([(b"k", 9, b"c"), (b"k", 6, b"b")], [50], [9]),
        # two snapshots between the same versions keep it once
        ([(b"k", 9, b"c"), (b"k", 6, b"b"), (b"k", 2, b"a")], [3, 4, 5], [9, 2]),
        # tombstones are versions like any other
        ([(b"k", 9, None), (b"k", 6, b"b"), (b"k", 2, None)], [3, 8], [9, 6, 2]),
        # independent keys
        ([(b"a", 5, b"1"), (b"a", 3, b"0"), (b"b", 4, b"1"), (b"b", 1, b"0")], [3], [5, 3, 4, 1]),
        ([(b"a", 5, b"1"), (b"a", 3, b"0"), (b"b", 4, b"1"), (b"b", 1, b"0")], [2], [5, 4, 1]),
    ],
)
def test_retain_cases(entries: list[E], snapshots: list[int], kept: list[int]) -> None:
    assert [e[1] for e in retain(iter(entries), snapshots)] == kept


@pytest.mark.parametrize(
    "entries, read_seq, expected",
    [
        ([(b"a", 3, b"new"), (b"a", 1, b"old")], 5, [(b"a", b"new")]),
        ([(b"a", 3, b"new"), (b"a", 1, b"old")], 2, [(b"a", b"old")]),
        ([(b"a", 3, b"new"), (b"a", 1, b"old")], 0, []),
        ([(b"a", 3, None), (b"a", 1, b"old")], 3, []),  # tombstone hides older
        ([(b"a", 3, None), (b"a", 1, b"old")], 2, [(b"a", b"old")]),
        ([(b"a", 3, b""), (b"b", 2, b"x")], 9, [(b"a", b""), (b"b", b"x")]),  # empty value
        ([(b"b", 2, b"x"), (b"a", 3, b"y"), (b"a", 1, b"z")], 2, [(b"b", b"x"), (b"a", b"z")]),
    ],
)
def test_visible_cases(entries: list[E], read_seq: int, expected: list) -> None:
    assert list(visible(iter(entries), read_seq)) == expected


def ref_visible(entries: list[E], read_seq: int) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for key in {e[0] for e in entries}:
        e = ref_get(entries, key, read_seq)
        if e is not None and e[2] is not None:
            out[key] = e[2]
    return out


@PROPERTY
@given(sst_entries(max_keys=12), st.lists(st.integers(0, 320), max_size=5))
def test_retain_keeps_exactly_what_snapshots_see(entries: list[E], snapshots: list[int]) -> None:
    snapshots = sorted(set(snapshots))
    kept = list(retain(iter(entries), snapshots))
    # Exactly: the newest version per key plus each version some snapshot reads.
    expected = set()
    for key in {e[0] for e in entries}:
        versions = [e for e in entries if e[0] == key]
        expected.add(versions[0])
        for s in snapshots:
            seen = ref_get(versions, key, s)
            if seen is not None:
                expected.add(seen)
    assert set(kept) == expected
    assert kept == [e for e in entries if e in expected]  # order preserved
    # Every snapshot (and the latest view) reads the same before and after.
    for s in [*snapshots, (1 << 64) - 1]:
        assert dict(visible(iter(kept), s)) == ref_visible(entries, s)


@PROPERTY
@given(sst_entries(max_keys=20), st.integers(1, 5), st.randoms(use_true_random=False), seq_st)
def test_merge_orders_all_versions(
    entries: list[E], nsources: int, rnd: random.Random, read_seq: int
) -> None:
    parts: list[list[E]] = [[] for _ in range(nsources)]
    for e in entries:
        parts[rnd.randrange(nsources)].append(e)
    fwd = list(merge([iter(p) for p in parts]))
    assert fwd == entries
    rev_sources = [iter(ref_reverse(p, None, None)) for p in parts]
    rev = list(merge(rev_sources, reverse=True))
    assert rev == ref_reverse(entries, None, None)
    expected = ref_visible(entries, read_seq)
    assert dict(visible(iter(fwd), read_seq)) == expected
    assert list(visible(iter(rev), read_seq)) == sorted(expected.items(), reverse=True)


def test_merge_no_sources_and_one_source() -> None:
    assert list(merge([])) == []
    one: list[E] = [(b"a", 1, b"x")]
    assert list(merge([iter(one)], reverse=True)) == one
