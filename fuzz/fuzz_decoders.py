"""Fuzz every decoder with random bytes and damaged valid encodings.

The contract under test (see ``kvstore/errors.py``): a decoder given bytes
either returns the right answer, or raises :class:`kvstore.CorruptionError`.
``BloomFilter`` alone documents :class:`ValueError` for a bad header (the SST
reader turns it into CorruptionError). Anything else that escapes (IndexError,
struct.error, KeyError, MemoryError, OverflowError, RecursionError, zstd
errors, UnicodeDecodeError...) is a bug.

Three kinds of input for each decoder::

    random      arbitrary bytes (and, where cheap, random bytes behind a
                valid header so the fuzzer gets past the first check)
    mutated     a valid encoding with bit flips, truncations, insertions,
                deletions and self-splices applied; where every byte is
                under a checksum, any change must raise CorruptionError
    resealed    the body of a block mutated and its checksum recomputed,
                which is how malformed-but-checksummed content (a buggy
                writer) reaches the layout checks behind the CRC

Under pytest the runs are short, derandomized (same examples every run) and
not shrunk; the test_regression_* functions hold minimal reproductions.
Run the file directly to fuzz for longer with fresh randomness::

    python fuzz/fuzz_decoders.py                 # 20000 examples per fuzzer
    python fuzz/fuzz_decoders.py --examples 200000 -k sst
"""

from __future__ import annotations

import json
import os
import struct
import sys
from collections.abc import Callable
from typing import Any

import pytest
import zstandard
from byte_mutations import Op, any_op, flips, mutate
from crc32c import crc32c
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kvstore import CorruptionError
from kvstore.format import bloom as bloom_format
from kvstore.format.block import decode_data_block, encode_data_block, open_block, seal_block
from kvstore.format.bloom import BloomFilter
from kvstore.format.manifest import Manifest, SstMeta
from kvstore.format.sst import FOOTER, FOOTER_SIZE, MAGIC, build_sst
from kvstore.format.sst_reader import SstReader
from kvstore.format.wal import (
    HEADER_SIZE,
    OBJECT_HEADER_SIZE,
    SEGMENT_HEADER_SIZE,
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

Entry = tuple[bytes, int, "bytes | None"]

_LONG = os.environ.get("KVSTORE_FUZZ_EXAMPLES")
if _LONG:  # run directly: many examples, fresh randomness, failures saved for replay
    FUZZ = settings(max_examples=int(_LONG), deadline=None, suppress_health_check=list(HealthCheck))
else:  # under pytest: short, the same every run, and unshrunk (the regression tests are minimal)
    FUZZ = settings(
        max_examples=150,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],
        report_multiple_bugs=False,
    )
MAX_SEQ = (1 << 64) - 1


# ---------------------------------------------------------------------------
# mutations (the operations and `mutate` are shared with tests/test_speedups.py)
# ---------------------------------------------------------------------------

mutations = st.lists(any_op, min_size=1, max_size=4)


def only_corruption(fn: Callable[[], Any]) -> tuple[bool, Any]:
    """(True, result) or (False, error); any exception but CorruptionError propagates."""
    try:
        return True, fn()
    except CorruptionError as exc:
        return False, exc


# ---------------------------------------------------------------------------
# WAL frames: decode_frames, decode_payload
# ---------------------------------------------------------------------------

value_st = st.one_of(st.none(), st.binary(max_size=24))


@st.composite
def wal_records(draw: st.DrawFn) -> list[WalRecord]:
    out = []
    for _ in range(draw(st.integers(1, 5))):
        keys = draw(st.lists(st.binary(max_size=10), max_size=5, unique=True))
        out.append(WalRecord(draw(st.integers(0, MAX_SEQ)), keys, [draw(value_st) for _ in keys]))
    return out


def encode_frames(records: list[WalRecord]) -> bytes:
    """Frames only: the body of a journal segment or a WAL object."""
    return b"".join(encode_record(r.seq, r.keys, r.values) for r in records)


def check_frames(data: bytes) -> None:
    """decode_frames returns a self-consistent result or raises CorruptionError."""
    ok, seg = only_corruption(lambda: decode_frames(data, where="fuzz"))
    if not ok:
        return
    check_frames_result(data, seg)


def check_frames_result(data: bytes, seg: Any) -> None:
    assert 0 <= seg.valid_length <= len(data)
    assert seg.torn == (seg.valid_length < len(data))
    for rec in seg.records:
        assert len(rec.keys) == len(rec.values)
        assert decode_payload(encode_record(rec.seq, rec.keys, rec.values)[HEADER_SIZE:]) == rec
    if seg.torn:  # what was cut (docs/format/wal.md, torn-tail rule) is a short
        # header, an incomplete frame, zeros, or one bad frame before zero padding
        tail = data[seg.valid_length :]
        if len(tail) >= HEADER_SIZE and any(tail):
            (length,) = struct.unpack_from("<I", tail, 0)
            end = HEADER_SIZE + length  # the frame's end, if its header is valid
            assert (
                end > len(tail)
                or (len(tail) > HEADER_SIZE and not any(tail[HEADER_SIZE:]))
                or (len(tail) > end and not any(tail[end:]))
            )


