"""The deletion-vector format (:mod:`lakehouse.data.dv`): round trips and damage detection.

The reference model of a set of positions is a Python ``set``; every
damaged encoding must raise :class:`~lakehouse.errors.CorruptionError`
with a message saying what is wrong.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap, FrozenBitMap

from lakehouse.data import dv
from lakehouse.errors import CorruptionError

FAST = settings(
    max_examples=100, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
MAX = dv.MAX_POSITION


def seal(payload: bytes, cardinality: int, *, magic: bytes = dv.MAGIC, version: int = 1) -> bytes:
    """A deletion vector assembled by hand, with a correct checksum."""
    head = struct.pack("<4sBQ", magic, version, cardinality)
    return head + struct.pack("<I", crc32c(head + payload)) + payload


def round_trip(positions: Iterable[int]) -> BitMap:
    expected = sorted(set(positions))
    data = dv.encode(dv.from_positions(expected))
    got = dv.decode(data)
    assert isinstance(got, BitMap)
    assert list(got) == expected
    assert dv.encode(got) == data  # canonical: equal sets, equal bytes
    return got


# ---------------------------------------------------------------------------
# layout and round trips
# ---------------------------------------------------------------------------


def test_layout_matches_the_docstring() -> None:
    bitmap = BitMap([1, 7, 1 << 20])
    data = dv.encode(bitmap)
    assert dv.HEADER_SIZE == 17
    assert data[:4] == b"LKDV" and data[4] == 1
    assert struct.unpack_from("<Q", data, 5)[0] == 3
    payload = data[dv.HEADER_SIZE :]
    assert BitMap.deserialize(payload) == bitmap
    assert struct.unpack_from("<I", data, 13)[0] == crc32c(data[:13] + payload)
    assert data == seal(payload, 3)


@pytest.mark.parametrize(
    "positions",
    [
        [],
        [0],
        [5],
        [MAX],
        [0, MAX],
        range(1000),
        range(10, 200_000),  # dense: many full containers, run-encoded
        range(0, 100_000, 3),
        [*range(65_530, 65_600), *range(1 << 31, (1 << 31) + 10)],  # across container keys
    ],
    ids=["empty", "zero", "one", "max", "ends", "range", "dense", "stride", "boundaries"],
)
def test_round_trip(positions: Iterable[int]) -> None:
    round_trip(positions)


def test_dense_ranges_are_run_encoded() -> None:
    # a million positions: 16 containers of one run each, not 16 x 8 KiB of bits
    assert len(dv.encode(BitMap(range(1_000_000)))) < 300


def test_encode_does_not_change_its_argument_and_takes_frozen_bitmaps() -> None:
    bitmap = BitMap(range(100))
    before = bitmap.get_statistics()
    frozen = FrozenBitMap(range(100))
    assert dv.encode(bitmap) == dv.encode(frozen)
    assert bitmap.get_statistics() == before


def test_the_full_32_bit_range() -> None:
    full = BitMap()
    full.add_range(0, 1 << 32)
    data = dv.encode(full)
    assert struct.unpack_from("<Q", data, 5)[0] == 1 << 32
    assert len(dv.decode(data)) == 1 << 32


@FAST
@given(st.sets(st.integers(0, MAX), max_size=200))
def test_round_trip_random(positions: set[int]) -> None:
    round_trip(positions)


@FAST
@given(st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(1, 5000)), max_size=8))
def test_round_trip_random_ranges(ranges: list[tuple[int, int]]) -> None:
    round_trip(p for start, n in ranges for p in range(start, start + n))


@FAST
@given(st.sets(st.integers(0, 300), max_size=50), st.sets(st.integers(0, 300), max_size=50))
def test_decoded_vectors_merge_as_sets(a: set[int], b: set[int]) -> None:
    merged = dv.decode(dv.encode(BitMap(a))) | dv.decode(dv.encode(BitMap(b)))
    assert set(dv.decode(dv.encode(merged))) == a | b


# ---------------------------------------------------------------------------
# from_positions
# ---------------------------------------------------------------------------


class Index:
    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


def test_from_positions_accepts_iterables_ranges_bitmaps_and_index_types() -> None:
    assert list(dv.from_positions(iter([3, 1, 2, 3]))) == [1, 2, 3]
    assert list(dv.from_positions(range(5, 8))) == [5, 6, 7]
    assert list(dv.from_positions(range(0))) == []
    assert list(dv.from_positions(FrozenBitMap([4]))) == [4]
    assert list(dv.from_positions([Index(9), MAX])) == [9, MAX]
    source = BitMap([1])
    copy = dv.from_positions(source)
    copy.add(2)
    assert list(source) == [1]


@pytest.mark.parametrize(
    ("positions", "error", "match"),
    [
        ([-1], ValueError, r"row position -1 is out of range 0\.\.4294967295"),
        ([1 << 32], ValueError, "row position 4294967296 is out of range"),
        (range(-2, 3), ValueError, "row positions must be in 0..4294967295"),
        (range(MAX - 1, MAX + 2), ValueError, "row positions must be in"),
        ([1.0], TypeError, "a row position must be an integer, not float"),
        (["3"], TypeError, "not str"),
        ([True], TypeError, "not bool"),
        ([None], TypeError, "not NoneType"),
    ],
)
def test_from_positions_refuses(positions: Iterable[object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        dv.from_positions(positions)  # type: ignore[arg-type]


def test_encode_wants_a_bitmap() -> None:
    with pytest.raises(TypeError, match="must be a pyroaring BitMap, not list"):
        dv.encode([1, 2])  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# corruption: every check of decode
# ---------------------------------------------------------------------------

GOOD = dv.encode(BitMap([1, 2, 3, 1000, 70_000]))
GOOD_PAYLOAD = GOOD[dv.HEADER_SIZE :]


def corrupt(data: bytes, match: str) -> None:
    with pytest.raises(CorruptionError, match=match):
        dv.decode(data)


@pytest.mark.parametrize("length", [0, 1, 4, 16])
def test_shorter_than_the_header(length: int) -> None:
    corrupt(GOOD[:length], f"{length} bytes, shorter than its 17-byte header")


def test_bad_magic() -> None:
    corrupt(seal(GOOD_PAYLOAD, 5, magic=b"LKDX"), "bad magic b'LKDX'")
    corrupt(b"\x00" * 40, "bad magic")


@pytest.mark.parametrize("version", [0, 2, 255])
def test_unknown_version(version: int) -> None:
    corrupt(seal(GOOD_PAYLOAD, 5, version=version), f"unknown format version {version}")


def test_every_single_bit_flip_is_caught() -> None:
    for i in range(len(GOOD)):
        for bit in range(8):
            damaged = bytearray(GOOD)
            damaged[i] ^= 1 << bit
            with pytest.raises(CorruptionError):
                dv.decode(bytes(damaged))


def test_bad_checksum() -> None:
    damaged = bytearray(GOOD)
    damaged[-1] ^= 0x40
    corrupt(bytes(damaged), "checksum mismatch")
    damaged = bytearray(GOOD)
    damaged[5] += 1  # the cardinality is under the checksum too
    corrupt(bytes(damaged), "checksum mismatch")


@pytest.mark.parametrize("cut", [1, 2, 8, len(GOOD_PAYLOAD)])
def test_truncated_payload(cut: int) -> None:
    corrupt(GOOD[:-cut], "checksum mismatch")
    corrupt(seal(GOOD_PAYLOAD[:-cut], 5), "bad Roaring bitmap")


def test_trailing_bytes() -> None:
    corrupt(GOOD + b"\x00", "checksum mismatch")
    n = len(GOOD_PAYLOAD)
    corrupt(
        seal(GOOD_PAYLOAD + b"\x00\x00", 5), f"the bitmap uses {n} of the payload's {n + 2} bytes"
    )


@pytest.mark.parametrize("claimed", [0, 4, 6, 1 << 32, (1 << 64) - 1])
def test_cardinality_mismatch(claimed: int) -> None:
    corrupt(seal(GOOD_PAYLOAD, claimed), f"header says {claimed} positions, the bitmap holds 5")


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\x00" * 8,
        b"garbage!",
        # a valid-looking array container whose values are not increasing
        bytes.fromhex("3a300000010000000000010010000000") + struct.pack("<HH", 5, 3),
        # a container count far beyond the bytes present
        struct.pack("<II", 12346, 1 << 30),
    ],
    ids=["empty", "zeros", "text", "unsorted", "huge-count"],
)
def test_payload_the_roaring_decoder_refuses(payload: bytes) -> None:
    corrupt(seal(payload, 2), "bad Roaring bitmap")


def test_decode_takes_any_bytes_like() -> None:
    assert dv.decode(bytearray(GOOD)) == dv.decode(memoryview(GOOD)) == dv.decode(GOOD)
