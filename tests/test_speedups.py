"""The optional C accelerator, :mod:`kvstore._speedups`, against the Python it replaces.

Every C function has a pure-Python twin that is the reference: MurmurHash3 is
``mmh3.hash64(signed=False)``, CRC-32C is the ``crc32c`` package, block
encoding is :func:`encode_block_columns_py`, block decoding and search are
:class:`PyBlock`, the bloom filter is :func:`bloom._build_py` and
``BloomFilter`` with ``bloom._c`` unset, and ``stored_find``/``stored_decode``
(the search and decode of a stored block inside a mapped SST) are an
:class:`SstReader` without a view, and ``block_find``/``block_decode`` on the body.

On valid input the two must agree exactly. On damaged input the C code may
raise :class:`CorruptionError` (ValueError from the raw functions) where
Python does, and must never raise anything else or crash.

The C-vs-Python tests are skipped when the extension is not built (or
``KVSTORE_PURE_PYTHON=1`` disabled it); ``test_pure_python_store_round_trip``
runs either way. Property tests are derandomized under pytest; run this file
directly for a longer fuzz with fresh randomness::

    python tests/test_speedups.py --examples 20000 [-k bloom]
"""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
import textwrap
from bisect import bisect_left
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import mmh3
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvstore
from kvstore import CorruptionError
from kvstore._accel import speedups as C
from kvstore.format import block as block_format
from kvstore.format import bloom as bloom_format
from kvstore.format import sst as sst_format
from kvstore.format import sst_reader as sst_reader_format
from kvstore.format.block import TOMBSTONE_LEN, PyBlock, encode_block_columns_py, seal_block
from kvstore.format.bloom import BloomFilter
from kvstore.format.sst import build_sst
from kvstore.format.sst_reader import SstReader

if __name__ == "__main__":  # run as a script: pytest's `pythonpath` setting is not in force
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
from byte_mutations import Op, any_op, flips, mutate

Entry = tuple[bytes, int, "bytes | None"]
MAX_SEQ = (1 << 64) - 1

requires_c = pytest.mark.skipif(
    C is None, reason="kvstore._speedups is not built (or KVSTORE_PURE_PYTHON is set)"
)

_LONG = os.environ.get("KVSTORE_FUZZ_EXAMPLES")


def examples(n: int) -> Callable[[Any], Any]:
    """n examples under pytest, always the same ones; KVSTORE_FUZZ_EXAMPLES for a long run."""
    if _LONG:
        return settings(
            max_examples=int(_LONG), deadline=None, suppress_health_check=list(HealthCheck)
        )
    return settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )


@contextmanager
def pure_python() -> Iterator[None]:
    """The pure-Python code paths inside this process (construct readers/filters inside)."""
    with pytest.MonkeyPatch.context() as mp:
        for module in (block_format, sst_format, sst_reader_format):
            mp.setattr(module, "_c", None)
        mp.setattr(block_format, "Block", PyBlock)
        mp.setattr(sst_reader_format, "Block", PyBlock)
        mp.setattr(bloom_format, "_c", None)
        yield


def outcome(fn: Callable[[], Any]) -> tuple[bool, Any]:
    """(True, result) or (False, None) on CorruptionError; anything else propagates."""
    try:
        return True, fn()
    except CorruptionError:
        return False, None


# ---------------------------------------------------------------------------
# strategies and helpers (after tests/test_formats.py and fuzz/fuzz_decoders.py)
# ---------------------------------------------------------------------------

# A small alphabet makes keys share prefixes (prefix compression) and brings in
# 0x00 / 0xFF (byte order at the extremes); some longer random keys too.
small_key_st = st.lists(st.sampled_from([0x00, 0x01, 0x61, 0x62, 0xFF]), max_size=8).map(bytes)
key_st = st.one_of(small_key_st, small_key_st, st.binary(max_size=70))
value_st = st.one_of(st.none(), st.binary(max_size=40))
seq_st = st.one_of(st.integers(0, 300), st.integers(0, MAX_SEQ))


@st.composite
def block_entries(draw: st.DrawFn, max_keys: int = 40) -> list[Entry]:
    """Sorted internal entries (key asc, seq desc), 1-4 versions per key."""
    keys = sorted(draw(st.sets(key_st, min_size=1, max_size=max_keys)))
    versions = [draw(st.integers(1, 4)) for _ in keys]
    seqs = draw(st.lists(seq_st, min_size=sum(versions), max_size=sum(versions), unique=True))
    out: list[Entry] = []
    it = iter(seqs)
    for key, n in zip(keys, versions):
        for seq in sorted((next(it) for _ in range(n)), reverse=True):
            out.append((key, seq, draw(value_st)))
    return out


def columns(entries: list[Entry]) -> tuple[list[bytes], list[int], list[bytes | None]]:
    return [e[0] for e in entries], [e[1] for e in entries], [e[2] for e in entries]


def ref_find(entries: list[Entry], key: bytes, read_seq: int) -> tuple[bool, Entry | None]:
    """What Block.find answers, by a linear scan of the block's entries."""
    for e in entries:
        if e[0] == key and e[1] <= read_seq:
            return True, e
        if e[0] > key:
            return True, None
    return False, None


class RefBlock:
    """:func:`ref_find` by bisection over (key, -seq), for large blocks."""

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = entries
        self.order = [(k, -s) for k, s, _ in entries]
        assert self.order == sorted(self.order)

    def find(self, key: bytes, read_seq: int) -> tuple[bool, Entry | None]:
        i = bisect_left(self.order, (key, -read_seq))
        if i == len(self.entries):
            return False, None
        e = self.entries[i]
        return True, (e if e[0] == key else None)


def ref_get(entries: list[Entry], key: bytes, read_seq: int) -> Entry | None:
    return next((e for e in entries if e[0] == key and e[1] <= read_seq), None)


def edge_seqs(seqs: Any) -> set[int]:
    """Read seqs around the given seqs, plus the extremes (-1 and 2**64 included)."""
    out = {0, -1, MAX_SEQ, MAX_SEQ + 1}
    for s in seqs:
        out |= {s, s - 1, s + 1}
    return out


def neighbours(keys: Any) -> set[bytes]:
    """Keys next to the given ones: absent probes between and around them."""
    out = {b"", b"\x00", b"\xff" * 9}
    for k in keys:
        out |= {k, k + b"\x00", k + b"\xff", k[:-1]}
        if k and k[-1] < 0xFF:
            out.add(k[:-1] + bytes([k[-1] + 1]))
    return out


mutations = st.one_of(flips, st.lists(any_op, min_size=1, max_size=4))


# ===========================================================================
# runs without the extension: the pure-Python paths end to end
# ===========================================================================