@FUZZ
@given(st.binary(max_size=400))
def test_decode_frames_random(data: bytes) -> None:
    check_frames(data)


@FUZZ
@given(st.lists(st.binary(max_size=80), min_size=1, max_size=4), st.binary(max_size=20))
def test_decode_frames_random_payloads(payloads: list[bytes], tail: bytes) -> None:
    """Random payloads behind valid frame headers reach decode_payload."""
    check_frames(b"".join(map(encode_frame, payloads)) + tail)


@FUZZ
@given(wal_records(), mutations)
def test_decode_frames_mutated(records: list[WalRecord], ops: list[Op]) -> None:
    original = encode_frames(records)
    data = mutate(original, ops)
    if data == original:
        assert decode_frames(data).records == records
        return
    check_frames(data)
    if all(op[0] == "truncate" for op in ops):
        seg = decode_frames(data)  # a cut segment is a torn tail, never corruption
        assert seg.records == records[: len(seg.records)]


@FUZZ
@given(wal_records(), flips)
def test_decode_frames_flips_are_corruption(records: list[WalRecord], ops: list[Op]) -> None:
    """Every byte of a frame is under a CRC: a flip anywhere must be reported."""
    original = encode_frames(records)
    data = mutate(original, ops)
    if data == original:
        return
    ok, seg = only_corruption(lambda: decode_frames(data))
    if ok:  # only acceptable if all after the damaged frame's header is zero
        assert seg.torn and not any(data[seg.valid_length + HEADER_SIZE :]), "damaged frame decoded"


@FUZZ
@given(st.binary(max_size=200))
def test_decode_payload_random(payload: bytes) -> None:
    check_payload(payload)


@st.composite
def near_valid_payloads(draw: st.DrawFn) -> bytes:
    """Header, kinds and length columns that almost add up."""
    n = draw(st.integers(0, 6))
    kinds = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    klens = draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
    vlens = draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
    body = draw(st.binary(min_size=0, max_size=sum(klens) + sum(vlens) + 4))
    claimed = draw(st.sampled_from([n, n, n + 1, max(n - 1, 0), 0xFFFFFFFF, 1 << 30]))
    return b"".join(
        (
            struct.pack("<QI", draw(st.integers(0, MAX_SEQ)), claimed),
            bytes(kinds),
            struct.pack(f"<{n}I", *klens),
            struct.pack(f"<{n}I", *vlens),
            body,
        )
    )


def check_payload(payload: bytes) -> None:
    ok, rec = only_corruption(lambda: decode_payload(payload, where="fuzz"))
    if ok:
        assert len(rec.keys) == len(rec.values)
        assert decode_payload(encode_record(rec.seq, rec.keys, rec.values)[HEADER_SIZE:]) == rec


@FUZZ
@given(near_valid_payloads())
def test_decode_payload_near_valid(payload: bytes) -> None:
    check_payload(payload)


@FUZZ
@given(wal_records(), mutations)
def test_decode_payload_mutated(records: list[WalRecord], ops: list[Op]) -> None:
    r = records[0]
    original = encode_record(r.seq, r.keys, r.values)[HEADER_SIZE:]
    payload = mutate(original, ops)
    if payload == original:
        assert decode_payload(payload) == r
    else:
        check_payload(payload)


# ---------------------------------------------------------------------------
# WAL containers: decode_segment (journal .log), decode_object (.wal)
# ---------------------------------------------------------------------------


def seg_head(version: int = 1, flags: int = 0, magic: bytes = b"KVWLOG\x00\x01") -> bytes:
    head = struct.pack("<8sHH", magic, version, flags)
    return head + struct.pack("<I", crc32c(head))


def obj_head(
    body_len: int, frames: int, flags: int = 0, version: int = 1, magic: bytes = b"KVWOBJ\x00\x01"
) -> bytes:
    head = struct.pack("<8sHHII", magic, version, flags, body_len, frames)
    return head + struct.pack("<I", crc32c(head))


def test_container_helpers_match_encoders() -> None:
    assert seg_head() == segment_header()
    assert obj_head(0, 0, flags=1) == fence_object()
    frames = encode_frames([WalRecord(1, [b"k"], [b"v"])])
    assert obj_head(len(frames), 1) + frames == encode_object(frames, 1)


def encode_journal(records: list[WalRecord]) -> bytes:
    return segment_header() + encode_frames(records)


def check_journal(data: bytes) -> Any:
    """decode_segment: a self-consistent result or CorruptionError; returns the result."""
    ok, seg = only_corruption(lambda: decode_segment(data, where="fuzz"))
    if not ok:
        return None
    assert 0 <= seg.valid_length <= len(data)
    assert seg.torn == (seg.valid_length < len(data))
    if len(data) < SEGMENT_HEADER_SIZE or seg.valid_length == 0:
        # no (complete) header: nothing was ever durable in this segment
        # (or a torn header before zero padding: a preallocated segment's first append)
        assert seg.records == [] and not any(data[SEGMENT_HEADER_SIZE:])
        return seg
    assert data[:SEGMENT_HEADER_SIZE] == segment_header()  # the only header accepted
    check_frames_result(data[SEGMENT_HEADER_SIZE:], _shifted(seg))
    assert decode_frames(data[SEGMENT_HEADER_SIZE:]).records == seg.records
    return seg


