"""Fuzz the deletion-vector decoder with random bytes and damaged valid encodings.

The contract under test (see ``lakehouse/data/dv.py``): :func:`decode` given
bytes either returns a ``BitMap`` (whose re-encoding decodes to the same
set), or raises :class:`lakehouse.errors.CorruptionError`. Anything else that
escapes (ValueError or IndexError from pyroaring, struct.error,
OverflowError, MemoryError...) is a bug.

Three kinds of input::

    random      arbitrary bytes, and random bytes behind a valid header
    mutated     a valid encoding with bit flips, truncations, insertions,
                deletions and self-splices applied; every byte is under the
                checksum, so any change must raise CorruptionError
    resealed    a payload (a valid Roaring bitmap, damaged, or random bytes)
                sealed with a correct checksum and a right or wrong
                cardinality, which is how malformed-but-checksummed content
                (a buggy writer) reaches the Roaring decoder and the checks
                behind the CRC

Under pytest the runs are short, derandomized (same examples every run) and
not shrunk. Run the file directly to fuzz for longer with fresh randomness::

    python fuzz/fuzz_lakehouse_dv.py                 # 20000 examples per fuzzer
    python fuzz/fuzz_lakehouse_dv.py --examples 200000 -k resealed
"""

from __future__ import annotations

import os
import struct
import sys
from typing import Any

from byte_mutations import Op, any_op, flips, mutate
from crc32c import crc32c
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from lakehouse.data import dv
from lakehouse.errors import CorruptionError

_LONG = os.environ.get("KVSTORE_FUZZ_EXAMPLES")
if _LONG:  # run directly: many examples, fresh randomness
    FUZZ = settings(max_examples=int(_LONG), deadline=None, suppress_health_check=list(HealthCheck))
else:  # under pytest: short, the same every run, and unshrunk
    FUZZ = settings(
        max_examples=150,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],
        report_multiple_bugs=False,
    )

mutations = st.lists(any_op, min_size=1, max_size=4)


@st.composite
def bitmaps(draw: st.DrawFn) -> BitMap:
    """Sparse positions, dense ranges (run containers) and full 2**16 blocks (bitsets)."""
    bitmap = BitMap(draw(st.sets(st.integers(0, dv.MAX_POSITION), max_size=40)))
    for _ in range(draw(st.integers(0, 3))):
        start = draw(st.integers(0, (1 << 20)))
        bitmap.add_range(start, start + draw(st.integers(1, 70_000)))
    if draw(st.booleans()):  # a bitset container: > 4096 scattered positions under one key
        base = draw(st.integers(0, 100)) << 16
        bitmap.update(range(base, base + (1 << 16), draw(st.integers(2, 9))))
    return bitmap


def seal(payload: bytes, cardinality: int, version: int = dv.VERSION) -> bytes:
    head = struct.pack("<4sBQ", dv.MAGIC, version, cardinality)
    return head + struct.pack("<I", crc32c(head + payload)) + payload


def check(data: bytes) -> BitMap | None:
    """decode returns a self-consistent bitmap or raises CorruptionError (anything else escapes)."""
    try:
        got = dv.decode(data)
    except CorruptionError:
        return None
    assert isinstance(got, BitMap)
    assert struct.unpack_from("<Q", data, 5)[0] == len(got)
    assert dv.decode(dv.encode(got)) == got
    return got


def test_seal_matches_encode() -> None:
    bitmap = BitMap([1, 5, 1 << 30])
    bitmap.run_optimize()
    assert seal(bitmap.serialize(), 3) == dv.encode(bitmap)


# ---------------------------------------------------------------------------
# random bytes
# ---------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=300))
def test_decode_random(data: bytes) -> None:
    check(data)


@FUZZ
@given(st.binary(max_size=300))
def test_decode_random_behind_magic(body: bytes) -> None:
    check(dv.MAGIC + bytes([dv.VERSION]) + body)


# ---------------------------------------------------------------------------
# mutated valid encodings
# ---------------------------------------------------------------------------


@FUZZ
@given(bitmaps(), mutations)
def test_decode_mutated(bitmap: BitMap, ops: list[Op]) -> None:
    original = dv.encode(bitmap)
    data = mutate(original, ops)
    got = check(data)
    if data == original:
        assert got == bitmap
    else:  # every byte is under the checksum
        assert got is None, "a damaged deletion vector decoded"


@FUZZ
@given(bitmaps(), flips)
def test_decode_flips_are_corruption(bitmap: BitMap, ops: list[Op]) -> None:
    original = dv.encode(bitmap)
    data = mutate(original, ops)
    if data != original:
        assert check(data) is None, "a flipped deletion vector decoded"


@FUZZ
@given(bitmaps(), st.data())
def test_decode_truncated_is_corruption(bitmap: BitMap, data: Any) -> None:
    original = dv.encode(bitmap)
    cut = data.draw(st.integers(0, len(original) - 1))
    assert check(original[:cut]) is None, "a truncated deletion vector decoded"


# ---------------------------------------------------------------------------
# resealed: damage behind a valid checksum
# ---------------------------------------------------------------------------


@FUZZ
@given(bitmaps(), mutations, st.integers(-2, 2))
def test_decode_resealed_mutated_payload(bitmap: BitMap, ops: list[Op], skew: int) -> None:
    """A damaged Roaring payload under a correct checksum reaches pyroaring."""
    bitmap.run_optimize()
    original = bitmap.serialize()
    payload = mutate(original, ops)
    cardinality = max(len(bitmap) + skew, 0)
    got = check(seal(payload, cardinality))
    if payload == original and cardinality == len(bitmap):  # a valid encoding
        assert got == bitmap, "a valid deletion vector raised CorruptionError"


@FUZZ
@given(st.binary(max_size=300), st.integers(0, 70_000))
def test_decode_resealed_random_payload(payload: bytes, cardinality: int) -> None:
    check(seal(payload, cardinality))


@st.composite
def near_valid_payloads(draw: st.DrawFn) -> bytes:
    """A portable Roaring header with container descriptors that almost add up."""
    cookie = draw(st.sampled_from([12346, 12347, 12347 | (draw(st.integers(0, 3)) << 16), 0]))
    n = draw(st.integers(0, 5))
    claimed = draw(st.sampled_from([n, n, n + 1, max(n - 1, 0), 0xFFFF, 1 << 30]))
    head = (
        struct.pack("<I", cookie)
        if cookie & 0xFFFF == 12347
        else struct.pack("<II", cookie, claimed)
    )
    keys = sorted(draw(st.lists(st.integers(0, 0xFFFF), min_size=n, max_size=n)))
    cards = draw(st.lists(st.integers(0, 0xFFFF), min_size=n, max_size=n))
    descriptors = b"".join(struct.pack("<HH", k, c) for k, c in zip(keys, cards))
    body = draw(st.binary(max_size=200))
    return head + descriptors + body


@FUZZ
@given(near_valid_payloads(), st.integers(0, 1 << 17))
def test_decode_resealed_near_valid_payload(payload: bytes, cardinality: int) -> None:
    check(seal(payload, cardinality))


@FUZZ
@given(bitmaps(), st.sampled_from([0, 2, 255]))
def test_decode_unknown_version_is_corruption(bitmap: BitMap, version: int) -> None:
    bitmap.run_optimize()
    assert check(seal(bitmap.serialize(), len(bitmap), version)) is None


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