PURE_SCRIPT = textwrap.dedent(
    """
    import sys

    import kvstore
    import kvstore._accel
    from kvstore.format import block, bloom, sst, sst_reader

    assert kvstore._accel.speedups is None
    assert block._c is None and sst._c is None and sst_reader._c is None and bloom._c is None
    assert block.Block is block.PyBlock and sst_reader.Block is block.PyBlock
    db = kvstore.open(sys.argv[1], fsync=False)
    for i in range(500):
        db.put(b"k%04d" % i, b"v%d" % i)
    db.delete(b"k0007")
    db.put(b"k0008", b"newer")
    db.flush()
    assert db.stats()["l0_ssts"] >= 1
    db.close()
    db = kvstore.open(sys.argv[1], fsync=False)
    for i in range(500):
        want = None if i == 7 else b"newer" if i == 8 else b"v%d" % i
        assert db.get(b"k%04d" % i) == want, i
    assert db.get(b"absent") is None
    db.close()
    assert kvstore._accel.speedups is None
    print("pure ok")
    """
)


def expected_store_value(i: int) -> bytes | None:
    return None if i == 7 else b"newer" if i == 8 else b"v%d" % i


def test_pure_python_store_round_trip(tmp_path: Path) -> None:
    """KVSTORE_PURE_PYTHON=1: a store writes, flushes and reads back without the C module;
    the files it writes read the same in this process (with the C module when built)."""
    path = str(tmp_path / "db")
    env = {**os.environ, "KVSTORE_PURE_PYTHON": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", PURE_SCRIPT, path],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "pure ok" in proc.stdout
    with kvstore.open(path, fsync=False) as db:
        for i in range(500):
            assert db.get(b"k%04d" % i) == expected_store_value(i), i


# ===========================================================================
# 1. hash64 and crc32c
# ===========================================================================


@requires_c
def test_hash64_every_tail_length() -> None:
    rng = random.Random(64)
    for length in range(101):
        for _ in range(8):
            data = rng.randbytes(length)
            want = mmh3.hash64(data, signed=False)
            assert C.hash64(data) == want, data
            assert C.hash64(bytearray(data)) == want
            assert C.hash64(memoryview(b"xx" + data)[2:]) == want


@requires_c
@examples(300)
@given(st.binary(max_size=300))
def test_hash64_matches_mmh3(data: bytes) -> None:
    assert C.hash64(data) == mmh3.hash64(data, signed=False)


@requires_c
def test_crc32c_lengths_and_slices() -> None:
    rng = random.Random(32)
    data = rng.randbytes(5000)
    for length in [*range(200), 255, 256, 1023, 1024, 4095, 5000]:
        assert C.crc32c(data[:length]) == crc32c(data[:length]), length
    view = memoryview(data)
    for start in range(17):  # every alignment of the 8-byte loop
        for length in (0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000):
            chunk = view[start : start + length]
            assert C.crc32c(chunk) == crc32c(bytes(chunk)), (start, length)
    assert C.crc32c(b"") == crc32c(b"") == 0
    assert C.crc32c(bytearray(b"123456789")) == 0xE3069283  # the CRC-32C check value
    big = rng.randbytes((1 << 20) + 3)
    assert C.crc32c(big) == crc32c(big)


@requires_c
@examples(200)
@given(st.binary(max_size=600), st.integers(0, 600), st.integers(0, 600))
def test_crc32c_matches_package(data: bytes, a: int, b: int) -> None:
    assert C.crc32c(data) == crc32c(data)
    assert C.crc32c(memoryview(data)[a:b]) == crc32c(data[a:b])
    # the table-driven path (used on CPUs without SSE4.2) agrees too
    assert C._crc32c_sw(data) == crc32c(data)
    assert C._crc32c_sw(memoryview(data)[a:b]) == crc32c(data[a:b])


@requires_c
@examples(150)
@given(block_entries(), st.sampled_from([1, 16, 64, 200, 4096]))
def test_build_blocks_matches_python(entries: list[Entry], block_bytes: int) -> None:
    keys, seqs, values = columns(entries)
    want = sst_format._build_blocks_py(keys, seqs, values, block_bytes)
    assert C.build_blocks(keys, seqs, values, block_bytes) == want


@requires_c
def test_hash_and_crc_reject_what_is_not_a_flat_buffer() -> None:
    strided = memoryview(b"abcdefgh")[::2]
    for fn in (C.crc32c, C.hash64):
        with pytest.raises(BufferError):
            fn(strided)
        with pytest.raises(TypeError):
            fn("text")
        with pytest.raises(TypeError):
            fn(None)


# ===========================================================================
# 2. block encoding
# ===========================================================================


def boundary_entries(n: int, seed: int) -> list[Entry]:
    """n sorted entries with shared prefixes, tombstones, empty values and repeated keys."""
    rng = random.Random(seed)
    keys = sorted(
        rng.choice([b"", b"a", b"ab", b"user:", b"user:0", b"\xff"])
        + rng.randbytes(rng.randrange(3))
        for _ in range(n)
    )
    out: list[Entry] = []
    seq = MAX_SEQ
    for key in keys:
        seq -= rng.randrange(1, 1 << 40)
        value = rng.choice([None, b"", rng.randbytes(rng.randrange(30))])
        out.append((key, seq, value))
    return out


BOUNDARY_SIZES = [1, 2, 15, 16, 17, 31, 32, 33, 48, 200, 600]


@requires_c
@pytest.mark.parametrize("n", BOUNDARY_SIZES)
def test_block_encode_boundaries(n: int) -> None:
    entries = boundary_entries(n, n)
    keys, seqs, values = columns(entries)
    want = encode_block_columns_py(keys, seqs, values)
    assert C.block_encode(keys, seqs, values) == want
    assert C.block_encode(keys, tuple(seqs), values) == want  # any sequence of seqs
    assert list(zip(*C.block_decode(want))) == entries


@requires_c
def test_block_encode_extremes() -> None:
    cases: list[list[Entry]] = [
        [(b"", 0, b"")],
        [(b"", 0, None)],
        [(b"", MAX_SEQ, b"x"), (b"", 5, None), (b"", 0, b"")],
        [(b"k" * 0xFFFF, MAX_SEQ, b"v" * 70_000)],
        [(b"\x00" * 0xFFFF, 2, None), (b"\x00" * 0xFFFF, 1, b""), (b"\x01", 0, b"z")],
        [(b"p" * 0xFFFF, 9 - i, b"") for i in range(3)],
    ]
    for entries in cases:
        keys, seqs, values = columns(entries)
        want = encode_block_columns_py(keys, seqs, values)
        assert C.block_encode(keys, seqs, values) == want
        assert list(zip(*C.block_decode(want))) == entries


@requires_c
@examples(200)
@given(block_entries())
def test_block_encode_matches_python(entries: list[Entry]) -> None:
    keys, seqs, values = columns(entries)
    assert C.block_encode(keys, seqs, values) == encode_block_columns_py(keys, seqs, values)


@requires_c
@pytest.mark.parametrize(
    ("args", "error"),
    [
        (([], [], []), ValueError),
        (([b"a"], [1, 2], [b"x"]), ValueError),
        (([b"a"], [1], [b"x", b"y"]), ValueError),
        (([b"b", b"a"], [1, 2], [b"x", b"y"]), ValueError),
        (([b"a" * 0x10000], [1], [b"x"]), ValueError),
        ((["a"], [1], [b"x"]), ValueError),
        (([b"a"], [1], ["x"]), ValueError),
        (([b"a"], [-1], [b"x"]), OverflowError),
        (([b"a"], [1 << 64], [b"x"]), OverflowError),
        (([b"a"], ["1"], [b"x"]), TypeError),
        (([b"a"], 1, [b"x"]), TypeError),
        (((b"a",), [1], [b"x"]), TypeError),
    ],
)
def test_block_encode_rejects_bad_input(args: tuple[Any, ...], error: type) -> None:
    with pytest.raises(error):
        C.block_encode(*args)


UNSORTED_SCRIPT = textwrap.dedent(
    """
    from kvstore import _speedups

    cases = [
        [b"ab", b"", b"ab"],  # a middle key shorter than the interval's shared prefix
        [b"ab", b"zz", b"ab"],
        [b"b", b"a"],
        [b"k" * 20 + b"%02d" % (i % 17) for i in range(40)],
    ]
    for keys in cases:
        n = len(keys)
        try:
            _speedups.block_encode(keys, list(range(n, 0, -1)), [b"v"] * n)
        except ValueError:
            print("rejected")
        else:
            print("accepted")
    """
)


@requires_c
def test_block_encode_rejects_unsorted_keys() -> None:
    """Sorted keys are a precondition (build_sst checks it; encode_data_block does not).
    An earlier block_encode memcpy'd a negative length for a middle key shorter than the
    prefix its restart interval shares: a segfault, so this runs in a child process."""
    proc = subprocess.run(
        [sys.executable, "-c", UNSORTED_SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-500:]}"
    assert proc.stdout.split() == ["rejected"] * 4


@requires_c
def test_block_encode_versions_out_of_order_match_python() -> None:
    """Equal keys with ascending seqs encode as Python encodes them; decoding rejects them."""
    cols = ([b"a", b"a", b"b"], [1, 2, 3], [b"x", None, b""])
    body = C.block_encode(*cols)
    assert body == encode_block_columns_py(*cols)
    with pytest.raises(ValueError, match="versions"):
        C.block_decode(body)


# ===========================================================================
# 3. valid blocks: CBlock == PyBlock == the reference
# ===========================================================================


def check_valid_block(entries: list[Entry], extra_probes: Any = ()) -> None:
    body = encode_block_columns_py(*columns(entries))
    cb = block_format.CBlock(body, where="c")
    pb = PyBlock(body, where="p")
    assert (cb.n, cb.first_key, cb.first_seq) == (pb.n, pb.first_key, pb.first_seq)
    assert (cb.n, cb.first_key, cb.first_seq) == (len(entries), entries[0][0], entries[0][1])
    assert list(zip(cb.keys, cb.seqs, cb.values)) == entries
    assert list(zip(pb.keys, pb.seqs, pb.values)) == entries
    assert type(cb.seqs) is tuple
    fresh_c = block_format.CBlock(body, where="c")  # find before any full decode
    by_key: dict[bytes, list[int]] = {}
    for k, s, _ in entries:
        by_key.setdefault(k, []).append(s)
    present_seqs = [s for _, s, _ in entries]
    ref = RefBlock(entries)
    keys = list(by_key)
    if len(keys) > 60:  # big blocks: every restart interval, not every key
        keys = keys[::5] + keys[-3:]
    for key in neighbours(keys) | set(extra_probes):
        seqs = by_key.get(key) or present_seqs[:3]
        for rs in edge_seqs(seqs):
            want = ref.find(key, rs)
            if len(entries) <= 40:
                assert want == ref_find(entries, key, rs)
            assert cb.find(key, rs) == want, (key, rs)
            assert fresh_c.find(key, rs) == want, (key, rs)
            assert PyBlock(body, where="p").find(key, rs) == want, (key, rs)  # partial decode
            assert pb.find(key, rs) == want, (key, rs)  # after the full decode


@requires_c
@pytest.mark.parametrize("n", BOUNDARY_SIZES)
def test_valid_block_boundaries(n: int) -> None:
    check_valid_block(boundary_entries(n, 100 + n))


@requires_c
def test_valid_block_one_key_many_versions() -> None:
    """Versions of one key across several restart intervals: the search starts at the
    last restart before the key, not at the first restart equal to it."""
    entries: list[Entry] = [(b"a", 1000, b"a")]
    entries += [(b"hot", s, None if s % 7 == 0 else b"v%d" % s) for s in range(999, 0, -11)]
    entries += [(b"z", 0, b"z")]
    check_valid_block(entries)
    check_valid_block([(b"hot", s, b"%d" % s) for s in range(100, 0, -1)])


@requires_c
@examples(120)
@given(block_entries(), st.lists(key_st, max_size=6))
def test_valid_block_c_matches_python(entries: list[Entry], probes: list[bytes]) -> None:
    check_valid_block(entries, probes)


@requires_c
def test_block_find_read_seq_types() -> None:
    body = encode_block_columns_py([b"a", b"a"], [MAX_SEQ, 3], [b"new", b"old"])
    assert C.block_find(body, b"a", 1 << 200) == (MAX_SEQ, b"new")
    assert C.block_find(body, b"a", -(1 << 200)) is False
    assert C.block_find(body, b"a", True) is False  # bool is an int: seq 1
    assert C.block_find(body, bytearray(b"a"), 3) == (3, b"old")
    assert C.block_find(memoryview(body), b"a", 3) == (3, b"old")
    with pytest.raises(TypeError):
        C.block_find(body, b"a", 3.0)
    with pytest.raises(TypeError):
        C.block_find(body, "a", 3)


# ===========================================================================
# 4. damaged blocks: the same verdict, and only CorruptionError
# ===========================================================================


def check_block_pair(body: bytes, probes: Any, read_seqs: Any) -> None:
    """CBlock against PyBlock on arbitrary bytes.

    Construction (layout checks) and full decode succeed for both or neither, with
    the same content. ``find`` scans one restart interval: on a block that decodes
    fully it must answer as PyBlock does; on one that does not, it may raise where
    PyBlock's partial scan does not (C also checks the order of the keys it passes),
    but when it answers, the answer is PyBlock's partial scan's.
    """
    c_ok, cb = outcome(lambda: block_format.CBlock(body, where="c"))
    p_ok, pb = outcome(lambda: PyBlock(body, where="p"))
    assert c_ok == p_ok, f"layout: C {'accepts' if c_ok else 'rejects'}, Python does not"
    if not c_ok:
        with pytest.raises(ValueError):
            C.block_layout(body)
        with pytest.raises(ValueError):
            C.block_decode(body)
        with pytest.raises(ValueError):
            C.block_find(body, b"", MAX_SEQ)
        return
    assert (cb.n, cb.first_key, cb.first_seq) == (pb.n, pb.first_key, pb.first_seq)
    cd_ok, c_content = outcome(lambda: (cb.keys, cb.seqs, cb.values))
    pd_ok, p_content = outcome(lambda: (pb.keys, pb.seqs, pb.values))
    assert cd_ok == pd_ok, f"decode: C {'accepts' if cd_ok else 'rejects'}, Python does not"
    if cd_ok:
        assert c_content == (p_content[0], tuple(p_content[1]), p_content[2])
        for i in range(1, len(c_content[0])):  # internal order
            a = (c_content[0][i - 1], -c_content[1][i - 1])
            assert a < (c_content[0][i], -c_content[1][i])
    fresh_c = block_format.CBlock(body, where="c")
    for key in probes:
        for rs in read_seqs:
            c_found = outcome(partial(fresh_c.find, key, rs))
            scan = outcome(partial(PyBlock(body, where="p").find, key, rs))
            if pd_ok:
                assert c_found == (True, pb.find(key, rs)), (key, rs)
                assert scan == c_found, (key, rs)
            elif c_found[0]:
                assert scan == c_found, (key, rs)
            # else C may stop at a misordered key that Python's partial scan steps over
            if not scan[0]:
                assert not c_found[0], (key, rs)


def block_probes(body: bytes, original: list[Entry]) -> tuple[set[bytes], set[int]]:
    """Keys and read seqs worth probing in a damaged block: the original's, and what a
    lenient decode of the damaged columns yields."""
    keys = {e[0] for e in original}
    seqs = {e[1] for e in original}
    try:
        (n,) = struct.unpack_from("<I", body, 0)
        if n <= 200:
            head = struct.unpack_from(f"<{n}H{n}H{n}I{n}Q", body, 4)
            pos, prev = 4 + 16 * n, b""
            for s, sl in zip(head[:n], head[n : 2 * n]):
                prev = prev[:s] + body[pos : pos + sl]
                keys.add(prev)
                pos += sl
            seqs |= set(head[3 * n :])
    except struct.error:
        pass
    seqs = set(sorted(seqs)[:2] + sorted(seqs)[-2:])
    keys_list = sorted(keys)
    return neighbours(keys_list[:: max(1, len(keys_list) // 12)]), edge_seqs(seqs)


@requires_c
@examples(250)
@given(block_entries(), mutations)
def test_mutated_block_c_matches_python(entries: list[Entry], ops: list[Op]) -> None:
    body = mutate(encode_block_columns_py(*columns(entries)), ops)
    check_block_pair(body, *block_probes(body, entries))


@requires_c
@examples(200)
@given(st.binary(max_size=300))
def test_random_block_c_matches_python(body: bytes) -> None:
    check_block_pair(body, *block_probes(body, []))


def lcp(a: bytes, b: bytes) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def assemble_block(
    shared: list[int],
    suffixes: list[bytes],
    values: list[bytes | None],
    seqs: list[int],
    restarts: list[int],
) -> bytes:
    n = len(shared)
    vlens = [TOMBSTONE_LEN if v is None else len(v) for v in values]
    return b"".join(
        (
            struct.pack(f"<I{n}H{n}H{n}I{n}Q", n, *shared, *map(len, suffixes), *vlens, *seqs),
            *suffixes,
            *(v for v in values if v is not None),
            struct.pack(f"<I{len(restarts)}I", len(restarts), *restarts),
        )
    )


@st.composite
def odd_valid_blocks(draw: st.DrawFn) -> tuple[bytes, list[Entry]]:
    """Valid blocks laid out as encode_block_columns never does: restart points anywhere,
    each entry sharing any prefix length up to what it has in common with the previous key."""
    entries = draw(block_entries(max_keys=25))
    n = len(entries)
    restarts = sorted(draw(st.sets(st.integers(0, n - 1), max_size=6)) | {0})
    shared, suffixes = [], []
    prev = b""
    for i, (key, _, _) in enumerate(entries):
        s = 0 if i in restarts else draw(st.integers(0, lcp(prev, key)))
        shared.append(s)
        suffixes.append(key[s:])
        prev = key
    body = assemble_block(
        shared, suffixes, *columns(entries)[2:], [e[1] for e in entries], restarts
    )
    return body, entries


@st.composite
def raw_blocks(draw: st.DrawFn) -> bytes:
    """Blocks whose lengths add up but whose columns are arbitrary: prefixes out of
    range, keys out of order, versions out of order, odd restart points."""
    if draw(st.booleans()):  # a valid odd layout, perhaps with one column entry changed
        body, _ = draw(odd_valid_blocks())
        if draw(st.booleans()):
            (n,) = struct.unpack_from("<I", body)
            i = draw(st.integers(0, n - 1))
            field = draw(st.sampled_from(["shared", "seq"]))
            buf = bytearray(body)
            if field == "shared":
                struct.pack_into("<H", buf, 4 + 2 * i, draw(st.integers(0, 12)))
            else:
                struct.pack_into("<Q", buf, 4 + 8 * n + 8 * i, draw(st.integers(0, MAX_SEQ)))
            body = bytes(buf)
        return body
    n = draw(st.integers(1, 40))
    shared = draw(st.lists(st.sampled_from([0, 0, 1, 2, 3, 9]), min_size=n, max_size=n))
    suffixes = draw(st.lists(small_key_st.map(lambda k: k[:4]), min_size=n, max_size=n))
    values = draw(st.lists(value_st, min_size=n, max_size=n))
    seqs = draw(
        st.lists(st.one_of(st.integers(0, 6), st.integers(0, MAX_SEQ)), min_size=n, max_size=n)
    )
    restarts = sorted(draw(st.sets(st.integers(0, n - 1), max_size=5)) | {0})
    if draw(st.integers(0, 9)) == 0:  # sometimes invalid restart points
        restarts = draw(st.lists(st.integers(0, n + 2), max_size=4))
    else:
        for r in restarts:
            shared[r] = 0
    return assemble_block(shared, suffixes, values, seqs, restarts)


@requires_c
@examples(100)
@given(odd_valid_blocks(), st.lists(key_st, max_size=4))
def test_odd_valid_block_c_matches_python(
    block: tuple[bytes, list[Entry]], probes: list[bytes]
) -> None:
    """Valid blocks in layouts the encoder does not produce (Python's slow decode path)."""
    body, entries = block
    cb, pb = block_format.CBlock(body, where="c"), PyBlock(body, where="p")
    assert list(zip(cb.keys, cb.seqs, cb.values)) == entries
    assert list(zip(pb.keys, pb.seqs, pb.values)) == entries
    ref = RefBlock(entries)
    keys = {e[0] for e in entries}
    for key in neighbours(keys) | set(probes):
        for rs in edge_seqs([e[1] for e in entries if e[0] == key][:3] or [5]):
            want = ref.find(key, rs)
            assert cb.find(key, rs) == want, (key, rs)
            assert PyBlock(body, where="p").find(key, rs) == want, (key, rs)
            assert pb.find(key, rs) == want, (key, rs)


@requires_c
@examples(200)
@given(raw_blocks())
def test_near_valid_block_c_matches_python(body: bytes) -> None:
    check_block_pair(body, *block_probes(body, []))


@requires_c
def test_block_regressions() -> None:
    """Hand-made damage of each kind the decoders check."""
    good = encode_block_columns_py([b"a", b"ab", b"b"], [3, 2, 1], [b"x", None, b""])
    cases = [
        good,
        encode_block_columns_py([b"a", b"a"], [1, 2], [b"x", b"y"]),  # versions ascending
        encode_block_columns_py([b"b", b"a"], [1, 2], [b"x", b"y"]),  # keys descending
        good[:-1],
        good + b"\x00",
        struct.pack("<I", 0),
        struct.pack("<II", 0, 0),
        struct.pack("<I", 0xFFFFFFFF) + bytes(64),
        b"",
        b"\x01\x00\x00",
    ]
    # shared prefix longer than the previous key
    bad_prefix = bytearray(good)
    struct.pack_into("<H", bad_prefix, 4 + 2 * 1, 7)
    cases.append(bytes(bad_prefix))
    for body in cases:
        check_block_pair(body, *block_probes(body, []))


# ===========================================================================
# 5. bloom filter
# ===========================================================================

bloom_keys_st = st.lists(st.binary(max_size=40), max_size=150)


@requires_c
@examples(150)
@given(bloom_keys_st, st.integers(1, 9), st.integers(1, 7))
def test_bloom_build_matches_python(keys: list[bytes], nblocks: int, k: int) -> None:
    want = bloom_format._build_py(keys, nblocks, k)
    assert C.bloom_build(keys, nblocks, k) == want
    assert C.bloom_build(tuple(keys), nblocks, k) == want
    fc = BloomFilter(want)
    for key in keys:
        assert C.bloom_may_contain(want, key)
        assert fc.may_contain(key)


@requires_c
@examples(100)
@given(bloom_keys_st, st.sampled_from([1, 2, 5, 10, 20]))
def test_bloom_module_build_matches_python(keys: list[bytes], bits_per_key: int) -> None:
    n = max(1, len(set(keys)))
    got = bloom_format.build(keys, n, bits_per_key)
    got_iter = bloom_format.build(iter(keys), n, bits_per_key)
    with pure_python():
        want = bloom_format.build(keys, n, bits_per_key)
    assert got == got_iter == want


@requires_c
@examples(150)
@given(
    st.integers(1, 7),
    st.integers(1, 4),
    st.data(),
    st.lists(st.binary(max_size=30), min_size=1, max_size=60),
)
def test_bloom_probe_matches_python(k: int, nblocks: int, data: Any, probes: list[bytes]) -> None:
    """Any filter bytes with a valid header: the C probe tests the very bits Python does."""
    blocks = data.draw(st.binary(min_size=64 * nblocks, max_size=64 * nblocks))
    # denser filters make "present" answers common (a random filter with k = 7 has few)
    density = data.draw(st.sampled_from([0x00, 0x77, 0xFF]))
    blocks = bytes(b | density for b in blocks)
    filt = struct.pack("<BI", k, nblocks) + blocks
    fc = BloomFilter(filt)
    c_answers = [fc.may_contain(p) for p in probes]
    assert c_answers == [C.bloom_may_contain(filt, p) for p in probes]
    with pure_python():
        fp = BloomFilter(filt)
        assert [fp.may_contain(p) for p in probes] == c_answers


@requires_c
def test_bloom_built_filter_matches_python_probe() -> None:
    rng = random.Random(5)
    keys = [rng.randbytes(rng.randrange(0, 24)) for _ in range(2000)]
    absent = [b"absent" + rng.randbytes(8) for _ in range(5000)]
    for bits_per_key in (1, 3, 10):
        filt = bloom_format.build(keys, len(keys), bits_per_key)
        fc = BloomFilter(filt)
        with pure_python():
            fp = BloomFilter(filt)
            py_absent = [fp.may_contain(p) for p in absent]
            assert all(fp.may_contain(p) for p in keys)
        assert all(fc.may_contain(p) for p in keys)
        c_absent = [fc.may_contain(p) for p in absent]
        assert c_absent == py_absent
        assert not all(c_absent)  # the probe is not trivially true


def bloom_header_ok(data: bytes) -> bool:
    if len(data) < 5:
        return False
    k, nb = struct.unpack_from("<BI", data)
    return 1 <= k <= 7 and nb > 0 and len(data) == 5 + 64 * nb


MALFORMED_BLOOMS = [
    b"",
    b"\x07",
    b"\x07\x01\x00\x00",
    struct.pack("<BI", 7, 1),  # header only
    struct.pack("<BI", 0, 1) + bytes(64),  # k = 0
    struct.pack("<BI", 8, 1) + bytes(64),  # k = 8
    struct.pack("<BI", 255, 1) + bytes(64),
    struct.pack("<BI", 7, 0),  # no blocks
    struct.pack("<BI", 7, 1) + bytes(63),
    struct.pack("<BI", 7, 1) + bytes(65),
    struct.pack("<BI", 7, 2) + bytes(64),
    struct.pack("<BI", 7, 0xFFFFFFFF) + bytes(64),
    struct.pack("<BI", 7, 0x04000000) + bytes(64),  # 64 * nb overflows 32 bits
]


@requires_c
@pytest.mark.parametrize("filt", MALFORMED_BLOOMS)
def test_bloom_may_contain_rejects_malformed_filter(filt: bytes) -> None:
    for key in (b"", b"a", b"x" * 100):
        with pytest.raises(ValueError):
            C.bloom_may_contain(filt, key)
    with pytest.raises(ValueError):
        BloomFilter(filt)


@requires_c
@examples(200)
@given(st.one_of(st.binary(max_size=140), st.binary(max_size=135).map(lambda b: b"\x07" + b)))
def test_bloom_may_contain_random_filter(filt: bytes) -> None:
    if bloom_header_ok(filt):
        assert isinstance(C.bloom_may_contain(filt, b"key"), bool)
    else:
        with pytest.raises(ValueError):
            C.bloom_may_contain(filt, b"key")


@requires_c
def test_bloom_build_rejects_bad_arguments() -> None:
    for nblocks, k in [(0, 7), (1, 0), (1, 8), (1 << 32, 7)]:
        with pytest.raises(ValueError):
            C.bloom_build([b"a"], nblocks, k)
    # beyond u64 / u32 (once masked without an overflow check: k = 2**32 + 7 built k = 7)
    for nblocks, k in [(-1, 7), ((1 << 64) + 1, 7), (1, -1), (1, (1 << 32) + 7), (1, 1 << 64)]:
        with pytest.raises((ValueError, OverflowError)):
            C.bloom_build([b"a"], nblocks, k)
    with pytest.raises(TypeError):
        C.bloom_build([b"a", "b"], 1, 7)
    with pytest.raises(TypeError):
        C.bloom_build([bytearray(b"a")], 1, 7)
    with pytest.raises(TypeError):
        C.bloom_build(5, 1, 7)
    with pytest.raises(TypeError):
        C.bloom_may_contain(struct.pack("<BI", 7, 1) + bytes(64), "a")


# ===========================================================================
# 6. SstReader over a memoryview (stored_find) vs without one
# ===========================================================================


def read_fn(data: bytes) -> Callable[[int, int], bytes]:
    return lambda off, n: data[off : off + n]


def view_reader(data: bytes) -> SstReader:
    r = SstReader(read_fn(data), len(data), name="v", view=memoryview(data))
    assert r._view is not None
    return r


def plain_reader(data: bytes) -> SstReader:
    return SstReader(read_fn(data), len(data), name="p")


def sst_probes(entries: list[Entry], extra: Any = ()) -> list[tuple[bytes, int]]:
    by_key: dict[bytes, list[int]] = {}
    for k, s, _ in entries:
        by_key.setdefault(k, []).append(s)
    out = []
    for key in neighbours(by_key) | set(extra):
        for rs in edge_seqs(by_key.get(key, [])):
            out.append((key, rs))
    return out


def check_sst_gets(data: bytes, entries: list[Entry], probes: list[tuple[bytes, int]]) -> None:
    """Gets through the view (stored_find), through read() (CBlock), and in pure Python."""
    rv, rp = view_reader(data), plain_reader(data)
    with pure_python():
        rpy = SstReader(read_fn(data), len(data), name="py", view=memoryview(data))
        assert rpy._view is None
        py_answers = [rpy.get(k, rs) for k, rs in probes]
    for (key, rs), py in zip(probes, py_answers):
        want = ref_get(entries, key, rs)
        assert rv.get(key, rs) == want, (key, rs)
        assert rp.get(key, rs) == want, (key, rs)
        assert py == want, (key, rs)


def scans(r: SstReader, bounds: Any) -> list[list[Entry]]:
    out = [
        list(r.iter_forward(None, None)),
        list(r.iter_reverse(None, None)),
        [e for sl in r.iter_block_slices(None, None) for e in zip(*sl)],
    ]
    for start, end in bounds:
        out.append(list(r.iter_forward(start, end)))
        out.append(list(r.iter_reverse(start, end)))
        out.append([e for sl in r.iter_block_slices(start, end) for e in zip(*sl)])
    return out


def check_sst_scans(data: bytes, entries: list[Entry]) -> None:
    """Scans over the view (stored_decode) == scans through read() == the entries."""
    keys = sorted({e[0] for e in entries})
    mid = keys[len(keys) // 2]
    bounds = [(mid, None), (None, mid), (keys[0], mid), (mid + b"\x00", keys[-1])]
    got = scans(view_reader(data), bounds)
    assert got == scans(plain_reader(data), bounds)
    assert got[0] == entries
    assert got[1] == sorted(entries, key=lambda e: (e[0], e[1]), reverse=True)
    assert got[2] == entries


@requires_c
@examples(100)
@given(
    block_entries(max_keys=30),
    st.sampled_from([1, 24, 64, 200, 4096]),
    st.sampled_from([0, 10]),
    st.sampled_from(["none", "zstd"]),
    st.lists(key_st, max_size=4),
)
def test_sst_view_matches_plain_reader(
    entries: list[Entry], block_bytes: int, bloom: int, compression: str, probes: list[bytes]
) -> None:
    data, _ = build_sst(
        entries, block_bytes=block_bytes, bloom_bits_per_key=bloom, compression=compression
    )
    check_sst_gets(data, entries, sst_probes(entries, probes))
    check_sst_scans(data, entries)


@requires_c
@pytest.mark.parametrize("compression", ["none", "zstd"])
@pytest.mark.parametrize("block_bytes", [1, 48, 4096])
def test_sst_view_versions_span_blocks(compression: str, block_bytes: int) -> None:
    entries: list[Entry] = [(b"a", 1000, b"a")]
    entries += [(b"hot", s, None if s % 7 == 0 else b"v%03d" % s) for s in range(999, 0, -3)]
    entries += [(b"hot\x00", 5, b""), (b"z", 5, b"z" * 100)]
    data, _ = build_sst(entries, block_bytes=block_bytes, compression=compression)
    if block_bytes == 1:
        assert view_reader(data).num_blocks == len(entries)
    probes = [(b"hot", rs) for rs in range(-1, 1003)]
    probes += sst_probes(entries, [b"ho", b"hot\x01", b"b"])
    check_sst_gets(data, entries, probes)
    check_sst_scans(data, entries)


@requires_c
def test_sst_truncated_or_oversized_view_is_not_used() -> None:
    entries = boundary_entries(300, 7)
    entries = sorted({e[0]: e for e in entries}.values())  # one version per key
    data, _ = build_sst(entries, block_bytes=100, compression="none")
    for view in (
        memoryview(data)[:-1],
        memoryview(data)[:10],
        memoryview(b""),
        memoryview(data + b"!"),
    ):
        r = SstReader(read_fn(data), len(data), name="t", view=view)
        assert r._view is None
        for key, seq, _ in entries:
            assert r.get(key, MAX_SEQ) == ref_get(entries, key, MAX_SEQ)
            assert r.get(key, seq - 1) is None


def block_spans(r: SstReader) -> list[tuple[int, int]]:
    return list(zip(r._offsets, r._sizes))


def entries_by_block(r: SstReader) -> list[list[Entry]]:
    return [list(zip(b.keys, b.seqs, b.values)) for b in (r.block(i) for i in range(r.num_blocks))]


def check_every_data_byte_flip(data: bytes, entries: list[Entry], bits: Any) -> int:
    """Flip bits in every data-block byte; return how many damaged readers were checked."""
    clean = plain_reader(data)
    per_block = entries_by_block(clean)
    probes = sst_probes(entries)
    want = {p: ref_get(entries, *p) for p in probes}
    checked = 0
    for b, (off, size) in enumerate(block_spans(clean)):
        for pos in range(off, off + size):
            for bit in bits(pos):
                bad = bytearray(data)
                bad[pos] ^= 1 << bit
                damaged = bytes(bad)
                r = view_reader(damaged)  # footer, index and bloom are intact
                for probe in probes:
                    ok, got = outcome(partial(r.get, *probe))
                    if ok:
                        assert got == want[probe], (pos, bit, probe)
                for key, seq, _ in per_block[b]:  # reading these needs the damaged block
                    with pytest.raises(CorruptionError):
                        r.get(key, seq)
                with pytest.raises(CorruptionError):
                    list(r.iter_forward(None, None))
                with pytest.raises(CorruptionError):
                    list(r.iter_reverse(None, None))
                checked += 1
    return checked


@requires_c
def test_sst_view_every_data_byte_flip() -> None:
    """One version per key and several blocks: any bit flipped in a data block makes the
    gets that touch it raise CorruptionError and leaves every other get right."""
    entries: list[Entry] = [
        (b"k%02d" % i, 100 - i, None if i % 5 == 0 else b"v" * (i % 4)) for i in range(14)
    ]
    data, _ = build_sst(entries, block_bytes=40, compression="none", bloom_bits_per_key=10)
    assert plain_reader(data).num_blocks >= 4
    assert check_every_data_byte_flip(data, entries, lambda pos: range(8)) > 100


@requires_c
def test_sst_view_every_data_byte_flip_versions_span_blocks() -> None:
    entries: list[Entry] = [(b"a", 50, b"a")]
    entries += [(b"hot", s, None if s % 4 == 0 else b"%d" % s) for s in range(40, 20, -2)]
    entries += [(b"z", 1, b"")]
    data, _ = build_sst(entries, block_bytes=1, compression="none", bloom_bits_per_key=0)
    assert plain_reader(data).num_blocks == len(entries)
    check_every_data_byte_flip(data, entries, lambda pos: (pos % 8, 7 - pos % 8))


@requires_c
def test_sst_view_compressed_block_flips() -> None:
    """Compressed blocks reach stored_find too (it checks the CRC, then hands them back)."""
    entries: list[Entry] = [(b"key%04d" % i, 10_000 - i, b"value " * 20) for i in range(60)]
    data, _ = build_sst(entries, block_bytes=1000, compression="zstd", bloom_bits_per_key=0)
    clean = plain_reader(data)
    assert any(data[o + s - 5] == 1 for o, s in block_spans(clean)), "no compressed block"
    rng = random.Random(9)
    per_block = entries_by_block(clean)
    for b, (off, size) in enumerate(block_spans(clean)):
        for pos in rng.sample(range(off, off + size), min(size, 60)):
            bad = bytearray(data)
            bad[pos] ^= 1 << rng.randrange(8)
            r = view_reader(bytes(bad))
            for key, seq, _ in per_block[b]:
                with pytest.raises(CorruptionError):
                    r.get(key, seq)
            for key, seq, value in entries[::7]:
                ok, got = outcome(partial(r.get, key, seq))
                assert not ok or got == (key, seq, value)


def reseal_data_block(data: bytes, span: tuple[int, int], body: bytes) -> bytes:
    """Replace one uncompressed data block by ``body`` of the same length, CRC recomputed."""
    off, size = span
    stored = seal_block(body, None)
    assert len(stored) == size
    return data[:off] + stored + data[off + size :]


@requires_c
@examples(150)
@given(block_entries(max_keys=25), st.sampled_from([40, 120, 4096]), flips, st.data())
def test_sst_view_resealed_block(
    entries: list[Entry], block_bytes: int, ops: list[Op], data: Any
) -> None:
    """A malformed block under a valid CRC (a buggy writer): stored_find gives what
    CBlock.find gives, and answers only what Python's partial scan answers."""
    sst, _ = build_sst(entries, block_bytes=block_bytes, compression="none", bloom_bits_per_key=0)
    clean = plain_reader(sst)
    spans = block_spans(clean)
    b = data.draw(st.integers(0, len(spans) - 1))
    off, size = spans[b]
    body = sst[off : off + size - 5]
    damaged = reseal_data_block(sst, spans[b], mutate(body, ops))
    rv, rp = view_reader(damaged), plain_reader(damaged)
    with pure_python():
        rpy = SstReader(read_fn(damaged), len(damaged), name="py")
        probes = sst_probes(entries)[:300]
        py_answers = [outcome(partial(rpy.get, *p)) for p in probes]
        py_scan = outcome(partial(scans, rpy, [(None, entries[-1][0])]))
    for probe, py in zip(probes, py_answers):
        got = outcome(partial(rv.get, *probe))
        assert got == outcome(partial(rp.get, *probe)), probe
        if got[0]:
            assert py == got, probe
        if not py[0]:
            assert not got[0], probe
    # scans decode whole blocks: C (stored_decode, CBlock) and Python agree exactly
    view_scan = outcome(partial(scans, rv, [(None, entries[-1][0])]))
    assert view_scan == outcome(partial(scans, rp, [(None, entries[-1][0])]))
    assert view_scan == py_scan


# ===========================================================================
# 7. stored_find (and stored_decode) on bad bounds and bad blocks
# ===========================================================================


def small_sst() -> tuple[bytes, SstReader]:
    entries: list[Entry] = [(b"a", 5, b"x"), (b"b", 4, None), (b"c", 3, b"")]
    data, _ = build_sst(entries, compression="none", bloom_bits_per_key=0)
    return data, plain_reader(data)


@requires_c
def test_stored_find_valid_call() -> None:
    data, r = small_sst()
    off, size = block_spans(r)[0]
    for buf in (data, bytearray(data), memoryview(data)):
        assert C.stored_find(buf, off, size, b"a", 5, b"a", MAX_SEQ) == (5, b"x")
        assert C.stored_find(buf, off, size, b"a", 5, b"b", 4) == (4, None)
        assert C.stored_find(buf, off, size, b"a", 5, b"b", 3) is None
        assert C.stored_find(buf, off, size, b"a", 5, b"c", -1) is False
        assert C.stored_find(buf, off, size, b"a", 5, b"bb", MAX_SEQ + 1) is None
        assert C.stored_decode(buf, off, size, b"a", 5) == C.block_decode(
            data[off : off + size - 5]
        )


@requires_c
def test_stored_find_out_of_range_is_value_error() -> None:
    data, r = small_sst()
    off, size = block_spans(r)[0]
    n = len(data)
    bad = [
        *((0, s) for s in range(5)),  # shorter than a trailer
        (n, 5),
        (n + 1, 5),
        (n + 1000, 0),
        (n, 0),
        (1 << 63, size),
        (MAX_SEQ, size),
        (MAX_SEQ, 1),
        (0, n + 1),
        (1, n),
        (n - 4, 5),
        (off, MAX_SEQ),
        (off, 1 << 63),
    ]
    for o, s in bad:
        for buf in (data, memoryview(data), memoryview(data)[: off + size - 1]):
            with pytest.raises(ValueError):
                C.stored_find(buf, o, s, b"a", 5, b"a", MAX_SEQ)
            with pytest.raises(ValueError):
                C.stored_decode(buf, o, s, b"a", 5)
    # beyond u64 (once masked to 64 bits: offset 2**64 read the block at 0) or negative
    for o, s, fs in [
        (off + (1 << 64), size, 5),
        (off, size + (1 << 64), 5),
        (off, size, 5 + (1 << 64)),
        (-1, size, 5),
        (off, -size, 5),
        (off, size, -1),
    ]:
        with pytest.raises((ValueError, OverflowError)):
            C.stored_find(data, o, s, b"a", fs, b"a", MAX_SEQ)
        with pytest.raises((ValueError, OverflowError)):
            C.stored_decode(data, o, s, b"a", fs)
    for buf in (b"", bytearray(), memoryview(b"")):
        for s in range(8):
            with pytest.raises(ValueError):
                C.stored_find(buf, 0, s, b"a", 5, b"a", MAX_SEQ)
    with pytest.raises(ValueError, match="checksum"):
        C.stored_find(data, off + 1, size - 1, b"a", 5, b"a", MAX_SEQ)
    with pytest.raises(TypeError):
        C.stored_find(data, off, size, b"a", 5, b"a", "1")
    with pytest.raises(TypeError):
        C.stored_find(data, off, size, "a", 5, b"a", 1)


@requires_c
def test_stored_find_checks_index_agreement_and_compression() -> None:
    data, r = small_sst()
    off, size = block_spans(r)[0]
    for fk, fs in [(b"b", 5), (b"a", 4), (b"", 5), (b"aa", 5)]:
        with pytest.raises(ValueError, match="does not match the index"):
            C.stored_find(data, off, size, fk, fs, b"a", MAX_SEQ)
        with pytest.raises(ValueError, match="does not match the index"):
            C.stored_decode(data, off, size, fk, fs)
    body = data[off : off + size - 5]
    for kind, expect in [(1, True), (2, ValueError), (255, ValueError)]:
        head = body + bytes((kind,))
        stored = head + struct.pack("<I", crc32c(head))
        if expect is True:
            assert C.stored_find(stored, 0, len(stored), b"a", 5, b"a", 1) is True
            assert C.stored_decode(stored, 0, len(stored), b"a", 5) is True
        else:
            with pytest.raises(ValueError, match="compression"):
                C.stored_find(stored, 0, len(stored), b"a", 5, b"a", 1)
            with pytest.raises(ValueError, match="compression"):
                C.stored_decode(stored, 0, len(stored), b"a", 5)
    # a malformed body under a valid CRC: ValueError, as block_layout gives
    head = b"\x01\x00\x00\x00garbage" + b"\x00"
    stored = head + struct.pack("<I", crc32c(head))
    with pytest.raises(ValueError):
        C.stored_find(stored, 0, len(stored), b"a", 5, b"a", 1)
    with pytest.raises(ValueError):
        C.stored_decode(stored, 0, len(stored), b"a", 5)


@requires_c
@examples(120)
@given(
    st.one_of(raw_blocks(), st.binary(max_size=120)),
    st.sampled_from([0, 0, 0, 1, 2]),
    st.binary(max_size=8),
    st.binary(max_size=8),
    st.integers(-3, 3),
    st.integers(-3, 3),
    st.lists(small_key_st, min_size=1, max_size=4),
    st.sampled_from([-1, 0, 3, MAX_SEQ]),
)
def test_stored_find_equals_block_find(
    body: bytes,
    kind: int,
    pre: bytes,
    post: bytes,
    doff: int,
    dsize: int,
    keys: list[bytes],
    read_seq: int,
) -> None:
    """A stored block (any body, valid CRC) inside a larger buffer: stored_find and
    stored_decode answer as block_find and block_decode on the body do, or raise
    ValueError; bounds a few bytes off raise ValueError (or hit a CRC by chance)."""
    head = body + bytes((kind,))
    stored = head + struct.pack("<I", crc32c(head))
    buf = pre + stored + post
    try:
        _, fk, fs = C.block_layout(body)
    except ValueError:
        fk, fs = b"", 0
    off, size = len(pre) + doff, len(stored) + dsize
    if off < 0 or size < 0:
        return
    try:
        cols = C.stored_decode(buf, off, size, fk, fs)
    except ValueError:
        cols = ValueError
    if (doff, dsize) != (0, 0):
        assert cols is ValueError or (off + size <= len(buf) and size >= 5)
        return
    if kind == 1:
        assert cols is True
    elif kind != 0:
        assert cols is ValueError
    else:
        try:
            want: Any = C.block_decode(body)
        except ValueError:
            want = ValueError
        assert cols == want
    for key in keys:
        try:
            got = C.stored_find(buf, off, size, fk, fs, key, read_seq)
        except ValueError:
            got = ValueError
        if kind == 0:
            try:
                want = C.block_find(body, key, read_seq)
            except ValueError:
                want = ValueError
            assert got == want, key
        else:
            assert got is (True if kind == 1 else ValueError)


# ---------------------------------------------------------------------------
# running for longer
# ---------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    """Run this file's property tests in a child pytest with more examples."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=20_000, help="examples per property")
    parser.add_argument("-k", default=None, help="only tests matching this pytest expression")
    args, rest = parser.parse_known_args(argv)
    env = {**os.environ, "KVSTORE_FUZZ_EXAMPLES": str(args.examples)}
    cmd = [sys.executable, "-m", "pytest", os.path.abspath(__file__), "-q", "--timeout=0"]
    cmd += ["-p", "no:cacheprovider", *(["-k", args.k] if args.k else []), *rest]
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


@requires_c
@examples(100)
@given(
    block_entries(),
    st.sampled_from([1, 64, 4096]),
    st.sampled_from(["none", "zstd"]),
    st.sampled_from([0, 10]),
)
def test_build_sst_same_bytes_with_and_without_c(
    entries: list[Entry], block_bytes: int, compression: str, bloom: int
) -> None:
    kwargs: dict[str, Any] = {
        "block_bytes": block_bytes,
        "compression": compression,
        "bloom_bits_per_key": bloom,
    }
    fast = build_sst(entries, **kwargs)
    with pure_python():
        slow = build_sst(entries, **kwargs)
    assert fast == slow


@requires_c
def test_map_file_is_read_only_and_outlives_its_fd(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"0123456789" * 1000)
    fd = os.open(path, os.O_RDONLY)
    try:
        view = memoryview(C.map_file(fd, 10_000))
    finally:
        os.close(fd)
    os.unlink(path)  # as GC does to an SST a reader still maps
    assert view.readonly and len(view) == 10_000
    assert bytes(view[:12]) == b"012345678901"
    assert C.crc32c(view[10:30]) == crc32c(b"0123456789" * 2)
    with pytest.raises(TypeError):
        view[0:1] = b"x"  # type: ignore[index]
    fds_before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    path.write_bytes(b"x" * 100)
    fd = os.open(path, os.O_RDONLY)
    m = C.map_file(fd, 100)
    os.close(fd)
    if fds_before is not None:  # no duplicate descriptor stays open (mmap.mmap keeps one)
        assert len(os.listdir("/proc/self/fd")) == fds_before
    del m


@requires_c
def test_map_file_bad_arguments(tmp_path: Path) -> None:
    path = tmp_path / "e.bin"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(ValueError):
            C.map_file(fd, 0)
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        C.map_file(fd, 10)  # closed descriptor


@requires_c
@examples(200)
@given(
    st.integers(0, MAX_SEQ),
    st.lists(st.tuples(st.binary(max_size=12), st.none() | st.binary(max_size=40)), max_size=20),
)
def test_wal_frame_matches_python(seq: int, ops: list[tuple[bytes, bytes | None]]) -> None:
    from kvstore.format.wal import decode_frames, encode_record_py

    keys = [k for k, _ in ops]
    values = [v for _, v in ops]
    frame = C.wal_frame(seq, keys, values)
    assert frame == encode_record_py(seq, keys, values)
    assert C.wal_frame(seq, tuple(keys), tuple(values)) == frame
    (record,) = decode_frames(frame).records
    assert (record.seq, record.keys, record.values) == (seq, keys, values)


@requires_c
def test_wal_frame_rejects_bad_input() -> None:
    with pytest.raises(TypeError):
        C.wal_frame(1, ["not bytes"], [b"v"])
    with pytest.raises(TypeError):
        C.wal_frame(1, [b"k"], ["not bytes"])
    with pytest.raises(ValueError):
        C.wal_frame(1, [b"k"], [])
    with pytest.raises(OverflowError):
        C.wal_frame(-1, [b"k"], [b"v"])


@requires_c
@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([(b"b", 1, b"x"), (b"a", 2, b"y")], "sorted"),
        ([(b"a", 1, b"x"), (b"a", 2, b"y")], "sorted"),  # versions of a key: seq ascending
        ([(b"a", 2, b"x"), (b"a", 2, b"y")], "sorted"),  # the same seq twice
        ([(b"k" * 65536, 1, b"x")], "exceeds"),
    ],
)
def test_build_sst_rejects_what_python_rejects(entries: list[Entry], message: str) -> None:
    with pytest.raises(ValueError, match=message) as fast:
        build_sst(entries)
    with pure_python(), pytest.raises(ValueError, match=message) as slow:
        build_sst(entries)
    assert str(fast.value) == str(slow.value)
    tombs = [(b"a", 9, None), (b"a", 3, b"v"), (b"b", 5, None), (b"c", 1, b"")]
    k, s, v = columns(tombs)
    assert C.sst_stats(k, s, v) == (2, 1, 9, True)