def _shifted(seg: Any) -> Any:
    """The segment's result as decode_frames would give it for the body alone."""
    return type(seg)(seg.records, seg.valid_length - SEGMENT_HEADER_SIZE, seg.torn)


def check_object(data: bytes) -> Any:
    """decode_object: ``(records, is_fence)`` agreeing with the header, or
    CorruptionError (objects are written whole: nothing is ever cut)."""
    ok, got = only_corruption(lambda: decode_object(data, where="fuzz"))
    if not ok:
        return None
    records, fence = got
    if fence:
        assert records == [] and data == fence_object()
        return got
    # (frames are not canonical - a delete's value bytes are ignored - so compare
    # the header and the frames' decoding, not re-encoded bytes)
    assert data[:OBJECT_HEADER_SIZE] == obj_head(len(data) - OBJECT_HEADER_SIZE, len(records))
    body = decode_frames(data[OBJECT_HEADER_SIZE:])
    assert body.records == records and not body.torn
    return got


@FUZZ
@given(st.binary(max_size=400))
def test_decode_segment_random(data: bytes) -> None:
    check_journal(data)


@FUZZ
@given(st.binary(max_size=300), st.sampled_from([0, 1, 2]), st.sampled_from([0, 1, 0x8000]))
def test_decode_segment_random_body(body: bytes, version: int, flags: int) -> None:
    """Random bytes behind a checksummed segment header, right or not."""
    check_journal(seg_head(version, flags) + body)
    if (version, flags) != (1, 0):
        ok, _ = only_corruption(lambda: decode_segment(seg_head(version, flags) + body))
        assert not ok, "a segment with an unknown version or flags decoded"


@FUZZ
@given(st.lists(st.binary(max_size=80), min_size=1, max_size=4), st.binary(max_size=20))
def test_decode_segment_random_payloads(payloads: list[bytes], tail: bytes) -> None:
    check_journal(segment_header() + b"".join(map(encode_frame, payloads)) + tail)


@FUZZ
@given(wal_records(), mutations)
def test_decode_segment_mutated(records: list[WalRecord], ops: list[Op]) -> None:
    original = encode_journal(records)
    data = mutate(original, ops)
    if data == original:
        seg = decode_segment(data)
        assert seg.records == records and not seg.torn
        return
    seg = check_journal(data)
    if all(op[0] == "truncate" for op in ops):
        # a cut journal is a torn tail, never corruption, and keeps a prefix
        assert seg is not None, "a truncated journal segment raised"
        assert seg.records == records[: len(seg.records)]


@FUZZ
@given(wal_records(), st.data())
def test_decode_segment_truncated_keeps_a_prefix(records: list[WalRecord], data: Any) -> None:
    original = encode_journal(records)
    cut = data.draw(st.integers(0, len(original)))
    seg = decode_segment(original[:cut])
    ends = [SEGMENT_HEADER_SIZE]
    for r in records:
        ends.append(ends[-1] + len(encode_record(r.seq, r.keys, r.values)))
    whole = sum(e <= cut for e in ends[1:])
    assert seg.records == records[:whole]
    assert seg.valid_length == (ends[whole] if cut >= SEGMENT_HEADER_SIZE else 0)
    assert seg.torn == (cut != seg.valid_length)


@FUZZ
@given(wal_records(), flips)
def test_decode_segment_flips_are_corruption(records: list[WalRecord], ops: list[Op]) -> None:
    """Header and frames are under CRCs: a flip is reported unless everything
    after the damaged frame's header (or the segment's) is zero."""
    original = encode_journal(records)
    data = mutate(original, ops)
    if data == original:
        return
    ok, seg = only_corruption(lambda: decode_segment(data))
    if ok:
        assert seg.torn and not any(data[seg.valid_length + HEADER_SIZE :]), (
            "damaged segment decoded"
        )


@FUZZ
@given(st.binary(max_size=400))
def test_decode_object_random(data: bytes) -> None:
    check_object(data)


@FUZZ
@given(
    st.binary(max_size=300),
    st.integers(0, 8),
    st.sampled_from([0, 0, 1, 2, 3]),
    st.sampled_from([1, 1, 1, 0, 2]),
    st.integers(-2, 2),
)
def test_decode_object_random_body(
    body: bytes, count: int, flags: int, version: int, skew: int
) -> None:
    """Random bodies behind a checksummed header whose length is right or nearly."""
    check_object(obj_head(max(0, len(body) + skew), count, flags, version) + body)


@FUZZ
@given(st.lists(st.binary(max_size=80), max_size=4), st.integers(-1, 1), st.booleans())
def test_decode_object_random_payloads(payloads: list[bytes], skew: int, fence: bool) -> None:
    """Random payloads behind valid frame headers and a valid object header."""
    body = b"".join(map(encode_frame, payloads))
    count = len(payloads) + skew
    if count < 0:
        return
    got = check_object(obj_head(len(body), count, int(fence)) + body)
    if got is not None:
        assert count == len(payloads), "an object with a wrong frame count decoded"
        assert not fence or not payloads, "a fence with frames decoded"


@FUZZ
@given(wal_records(), mutations, st.booleans())
def test_decode_object_mutated_is_corruption(
    records: list[WalRecord], ops: list[Op], fence: bool
) -> None:
    """Every byte of an object is under a CRC and its size is in its header: any
    change (a flip, a cut, an insertion, zeros) must raise CorruptionError."""
    original = fence_object() if fence else encode_object(encode_frames(records), len(records))
    data = mutate(original, ops)
    if data == original:
        assert decode_object(data) == (([], True) if fence else (records, False))
        return
    ok, got = only_corruption(lambda: decode_object(data))
    assert not ok, f"a damaged WAL object decoded: {got}"


@FUZZ
@given(wal_records(), st.data())
def test_decode_object_truncated_is_corruption(records: list[WalRecord], data: Any) -> None:
    original = encode_object(encode_frames(records), len(records))
    cut = data.draw(st.integers(0, len(original) - 1))
    ok, _ = only_corruption(lambda: decode_object(original[:cut]))
    assert not ok, f"WAL object cut to {cut} of {len(original)} bytes decoded"


def test_regression_object_cut_at_a_frame_boundary() -> None:
    """Before containers, an object cut exactly after a frame decoded as a shorter object."""
    records = [WalRecord(1, [b"a"], [b"x"]), WalRecord(2, [b"b"], [b"y"])]
    first = len(encode_frames(records[:1]))
    original = encode_object(encode_frames(records), 2)
    for cut in (0, OBJECT_HEADER_SIZE, OBJECT_HEADER_SIZE + first):
        with pytest.raises(CorruptionError):
            decode_object(original[:cut])


# ---------------------------------------------------------------------------
# SST blocks: open_block, decode_data_block
# ---------------------------------------------------------------------------

_ZSTD = zstandard.ZstdCompressor(level=1)


def forged_zstd_frame(content_size: int) -> bytes:
    """A zstd frame whose header claims ``content_size`` bytes (8-byte FCS field)."""
    frame = _ZSTD.compress(b"a" * 1000)
    assert frame[4] == 0x60  # single segment, 2-byte content size
    return frame[:4] + b"\xe0" + struct.pack("<Q", content_size) + frame[7:]


def seal_raw(body: bytes, kind: int) -> bytes:
    head = body + bytes((kind,))
    return head + struct.pack("<I", crc32c(head))


def check_open_block(stored: bytes) -> None:
    ok, body = only_corruption(lambda: open_block(stored, where="fuzz"))
    if ok:
        assert isinstance(body, bytes)


@FUZZ
@given(st.binary(max_size=200))
def test_open_block_random(stored: bytes) -> None:
    check_open_block(stored)


@FUZZ
@given(st.binary(max_size=300), st.booleans(), mutations)
def test_open_block_mutated_is_corruption(body: bytes, zstd: bool, ops: list[Op]) -> None:
    original = seal_block(body, _ZSTD if zstd else None)
    stored = mutate(original, ops)
    if stored == original:
        assert open_block(stored, where="fuzz") == body
        return
    ok, _ = only_corruption(lambda: open_block(stored, where="fuzz"))
    assert not ok, "a damaged block passed its checksum"


@FUZZ
@given(st.binary(min_size=1, max_size=300), mutations, st.sampled_from([0, 1, 2, 255]))
def test_open_block_resealed(body: bytes, ops: list[Op], kind: int) -> None:
    """A damaged zstd frame (or raw body) under a valid CRC: decompress or CorruptionError."""
    frame = _ZSTD.compress(body) if kind == 1 else body
    mutated = mutate(frame, ops)
    if mutated == frame and kind in (0, 1):  # unchanged: a valid block
        assert open_block(seal_raw(mutated, kind), where="fuzz") == body
        return
    check_open_block(seal_raw(mutated, kind))


def test_regression_open_block_zstd_claims_huge_output() -> None:
    """Found by test_open_block_resealed: the frame header's content size is trusted."""
    check_open_block(seal_raw(forged_zstd_frame(1 << 62), 1))


@st.composite
def block_entries(draw: st.DrawFn) -> list[Entry]:
    keys = sorted(
        draw(
            st.sets(
                st.lists(st.sampled_from(b"ab\x00\xff"), max_size=6).map(bytes),
                min_size=1,
                max_size=40,
            )
        )
    )
    out: list[Entry] = []
    seq = 10_000
    for key in keys:
        for _ in range(draw(st.integers(1, 3))):
            seq -= draw(st.integers(1, 50))
            out.append((key, seq, draw(value_st)))
    return out


def check_data_block(body: bytes) -> None:
    ok, blk = only_corruption(lambda: decode_data_block(body, where="fuzz"))
    if not ok:
        return
    n = len(blk.keys)
    assert n >= 1 and len(blk.seqs) == n and len(blk.values) == n
    for i in range(1, n):  # what the decoder hands out is in internal order
        a, b = (blk.keys[i - 1], -blk.seqs[i - 1]), (blk.keys[i], -blk.seqs[i])
        assert a < b, f"entries {i - 1} and {i} out of order: {a} {b}"


@FUZZ
@given(st.binary(max_size=300))
def test_decode_data_block_random(body: bytes) -> None:
    check_data_block(body)


@FUZZ
@given(block_entries(), mutations)
def test_decode_data_block_mutated(entries: list[Entry], ops: list[Op]) -> None:
    original = encode_data_block(entries)
    body = mutate(original, ops)
    if body == original and entries == sorted(entries, key=lambda e: (e[0], -e[1])):
        blk = decode_data_block(body, where="fuzz")
        assert list(zip(blk.keys, blk.seqs, blk.values)) == entries
        return
    check_data_block(body)


def test_regression_data_block_versions_out_of_order() -> None:
    """Two versions of one key with seqs ascending: the decoder must not hand them out."""
    check_data_block(encode_data_block([(b"a", 1, b"x"), (b"a", 2, b"y")]))


# ---------------------------------------------------------------------------
# SST files: SstReader construction, full iteration, gets
# ---------------------------------------------------------------------------


class DictCache:
    def __init__(self) -> None:
        self.items: dict[Any, Any] = {}

    def get(self, key: Any) -> Any:
        return self.items.get(key)

    def put(self, key: Any, value: Any, charge: int) -> None:
        self.items[key] = value


def read_everything(data: bytes, entries: list[Entry], cached: bool) -> tuple[Any, ...]:
    """Open an SST over ``data`` and read it every way there is."""
    r = SstReader(
        lambda off, n: data[off : off + n],
        len(data),
        name="fuzz",
        block_cache=DictCache() if cached else None,
    )
    keys = sorted({e[0] for e in entries})
    probes = [*keys, b"", b"\xff" * 8, *(k + b"\x00" for k in keys[:3])]
    gets = [r.get(k, MAX_SEQ) for k in probes] + [r.get(k, s) for k, s, _ in entries]
    gets += [r.get(k, s - 1) for k, s, _ in entries[:5]]
    mid = keys[len(keys) // 2]
    scans = (
        list(r.iter_forward(None, None)),
        list(r.iter_reverse(None, None)),
        list(r.iter_forward(mid, None)),
        list(r.iter_reverse(None, mid)),
        list(r.iter_forward(keys[0], mid)),
    )
    props = (r.count, r.tombstones, r.min_seq, r.max_seq, r.first_key, r.last_key)
    return props, gets, scans


@st.composite
def sst_files(draw: st.DrawFn) -> tuple[bytes, list[Entry]]:
    entries = draw(block_entries())
    data, _ = build_sst(
        entries,
        block_bytes=draw(st.sampled_from([1, 40, 120, 4096])),
        bloom_bits_per_key=draw(st.sampled_from([0, 10])),
        compression=draw(st.sampled_from(["none", "zstd"])),
    )
    return data, entries


@FUZZ
@given(st.binary(max_size=300), st.booleans())
def test_sst_random_bytes(data: bytes, with_magic: bool) -> None:
    if with_magic:
        data += MAGIC
    only_corruption(lambda: read_everything(data, [(b"a", 1, None)], False))


@FUZZ
@given(st.binary(max_size=300), st.data())
def test_sst_random_body_valid_footer(body: bytes, data: st.DataObject) -> None:
    """A checksummed footer whose offsets tile a random body."""
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), min_size=3, max_size=3)))
    a, b, c = cuts
    head = FOOTER.pack(a, b - a, b, c - b, c, len(body) - c, 1, 0, 0, MAGIC)[: FOOTER_SIZE - 12]
    sst = body + head + struct.pack("<I", crc32c(head)) + MAGIC
    only_corruption(lambda: read_everything(sst, [(b"a", 1, None)], data.draw(st.booleans())))


@FUZZ
@given(sst_files(), mutations, st.booleans())
def test_sst_mutated_is_corruption(
    sst: tuple[bytes, list[Entry]], ops: list[Op], cached: bool
) -> None:
    """Every byte of an SST is under a checksum: reading it all must notice any change."""
    original, entries = sst
    data = mutate(original, ops)
    expected = read_everything(original, entries, cached)
    assert expected[2][0] == entries
    if data == original:
        assert read_everything(data, entries, cached) == expected
        return
    ok, got = only_corruption(lambda: read_everything(data, entries, cached))
    assert not ok, "damaged SST read without error" + (
        " (and answered differently)" if got != expected else ""
    )


def split_sst(data: bytes) -> dict[str, Any]:
    """Decompressed bodies of every block, per docs/format/sst.md."""
    fields = FOOTER.unpack(data[-FOOTER_SIZE:])
    bloom_off, bloom_len, index_off, index_len, props_off, props_len = fields[:6]
    index = open_block(data[index_off : index_off + index_len], where="index")
    (n,) = struct.unpack_from("<I", index, 0)
    offsets = struct.unpack_from(f"<{n}Q", index, 4)
    sizes = struct.unpack_from(f"<{n}I", index, 4 + 8 * n)
    first_seqs = struct.unpack_from(f"<{n}Q", index, 4 + 12 * n)
    klens = struct.unpack_from(f"<{n}H", index, 4 + 20 * n)
    pos = 4 + 22 * n
    first_keys = []
    for kl in klens:
        first_keys.append(index[pos : pos + kl])
        pos += kl
    return {
        "data": [open_block(data[o : o + s], where="d") for o, s in zip(offsets, sizes)],
        "bloom": open_block(data[bloom_off:index_off], where="b") if bloom_len else None,
        "index": index,
        "props": open_block(data[props_off : props_off + props_len], where="p"),
        "first_seqs": first_seqs,
        "first_keys": first_keys,
        "footer_tail": fields[6:8],  # version, flags
    }


def assemble(parts: dict[str, Any], index: bytes | None = None) -> bytes:
    """Lay blocks out again (uncompressed) with a footer whose offsets and CRC are right."""
    out, offsets, sizes, pos = [], [], [], 0
    for body in parts["data"]:
        stored = seal_block(body, None)
        offsets.append(pos)
        sizes.append(len(stored))
        out.append(stored)
        pos += len(stored)
    n = len(offsets)
    if index is None:
        index = b"".join(
            (
                struct.pack(f"<I{n}Q", n, *offsets),
                struct.pack(f"<{n}I", *sizes),
                struct.pack(f"<{n}Q", *parts["first_seqs"]),
                struct.pack(f"<{n}H", *map(len, parts["first_keys"])),
                *parts["first_keys"],
            )
        )
    bloom = seal_block(parts["bloom"], None) if parts["bloom"] is not None else b""
    index_stored = seal_block(index, None)
    props = seal_block(parts["props"], None)
    bloom_off = pos
    index_off = bloom_off + len(bloom)
    props_off = index_off + len(index_stored)
    version, flags = parts["footer_tail"]
    head = FOOTER.pack(
        bloom_off,
        len(bloom),
        index_off,
        len(index_stored),
        props_off,
        len(props),
        version,
        flags,
        0,
        MAGIC,
    )[: FOOTER_SIZE - 12]
    return b"".join(
        (*out, bloom, index_stored, props, head, struct.pack("<I", crc32c(head)), MAGIC)
    )


@FUZZ
@given(
    sst_files(),
    st.sampled_from(["data", "bloom", "index", "props", "footer"]),
    mutations,
    st.data(),
)
def test_sst_resealed(
    sst: tuple[bytes, list[Entry]], target: str, ops: list[Op], data: st.DataObject
) -> None:
    """Damage one block's body, fix every checksum: CorruptionError or an answer, nothing else."""
    original, entries = sst
    parts = split_sst(original)
    assert read_everything(assemble(parts), entries, False)[2][0] == entries
    index = None
    if target == "data":
        i = data.draw(st.integers(0, len(parts["data"]) - 1))
        parts["data"][i] = mutate(parts["data"][i], ops)
    elif target == "bloom" and parts["bloom"] is not None:
        parts["bloom"] = mutate(parts["bloom"], ops)
    elif target == "index":
        index = mutate(parts["index"], ops)
    elif target == "props":
        parts["props"] = mutate(parts["props"], ops)
    elif target == "footer":
        parts["footer_tail"] = (data.draw(st.integers(0, 3)), data.draw(st.integers(0, 0xFFFF)))
    damaged = assemble(parts, index)
    cached = data.draw(st.booleans())
    if damaged == assemble(split_sst(original)):  # nothing changed: a valid file
        assert read_everything(damaged, entries, cached)[2][0] == entries
        return
    only_corruption(lambda: read_everything(damaged, entries, cached))


# ---------------------------------------------------------------------------
# bloom filter
# ---------------------------------------------------------------------------


def check_bloom(data: bytes, probes: list[bytes]) -> None:
    try:
        bf = BloomFilter(data)
    except ValueError:
        return  # documented: a header that does not match the size
    for key in probes:
        assert bf.may_contain(key) in (True, False)


@FUZZ
@given(st.binary(max_size=300), st.lists(st.binary(max_size=8), max_size=5))
def test_bloom_random(data: bytes, probes: list[bytes]) -> None:
    check_bloom(data, probes)


@FUZZ
@given(
    st.integers(0, 255),
    st.integers(0, 4),
    st.integers(-2, 2),
    st.binary(max_size=8),
    st.lists(st.binary(max_size=8), max_size=5),
)
def test_bloom_random_header(
    k: int, nblocks: int, skew: int, fill: bytes, probes: list[bytes]
) -> None:
    size = max(0, nblocks * bloom_format.BLOCK_BYTES + skew)
    body = (fill or b"\x00") * (size // max(len(fill), 1) + 1)
    check_bloom(struct.pack("<BI", k, nblocks) + body[:size], probes)


@FUZZ
@given(st.sets(st.binary(max_size=12), max_size=50), st.integers(0, 20), mutations)
def test_bloom_mutated(keys: set[bytes], bits: int, ops: list[Op]) -> None:
    original = bloom_format.build(keys, len(keys), bits)
    data = mutate(original, ops)
    if data == original:
        bf = BloomFilter(data)
        assert all(bf.may_contain(k) for k in keys)
    else:
        check_bloom(data, [*sorted(keys)[:5], b"absent"])


# ---------------------------------------------------------------------------
# manifest
# ---------------------------------------------------------------------------

_HEAD = struct.Struct("<8sHHII")


def envelope(body: bytes) -> bytes:
    """A manifest envelope with a correct CRC (over the 16 header bytes and the body)."""
    head = _HEAD.pack(b"KVMANIF1", 1, 0, len(body), 0)[:16]
    return head + struct.pack("<I", crc32c(head + body)) + body


def test_envelope_matches_encode() -> None:
    data = Manifest(id=3, writer_epoch=1).encode()
    assert envelope(data[_HEAD.size :]) == data


sst_meta_st = st.builds(
    SstMeta,
    id=st.text(min_size=1, max_size=12),
    size=st.integers(0, 1 << 40),
    count=st.integers(0, 1 << 40),
    tombstones=st.integers(0, 1 << 40),
    min_seq=st.integers(0, MAX_SEQ),
    max_seq=st.integers(0, MAX_SEQ),
    first_key=st.binary(max_size=10),
    last_key=st.binary(max_size=10),
)
_other_fields = dict(
    id=st.integers(1, 1 << 40),
    writer_epoch=st.integers(0, 1 << 40),
    wal_replay_from=st.integers(0, 1 << 40),
    checkpoints=st.dictionaries(
        st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=2
    ),
    created_ms=st.integers(0, 1 << 45),
)
#: any field values: most break an invariant, which decode reports as corruption
any_manifest_st = st.builds(
    Manifest,
    last_flushed_seq=st.integers(0, MAX_SEQ),
    l0=st.lists(sst_meta_st, max_size=3).map(tuple),
    runs=st.lists(st.lists(sst_meta_st, max_size=2).map(tuple), max_size=2).map(tuple),
    **_other_fields,
)


def _sst(draw: st.DrawFn, sst_id: str, seqs: tuple[int, int], keys: tuple[bytes, bytes]) -> SstMeta:
    return SstMeta(
        sst_id,
        draw(st.integers(0, 1 << 40)),
        draw(st.integers(0, 1 << 40)),
        draw(st.integers(0, 1 << 40)),
        seqs[0],
        seqs[1],
        keys[0],
        keys[1],
    )


@st.composite
def valid_manifests(draw: st.DrawFn) -> Manifest:
    """Manifests that pass Manifest.check, built to (see docs/format/manifest.md)."""
    n_l0 = draw(st.integers(0, 3))
    run_sizes = draw(st.lists(st.integers(0, 2), max_size=2))
    total = n_l0 + sum(run_sizes)
    ids = iter(
        draw(
            st.lists(st.text(min_size=1, max_size=12), min_size=total, max_size=total, unique=True)
        )
    )
    bounds = sorted(
        draw(st.lists(st.integers(0, MAX_SEQ), min_size=2 * n_l0, max_size=2 * n_l0, unique=True)),
        reverse=True,
    )
    l0 = []
    for i in range(n_l0):  # newest first: descending, disjoint seq ranges
        first, last = sorted((draw(st.binary(max_size=10)), draw(st.binary(max_size=10))))
        l0.append(_sst(draw, next(ids), (bounds[2 * i + 1], bounds[2 * i]), (first, last)))
    runs = []
    for size in run_sizes:  # ascending, disjoint key ranges
        run_keys = sorted(
            draw(
                st.lists(st.binary(max_size=10), min_size=2 * size, max_size=2 * size, unique=True)
            )
        )
        run = []
        for j in range(size):
            lo, hi = sorted((draw(st.integers(0, MAX_SEQ)), draw(st.integers(0, MAX_SEQ))))
            run.append(_sst(draw, next(ids), (lo, hi), (run_keys[2 * j], run_keys[2 * j + 1])))
        runs.append(tuple(run))
    covered = max((s.max_seq for s in [*l0, *(x for r in runs for x in r)]), default=0)
    manifest_id: int = draw(st.integers(1, 1 << 40))
    checkpoint = st.builds(  # as the store writes them: naming an earlier manifest
        lambda mid, extra: {**extra, "manifest_id": mid},
        st.integers(1, manifest_id),
        st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=2),
    )
    m = draw(
        st.builds(
            Manifest,
            last_flushed_seq=st.integers(covered, MAX_SEQ),
            l0=st.just(tuple(l0)),
            runs=st.just(tuple(runs)),
            **{
                **_other_fields,
                "id": st.just(manifest_id),
                "checkpoints": st.dictionaries(st.text(max_size=5), checkpoint, max_size=2),
            },
        )
    )
    m.check()
    return m


manifest_st = valid_manifests()


def check_manifest(data: bytes) -> None:
    ok, m = only_corruption(lambda: Manifest.decode(data, where="fuzz"))
    if ok:
        assert isinstance(m, Manifest)


@FUZZ
@given(st.binary(max_size=300))
def test_manifest_random(data: bytes) -> None:
    check_manifest(data)


@FUZZ
@given(any_manifest_st)
def test_manifest_invariants_checked_on_decode(m: Manifest) -> None:
    """decode(encode(m)) is m exactly when m passes check(); otherwise CorruptionError."""
    try:
        m.check()
        valid = True
    except AssertionError:
        valid = False
    ok, got = only_corruption(lambda: Manifest.decode(m.encode()))
    assert ok == valid, f"check() says {valid}, decode says {ok}: {got}"
    if ok:
        assert got == m


@FUZZ
@given(manifest_st, mutations)
def test_manifest_mutated_is_corruption(m: Manifest, ops: list[Op]) -> None:
    """Every byte of a manifest is checked: any change must raise CorruptionError."""
    check_manifest_damage(m, ops)


def check_manifest_damage(m: Manifest, ops: list[Op]) -> None:
    original = m.encode()
    data = mutate(original, ops)
    if data == original:
        assert Manifest.decode(data) == m
        return
    ok, got = only_corruption(lambda: Manifest.decode(data))
    assert not ok, f"damaged manifest decoded ({'same' if got == m else 'different'} content)"


def test_regression_manifest_flags_flip() -> None:
    """The header's flags field (offset 10) is neither checked nor checksummed."""
    check_manifest_damage(Manifest(id=7, writer_epoch=2), [("flip", 10, 0x01)])


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 70), 1 << 70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([float("inf"), float("-inf"), float("nan"), 1e300, -1.5]),
    st.text(max_size=8),
    st.sampled_from(["00", "zz", "abc", "0"]),
)
json_any = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner)
    ),
    max_leaves=10,
)
FIELDS = [
    "id",
    "writer_epoch",
    "last_flushed_seq",
    "wal_replay_from",
    "l0",
    "runs",
    "retention_seq",
    "checkpoints",
    "created_ms",
]


#: values that convert badly: int(inf) overflows, int(nan) and int("x") do not parse
ODD_VALUES: list[Any] = [float("inf"), float("-inf"), float("nan"), 1e300, "x", "", [], {}, None]


@st.composite
def manifest_documents(draw: st.DrawFn) -> bytes:
    """JSON bodies shaped like a manifest, each field valid, absent or arbitrary."""
    valid = json.loads(draw(manifest_st).encode()[_HEAD.size :])
    doc: dict[str, Any] = {}
    for name in FIELDS:
        choice = draw(st.sampled_from(["valid", "valid", "absent", "any", "odd"]))
        if choice == "valid":
            doc[name] = valid[name]
        elif choice == "any":
            doc[name] = draw(st.one_of(json_leaf, json_any))
        elif choice == "odd":
            doc[name] = draw(st.sampled_from(ODD_VALUES))
    if valid["l0"] and draw(st.booleans()):  # damage one field of one SST
        field = draw(st.sampled_from(sorted(valid["l0"][0])))
        doc["l0"] = [{**valid["l0"][0], field: draw(json_any)}]
    return json.dumps(doc).encode()


DEEP = b"[" * 100_000 + b"]" * 100_000
HUGE_FLOAT = (
    b'{"id":1e400,"writer_epoch":1,"last_flushed_seq":0,"wal_replay_from":1,"l0":[],"runs":[]}'
)


@FUZZ
@given(manifest_documents())
def test_manifest_resealed_documents(body: bytes) -> None:
    """Manifest-shaped JSON with wrong types and values under a valid checksum."""
    check_manifest(envelope(body))


@FUZZ
@given(st.one_of(manifest_documents(), st.binary(max_size=200)), mutations)
def test_manifest_resealed_bytes(body: bytes, ops: list[Op]) -> None:
    """Damaged JSON or random bytes under a valid checksum: a Manifest or CorruptionError."""
    check_manifest(envelope(mutate(body, ops)))


def test_regression_manifest_float_overflow() -> None:
    """int(1e400) in Manifest.decode raises OverflowError."""
    check_manifest(envelope(HUGE_FLOAT))


def test_regression_manifest_deep_nesting() -> None:
    """json.loads of deeply nested arrays raises RecursionError."""
    check_manifest(envelope(DEEP))


# ---------------------------------------------------------------------------
# running for longer
# ---------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    """Run this file's fuzzers under pytest in a child process with more examples."""
    import argparse
    import subprocess

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=20_000, help="examples per fuzzer")
    parser.add_argument("-k", default=None, help="only fuzzers matching this pytest expression")
    args, rest = parser.parse_known_args(argv)
    env = {**os.environ, "KVSTORE_FUZZ_EXAMPLES": str(args.examples)}
    cmd = [sys.executable, "-m", "pytest", os.path.abspath(__file__), "-q", "--timeout=0"]
    cmd += ["-p", "no:cacheprovider", *(["-k", args.k] if args.k else []), *rest]
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
