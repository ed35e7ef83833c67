"""Damaged bytes are always reported as CorruptionError, end to end.

Each test builds a *golden* store once (write, flush so SSTs exist, close; or,
for the WAL, write durably and copy the objects while the writer is still
open, as a crash would leave them), then for one damaged copy per case:

    copy the golden objects ──► flip one byte ──► kvstore.open
        ──► get every key ever written ──► full scan forward and reverse

The only acceptable outcome is :class:`kvstore.CorruptionError` from one of
those steps. A wrong answer, any other exception, or no observable change at
all (the damage went unnoticed) fails the case. Positions are spread over
every block of an SST (data, bloom, index, props, footer), every header field
and the body of the latest manifest, every field of a WAL object's 24-byte
header and of a journal segment's 16-byte header, and every part of a WAL
frame.
"""

from __future__ import annotations

import os
import shutil
import struct
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from crc32c import crc32c

import kvstore
from kvstore import CorruptionError, paths
from kvstore.engine.manifests import ManifestWriter
from kvstore.format.block import open_block
from kvstore.format.manifest import Manifest
from kvstore.format.sst import FOOTER, FOOTER_SIZE
from kvstore.format.wal import (
    OBJECT_HEADER_SIZE,
    SEGMENT_HEADER_SIZE,
    decode_object,
    decode_segment,
)
from kvstore.objstore import MemoryStore

OPTS: dict = {"block_bytes": 256, "background_flush": False, "bloom_bits_per_key": 10}
NKEYS = 240


def keyname(i: int) -> bytes:
    return b"user/%05d" % i


# ---------------------------------------------------------------------------
# outcomes
# ---------------------------------------------------------------------------


def outcome(target: MemoryStore | str, expected: dict[bytes, bytes], universe: list[bytes]) -> str:
    """'corruption', 'undetected', or a description of what went wrong."""
    opts = dict(OPTS)
    if isinstance(target, str):
        opts["fsync"] = False
    try:
        db = kvstore.open(target, **opts)
    except CorruptionError:
        return "corruption"
    except Exception:
        return "open raised a non-CorruptionError:\n" + traceback.format_exc()
    try:
        for key in universe:
            got = db.get(key)
            if got != expected.get(key):
                return f"wrong answer: get({key!r}) = {got!r}, expected {expected.get(key)!r}"
        want = sorted(expected.items())
        if list(db.scan()) != want:
            return "wrong answer from a forward scan"
        if list(db.scan(reverse=True)) != want[::-1]:
            return "wrong answer from a reverse scan"
    except CorruptionError:
        return "corruption"
    except Exception:
        return "read raised a non-CorruptionError:\n" + traceback.format_exc()
    finally:
        try:
            db.close()
        except CorruptionError:
            pass
    return "undetected"


def flipped(objects: dict[str, bytes], name: str, pos: int, mask: int = 0x5A) -> MemoryStore:
    """A fresh store holding ``objects`` with byte ``pos`` of ``name`` XORed."""
    store = MemoryStore("damaged")
    for n, data in objects.items():
        if n == name:
            bad = bytearray(data)
            bad[pos] ^= mask
            data = bytes(bad)
        store.put(n, data)
    return store


def copy_store(objects: dict[str, bytes]) -> MemoryStore:
    store = MemoryStore("copy")
    for n, data in objects.items():
        store.put(n, data)
    return store


def latest_manifest(objects: dict[str, bytes]) -> tuple[str, Manifest]:
    name = max(n for n in objects if paths.parse_manifest_name(n) is not None)
    return name, Manifest.decode(objects[name])


def assert_detected(result: str, what: str) -> None:
    assert result == "corruption", f"{what}: {result}"


# ---------------------------------------------------------------------------
# golden stores
# ---------------------------------------------------------------------------


@dataclass
class Golden:
    objects: dict[str, bytes]
    expected: dict[bytes, bytes]
    universe: list[bytes]


def write_workload(db: kvstore.DB, *, durable: bool) -> dict[bytes, bytes]:
    """Puts, overwrites under a snapshot (older versions stay in the SST) and deletes."""
    expected: dict[bytes, bytes] = {}
    for i in range(NKEYS):
        v = b"first-%d-" % i * 3
        db.put(keyname(i), v, durable=durable)
        expected[keyname(i)] = v
    with db.snapshot():
        for i in range(0, NKEYS, 3):
            v = b"second-%d" % i
            db.put(keyname(i), v, durable=durable)
            expected[keyname(i)] = v
        for i in range(0, NKEYS, 7):
            db.delete(keyname(i), durable=durable)
            expected.pop(keyname(i), None)
        db.flush()
    return expected


@pytest.fixture(scope="module", params=["zstd", "none"])
def flushed(request: pytest.FixtureRequest) -> Golden:
    store = MemoryStore("golden")
    db = kvstore.open(store, compression=request.param, **OPTS)
    expected = write_workload(db, durable=False)
    db.close()
    return Golden(store.raw(), expected, [keyname(i) for i in range(NKEYS + 5)])


@pytest.fixture(scope="module")
def crashed_wal() -> Golden:
    """Durable writes still in WAL objects: the objects as a crash leaves them."""
    store = MemoryStore("golden-wal")
    db = kvstore.open(store, **OPTS)
    expected: dict[bytes, bytes] = {}
    db.put(b"alpha", b"one")  # one object, one frame
    db.put(b"beta", b"")  # an empty value
    batch = kvstore.WriteBatch()
    batch.put(b"gamma", b"three" * 20)
    batch.put(b"delta", b"four")
    batch.delete(b"alpha")
    db.write(batch)  # one frame, three entries
    for i in range(5):  # five frames buffered, then written as one object
        db.put(b"buffered/%d" % i, b"v%d" % i, durable=False)
    db.put(b"last", b"\x00\xff")
    db.delete(b"never-existed")
    expected.update(
        {b"beta": b"", b"gamma": b"three" * 20, b"delta": b"four", b"last": b"\x00\xff"}
    )
    expected.update({b"buffered/%d" % i: b"v%d" % i for i in range(5)})
    objects = store.raw()  # the writer is still open: this is what a crash leaves
    db.close()
    universe = [b"alpha", b"never-existed", b"zzz", *sorted(expected)]
    return Golden(objects, expected, universe)


def live_wal_objects(g: Golden) -> list[str]:
    """WAL objects replay reads that hold frames (fence objects are left out)."""
    _, m = latest_manifest(g.objects)
    out = []
    for name, data in sorted(g.objects.items()):
        parsed = paths.parse_wal_name(name)
        if parsed is not None and parsed[0] >= m.wal_replay_from:
            _records, fence = decode_object(data, where=name)
            if not fence:
                out.append(name)
    return out


def the_sst(g: Golden) -> tuple[str, bytes]:
    ssts = [n for n in g.objects if n.startswith(paths.SST_DIR)]
    _, m = latest_manifest(g.objects)
    live = [paths.sst_name(s.id) for s in m.all_ssts()]
    assert sorted(ssts) == sorted(live) and len(live) == 1
    return live[0], g.objects[live[0]]


def sst_regions(data: bytes) -> dict[str, list[tuple[int, int]]]:
    """(offset, size) of every block, parsed per docs/format/sst.md."""
    bloom_off, bloom_len, index_off, index_len, props_off, props_len = FOOTER.unpack(
        data[-FOOTER_SIZE:]
    )[:6]
    index = open_block(data[index_off : index_off + index_len], where="index")
    (n,) = struct.unpack_from("<I", index, 0)
    offsets = struct.unpack_from(f"<{n}Q", index, 4)
    sizes = struct.unpack_from(f"<{n}I", index, 4 + 8 * n)
    return {
        "data": list(zip(offsets, sizes)),
        "bloom": [(bloom_off, bloom_len)],
        "index": [(index_off, index_len)],
        "props": [(props_off, props_len)],
        "footer": [(len(data) - FOOTER_SIZE, FOOTER_SIZE)],
    }


# ---------------------------------------------------------------------------
# sanity: undamaged copies read back exactly
# ---------------------------------------------------------------------------


def test_golden_flushed_store_reads_back(flushed: Golden) -> None:
    name, data = the_sst(flushed)
    regions = sst_regions(data)
    assert len(regions["data"]) > 20  # many blocks to damage
    assert regions["bloom"][0][1] > 0
    assert outcome(copy_store(flushed.objects), flushed.expected, flushed.universe) == (
        "undetected"
    )
    # The data really is in the SST: no WAL object is replayed.
    assert live_wal_objects(flushed) == []
    assert name


def test_golden_wal_store_reads_back(crashed_wal: Golden) -> None:
    _, m = latest_manifest(crashed_wal.objects)
    assert m.all_ssts() == []  # nothing flushed: every write is only in the WAL
    assert len(live_wal_objects(crashed_wal)) >= 5
    assert outcome(copy_store(crashed_wal.objects), crashed_wal.expected, crashed_wal.universe) == (
        "undetected"
    )


# ---------------------------------------------------------------------------
# SST
# ---------------------------------------------------------------------------

#: which block of a region, and where inside it (negative: from the block's end;
#: -5 is the compression byte, -4..-1 the CRC)
BLOCK_CHOICES = {"data": ["first", "second", "middle", "last"]}
OFFSETS = [0, 1, 4, 5, "quarter", "middle", "three-quarters", -6, -5, -4, -1]


def pick_block(spans: list[tuple[int, int]], which: str) -> tuple[int, int]:
    return {
        "first": spans[0],
        "second": spans[min(1, len(spans) - 1)],
        "middle": spans[len(spans) // 2],
        "last": spans[-1],
    }[which]


def resolve(offset: int | str, size: int) -> int:
    if isinstance(offset, int):
        return offset if offset >= 0 else size + offset
    return {"quarter": size // 4, "middle": size // 2, "three-quarters": 3 * size // 4}[offset]


SST_CASES = [
    (region, which, offset)
    for region in ("data", "bloom", "index", "props")
    for which in BLOCK_CHOICES.get(region, ["only"])
    for offset in OFFSETS
]


@pytest.mark.parametrize("region, which, offset", SST_CASES)
def test_flip_in_sst_block(flushed: Golden, region: str, which: str, offset: int | str) -> None:
    name, data = the_sst(flushed)
    spans = sst_regions(data)[region]
    start, size = spans[0] if which == "only" else pick_block(spans, which)
    pos = start + resolve(offset, size)
    store = flipped(flushed.objects, name, pos)
    assert_detected(
        outcome(store, flushed.expected, flushed.universe), f"{region} {which} byte {pos}"
    )


@pytest.mark.parametrize("pos", range(FOOTER_SIZE))
def test_flip_in_sst_footer(flushed: Golden, pos: int) -> None:
    name, data = the_sst(flushed)
    at = len(data) - FOOTER_SIZE + pos
    for mask in (0x01, 0x80):
        store = flipped(flushed.objects, name, at, mask)
        assert_detected(outcome(store, flushed.expected, flushed.universe), f"footer byte {pos}")


def test_flip_in_every_data_block(flushed: Golden) -> None:
    """One flip in the middle of each data block, one block at a time."""
    name, data = the_sst(flushed)
    failures = []
    for i, (start, size) in enumerate(sst_regions(data)["data"]):
        pos = start + (i * 7919) % size  # a different spot in each block
        result = outcome(flipped(flushed.objects, name, pos), flushed.expected, flushed.universe)
        if result != "corruption":
            failures.append(f"data block {i} byte {pos}: {result}")
    assert failures == []


def test_truncated_or_missing_sst(flushed: Golden) -> None:
    name, data = the_sst(flushed)
    for cut in (0, 1, len(data) // 2, len(data) - FOOTER_SIZE, len(data) - 1):
        objects = dict(flushed.objects)
        objects[name] = data[:cut]
        result = outcome(copy_store(objects), flushed.expected, flushed.universe)
        assert_detected(result, f"SST truncated to {cut} bytes")


# ---------------------------------------------------------------------------
# manifest
# ---------------------------------------------------------------------------

MANIFEST_HEADER = {
    "magic": range(0, 8),
    "format_version": range(8, 10),
    "flags": range(10, 12),
    "body_len": range(12, 16),
    "body_crc": range(16, 20),
}


@pytest.mark.parametrize(
    "field, pos", [(f, p) for f, r in MANIFEST_HEADER.items() for p in r], ids=str
)
def test_flip_in_manifest_header(flushed: Golden, field: str, pos: int) -> None:
    name, _ = latest_manifest(flushed.objects)
    store = flipped(flushed.objects, name, pos, 0x01)
    assert_detected(outcome(store, flushed.expected, flushed.universe), f"manifest {field}")


@pytest.mark.parametrize("where", ["first", "quarter", "middle", "three-quarters", "last"])
def test_flip_in_manifest_body(flushed: Golden, where: str) -> None:
    name, _ = latest_manifest(flushed.objects)
    size = len(flushed.objects[name]) - 20
    pos = 20 + (size - 1 if where == "last" else resolve(0 if where == "first" else where, size))
    store = flipped(flushed.objects, name, pos, 0x01)
    assert_detected(outcome(store, flushed.expected, flushed.universe), f"manifest byte {pos}")


def test_flip_in_every_manifest_byte(flushed: Golden) -> None:
    name, _ = latest_manifest(flushed.objects)
    undetected = []
    for pos in range(len(flushed.objects[name])):
        result = outcome(flipped(flushed.objects, name, pos, 0x04), flushed.expected, [])
        if result != "corruption":
            undetected.append((pos, result.splitlines()[0]))
    assert undetected == [], f"manifest flips not reported as corruption: {undetected}"


# ---------------------------------------------------------------------------
# WAL objects (object-store WAL)
# ---------------------------------------------------------------------------


def frame_offsets(data: bytes, start: int) -> list[int]:
    """Start of every frame of a complete container whose frames begin at ``start``,
    from the length fields."""
    out, pos = [], start
    while pos < len(data):
        out.append(pos)
        (length,) = struct.unpack_from("<I", data, pos)
        pos += 12 + length
    assert pos == len(data)
    return out


def object_frames(data: bytes) -> list[int]:
    """Frame starts of a WAL object: after its 24-byte header (docs/format/wal.md)."""
    assert data[:8] == b"KVWOBJ\x00\x01"
    starts = frame_offsets(data, OBJECT_HEADER_SIZE)
    assert struct.unpack_from("<I", data, 16)[0] == len(starts)  # the header's frame count
    return starts


def journal_frames(data: bytes) -> list[int]:
    """Frame starts of a journal segment: after its 16-byte header (docs/format/wal.md)."""
    assert data[:8] == b"KVWLOG\x00\x01"
    starts = frame_offsets(data, SEGMENT_HEADER_SIZE)
    decoded = decode_segment(data)
    assert not decoded.torn and len(decoded.records) == len(starts)
    return starts


WAL_PARTS = {
    "length": 0,
    "header_crc": 4,
    "payload_crc": 8,
    "seq": 12,
    "count": 20,
    "kinds": 24,
    "payload_last": -1,
}


@pytest.mark.parametrize("which", ["first", "batch", "group", "last"])
@pytest.mark.parametrize("part", list(WAL_PARTS))
def test_flip_in_wal_object(crashed_wal: Golden, which: str, part: str) -> None:
    live = live_wal_objects(crashed_wal)
    by_frames = {n: object_frames(crashed_wal.objects[n]) for n in live}
    group = next(n for n in live if len(by_frames[n]) > 1)
    name = {"first": live[0], "batch": live[2], "group": group, "last": live[-1]}[which]
    data = crashed_wal.objects[name]
    starts = by_frames[name]
    # In a multi-frame object damage the middle frame, else the only one.
    start = starts[len(starts) // 2]
    end = starts[starts.index(start) + 1] if start != starts[-1] else len(data)
    off = WAL_PARTS[part]
    pos = end - 1 if off < 0 else start + off
    store = flipped(crashed_wal.objects, name, pos)
    assert_detected(
        outcome(store, crashed_wal.expected, crashed_wal.universe), f"{name} {part} byte {pos}"
    )


#: the WAL object header: field -> byte range (docs/format/wal.md)
OBJECT_HEADER = {
    "magic": range(0, 8),
    "version": range(8, 10),
    "flags": range(10, 12),  # mask 0x01 at byte 10 sets the fence flag
    "body_len": range(12, 16),
    "frames": range(16, 20),
    "header_crc": range(20, 24),
}


@pytest.mark.parametrize("which", ["first", "group", "last"])
@pytest.mark.parametrize(
    "field, pos", [(f, p) for f, r in OBJECT_HEADER.items() for p in r], ids=str
)
def test_flip_in_wal_object_header(crashed_wal: Golden, which: str, field: str, pos: int) -> None:
    live = live_wal_objects(crashed_wal)
    group = next(n for n in live if len(object_frames(crashed_wal.objects[n])) > 1)
    name = {"first": live[0], "group": group, "last": live[-1]}[which]
    for mask in (0x01, 0x80):
        store = flipped(crashed_wal.objects, name, pos, mask)
        assert_detected(
            outcome(store, crashed_wal.expected, crashed_wal.universe),
            f"{name} header {field} byte {pos} ^ {mask:#x}",
        )


def resealed_object_header(data: bytes, **fields: int) -> bytes:
    """``data`` with header fields replaced and the header CRC recomputed (a buggy
    writer, not bit rot: only the header's own checks can catch it)."""
    magic, version, flags, body_len, frames, _crc = struct.unpack_from("<8sHHIII", data, 0)
    values = {"version": version, "flags": flags, "body_len": body_len, "frames": frames}
    values.update(fields)
    head = struct.pack(
        "<8sHHII", magic, values["version"], values["flags"], values["body_len"], values["frames"]
    )
    return head + struct.pack("<I", crc32c(head)) + data[OBJECT_HEADER_SIZE:]


@pytest.mark.parametrize(
    "field, how, n",
    [
        ("frames", "+", -1),  # one frame fewer than the body holds
        ("frames", "+", +1),  # a frame missing from the body
        ("frames", "=", 0),
        ("body_len", "+", -1),
        ("body_len", "+", +1),
        ("flags", "=", 1),  # the fence flag on an object with frames
        ("flags", "=", 2),  # an unknown flag
        ("version", "=", 2),
    ],
)
def test_resealed_wal_object_header_is_corruption(
    crashed_wal: Golden, field: str, how: str, n: int
) -> None:
    """A header with a valid CRC whose fields disagree with the body is corruption."""
    live = live_wal_objects(crashed_wal)
    name = next(n for n in live if len(object_frames(crashed_wal.objects[n])) > 1)
    data = crashed_wal.objects[name]
    _, version, flags, body_len, frames, _ = struct.unpack_from("<8sHHIII", data, 0)
    current = {"version": version, "flags": flags, "body_len": body_len, "frames": frames}
    new = current[field] + n if how == "+" else n
    assert new != current[field]
    objects = dict(crashed_wal.objects)
    objects[name] = resealed_object_header(data, **{field: new})
    result = outcome(copy_store(objects), crashed_wal.expected, crashed_wal.universe)
    assert_detected(result, f"{name} header {field} = {new}")


def wal_id(name: str) -> int:
    parsed = paths.parse_wal_name(name)
    assert parsed is not None, name
    return parsed[0]


def test_damaged_fence_object_is_corruption(crashed_wal: Golden) -> None:
    """A fence object replay reads (at or after wal_replay_from) is checked like any
    other: a flipped byte, a body behind it, or a cut is corruption, never 'a fence'."""
    _, m = latest_manifest(crashed_wal.objects)
    live = live_wal_objects(crashed_wal)
    fence_name = paths.wal_object_name(wal_id(live[-1]) + 1)
    fence = crashed_wal.objects[paths.wal_object_name(m.wal_replay_from - 1)]
    assert decode_object(fence) == ([], True) and len(fence) == OBJECT_HEADER_SIZE
    # Sanity: an intact fence after the last object changes nothing.
    objects = {**crashed_wal.objects, fence_name: fence}
    assert outcome(copy_store(objects), crashed_wal.expected, crashed_wal.universe) == (
        "undetected"
    )
    frame = crashed_wal.objects[live[0]][OBJECT_HEADER_SIZE:]
    bad_fences = [bytes(fence[:cut]) for cut in range(OBJECT_HEADER_SIZE)]
    bad_fences += [fence + frame, fence + b"\x00"]
    bad_fences += [
        bytes(b ^ (0x01 if i == pos else 0) for i, b in enumerate(fence))
        for pos in range(OBJECT_HEADER_SIZE)
    ]
    bad_fences.append(resealed_object_header(fence, frames=1))
    failures = []
    for i, bad in enumerate(bad_fences):
        objects = {**crashed_wal.objects, fence_name: bad}
        result = outcome(copy_store(objects), crashed_wal.expected, crashed_wal.universe)
        if result != "corruption":
            failures.append(f"damaged fence #{i} ({bad.hex()}): {result}")
    assert failures == []


def test_flip_in_every_wal_byte(crashed_wal: Golden) -> None:
    failures = []
    for name in live_wal_objects(crashed_wal):
        for pos in range(len(crashed_wal.objects[name])):
            store = flipped(crashed_wal.objects, name, pos, 0x10)
            result = outcome(store, crashed_wal.expected, crashed_wal.universe)
            if result != "corruption":
                failures.append(f"{name} byte {pos}: {result}")
    assert failures == []


def test_truncated_wal_object_is_corruption(crashed_wal: Golden) -> None:
    """WAL objects are written whole, so a short one is damage, not a torn tail."""
    live = live_wal_objects(crashed_wal)
    name = next(n for n in live if len(object_frames(crashed_wal.objects[n])) > 1)
    data = crashed_wal.objects[name]
    failures = []
    for cut in range(0, len(data)):
        objects = dict(crashed_wal.objects)
        objects[name] = data[:cut]
        result = outcome(copy_store(objects), crashed_wal.expected, crashed_wal.universe)
        if result != "corruption":
            failures.append(f"cut at {cut}: {result}")
    frames = object_frames(data)
    # cuts at 0 (an empty object), inside the header and at every frame boundary included
    assert {0, OBJECT_HEADER_SIZE, *frames} <= set(range(len(data)))
    assert failures == [], f"{name} (frames start at {frames}) truncations not detected"


# ---------------------------------------------------------------------------
# local directory: journal WAL (torn tails allowed) and SSTs read with pread
# ---------------------------------------------------------------------------


@dataclass
class LocalGolden:
    root: Path
    writes: list[tuple[bytes, bytes | None]]  # one frame each, in order

    def journal(self) -> Path:
        """The one segment holding frames (every segment starts with a 16-byte header)."""
        logs = sorted((self.root / "wal").glob("*.log"))
        logs = [p for p in logs if p.stat().st_size > SEGMENT_HEADER_SIZE]
        assert len(logs) == 1
        return logs[0]

    def state_after(self, k: int) -> dict[bytes, bytes]:
        state: dict[bytes, bytes] = {}
        for key, value in self.writes[:k]:
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
        return state

    def universe(self) -> list[bytes]:
        return sorted({k for k, _ in self.writes})


@pytest.fixture(scope="module")
def local_journal(tmp_path_factory: pytest.TempPathFactory) -> LocalGolden:
    live = tmp_path_factory.mktemp("live")
    db = kvstore.open(str(live), fsync=False, **OPTS)
    writes: list[tuple[bytes, bytes | None]] = []
    for i in range(12):
        key, value = b"j%02d" % (i % 8), (None if i % 5 == 4 else b"value-%d" % i)
        if value is None:
            db.delete(key)
        else:
            db.put(key, value)
        writes.append((key, value))
    golden = tmp_path_factory.mktemp("golden") / "store"
    shutil.copytree(live, golden)  # the writer is open: a crash would leave this
    db.close()
    return LocalGolden(golden, writes)


def damaged_copy(src: Path, dst: Path, edit: Callable[[Path], None], rel: Path) -> str:
    shutil.copytree(src, dst)
    edit(dst / rel)
    return str(dst)


def test_local_journal_reads_back(local_journal: LocalGolden, tmp_path: Path) -> None:
    target = damaged_copy(local_journal.root, tmp_path / "s", lambda p: None, Path("."))
    expected = local_journal.state_after(len(local_journal.writes))
    assert outcome(target, expected, local_journal.universe()) == "undetected"


def test_local_journal_flip_every_byte(local_journal: LocalGolden, tmp_path: Path) -> None:
    log = local_journal.journal()
    rel = log.relative_to(local_journal.root)
    size = log.stat().st_size
    expected = local_journal.state_after(len(local_journal.writes))
    failures = []
    for pos in range(0, size, 3):

        def flip(p: Path, pos: int = pos) -> None:
            bad = bytearray(p.read_bytes())
            bad[pos] ^= 0x08
            p.write_bytes(bytes(bad))

        target = damaged_copy(local_journal.root, tmp_path / f"c{pos}", flip, rel)
        result = outcome(target, expected, local_journal.universe())
        if result != "corruption":
            failures.append(f"journal byte {pos}: {result}")
    assert failures == []


def test_local_journal_torn_tail_keeps_a_prefix(local_journal: LocalGolden, tmp_path: Path) -> None:
    """Every truncation of the journal opens, holding exactly the whole frames before the cut.

    Frames start after the 16-byte segment header; a cut inside the header
    leaves a segment that never held a frame (empty, not corruption).
    """
    log = local_journal.journal()
    rel = log.relative_to(local_journal.root)
    data = log.read_bytes()
    starts = journal_frames(data)
    assert starts[0] == SEGMENT_HEADER_SIZE
    assert len(starts) == len(local_journal.writes)
    ends = [*starts[1:], len(data)]
    cuts = {*range(0, SEGMENT_HEADER_SIZE + 1), *range(0, len(data), 5), *starts}
    cuts |= {e - 1 for e in ends}
    for cut in sorted(cuts):

        def cut_at(p: Path, c: int = cut) -> None:
            os.truncate(p, c)

        target = damaged_copy(local_journal.root, tmp_path / f"t{cut}", cut_at, rel)
        whole = sum(e <= cut for e in ends)
        expected = local_journal.state_after(whole)
        assert outcome(target, expected, local_journal.universe()) == "undetected", cut


#: the journal segment header: field -> byte range (docs/format/wal.md)
SEGMENT_HEADER = {
    "magic": range(0, 8),
    "version": range(8, 10),
    "flags": range(10, 12),
    "header_crc": range(12, 16),
}


@pytest.mark.parametrize(
    "field, pos", [(f, p) for f, r in SEGMENT_HEADER.items() for p in r], ids=str
)
def test_local_journal_flip_in_segment_header(
    local_journal: LocalGolden, tmp_path: Path, field: str, pos: int
) -> None:
    """A damaged segment header is corruption, not a torn (empty) segment."""
    log = local_journal.journal()
    rel = log.relative_to(local_journal.root)
    expected = local_journal.state_after(len(local_journal.writes))
    for mask in (0x01, 0x80):

        def flip(p: Path, m: int = mask) -> None:
            bad = bytearray(p.read_bytes())
            bad[pos] ^= m
            p.write_bytes(bytes(bad))

        target = damaged_copy(local_journal.root, tmp_path / f"h{mask}", flip, rel)
        assert_detected(
            outcome(target, expected, local_journal.universe()),
            f"segment header {field} byte {pos} ^ {mask:#x}",
        )


def resealed_segment_header(data: bytes, *, version: int = 1, flags: int = 0) -> bytes:
    head = struct.pack("<8sHH", data[:8], version, flags)
    return head + struct.pack("<I", crc32c(head)) + data[SEGMENT_HEADER_SIZE:]


@pytest.mark.parametrize(
    "edit",
    [
        "zeroed header",  # frames behind a zero header: not a zero-filled torn tail
        "zeroed header and first frame",
        "version 2",  # a valid CRC does not make an unknown version acceptable
        "flags 1",
        "header only, damaged",  # no frames, but the header is not a torn write
    ],
)
def test_local_journal_bad_segment_header(
    local_journal: LocalGolden, tmp_path: Path, edit: str
) -> None:
    log = local_journal.journal()
    rel = log.relative_to(local_journal.root)
    data = log.read_bytes()
    starts = journal_frames(data)
    assert resealed_segment_header(data) == data  # the helper reproduces the writer

    def apply(p: Path) -> None:
        if edit == "zeroed header":
            new = bytes(SEGMENT_HEADER_SIZE) + data[SEGMENT_HEADER_SIZE:]
        elif edit == "zeroed header and first frame":
            new = bytes(starts[1]) + data[starts[1] :]
        elif edit == "version 2":
            new = resealed_segment_header(data, version=2)
        elif edit == "flags 1":
            new = resealed_segment_header(data, flags=1)
        else:
            new = data[:8] + bytes([data[8] ^ 0x04]) + data[9:SEGMENT_HEADER_SIZE]
        p.write_bytes(new)

    target = damaged_copy(local_journal.root, tmp_path / "b", apply, rel)
    expected = local_journal.state_after(len(local_journal.writes))
    assert_detected(outcome(target, expected, local_journal.universe()), edit)


@pytest.mark.parametrize("size", [SEGMENT_HEADER_SIZE, 40, 4096])
def test_local_journal_all_zero_segment_is_empty(
    local_journal: LocalGolden, tmp_path: Path, size: int
) -> None:
    """A segment that is zeros from its first byte (an unsynced extent after a power
    cut, header included) held no durable frame: it is an empty torn segment."""
    log = local_journal.journal()

    def zero(p: Path) -> None:
        p.write_bytes(bytes(size))

    target = damaged_copy(local_journal.root, tmp_path / "z", zero, log.relative_to(log.parents[1]))
    assert outcome(target, {}, local_journal.universe()) == "undetected"


@pytest.mark.parametrize("zeros", [1, 12, 100, 4096])
def test_local_journal_zero_filled_tail(
    local_journal: LocalGolden, tmp_path: Path, zeros: int
) -> None:
    log = local_journal.journal()

    def pad(p: Path) -> None:
        with open(p, "ab") as f:
            f.write(bytes(zeros))

    target = damaged_copy(local_journal.root, tmp_path / "z", pad, log.relative_to(log.parents[1]))
    expected = local_journal.state_after(len(local_journal.writes))
    assert outcome(target, expected, local_journal.universe()) == "undetected"


@pytest.fixture(scope="module")
def local_flushed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Golden]:
    root = tmp_path_factory.mktemp("flushed")
    db = kvstore.open(str(root), fsync=False, **OPTS)
    expected = write_workload(db, durable=False)
    db.close()
    objects = {
        p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()
    }
    return root, Golden(objects, expected, [keyname(i) for i in range(NKEYS + 5)])


@pytest.mark.parametrize(
    "region, which, offset",
    [
        ("data", "first", 0),
        ("data", "middle", "middle"),
        ("data", "last", -1),
        ("bloom", "only", "middle"),
        ("index", "only", -5),
        ("props", "only", 4),
        ("footer", "only", 0),
        ("footer", "only", -1),
    ],
)
def test_local_flip_in_sst(
    local_flushed: tuple[Path, Golden], tmp_path: Path, region: str, which: str, offset: int | str
) -> None:
    root, g = local_flushed
    name, data = the_sst(g)
    spans = sst_regions(data)[region]
    start, size = spans[0] if which == "only" else pick_block(spans, which)
    pos = start + resolve(offset, size)

    def flip(p: Path) -> None:
        bad = bytearray(p.read_bytes())
        bad[pos] ^= 0x5A
        p.write_bytes(bytes(bad))

    target = damaged_copy(root, tmp_path / "s", flip, Path(name))
    assert_detected(outcome(target, g.expected, g.universe), f"local {region} byte {pos}")


# ---------------------------------------------------------------------------
# a hole in the WAL: the newest manifest lost after it retired old segments
# ---------------------------------------------------------------------------
def _store_with_a_lost_manifest(path: Path) -> None:
    """Writes 1..10 and 11..20 each flushed, 21..25 only in the WAL; then the newest
    manifest (which retired the segment holding 11..20) is lost."""
    quiet = {"background_flush": False, "background_compaction": False}
    db = kvstore.open(path, **quiet)
    for batch in range(3):
        for i in range(batch * 10, batch * 10 + (10 if batch < 2 else 5)):
            db.put(b"k%02d" % i, b"v%d" % i)
        if batch < 2:
            db.flush()
    newest = db.manifest.id
    db.abandon()  # a crash: 21..25 stay in the WAL only
    os.remove(path / paths.manifest_name(newest))


def test_a_hole_in_the_wal_is_corruption_not_silent_loss(tmp_path: Path) -> None:
    path = tmp_path / "db"
    _store_with_a_lost_manifest(path)
    before = sorted(os.listdir(path / "manifest"))
    with pytest.raises(CorruptionError, match="seq 11 on are missing") as err:
        kvstore.open(path)
    assert "accept_wal_loss" in str(err.value)
    with pytest.raises(CorruptionError, match="seq 11 on are missing"):
        kvstore.open_reader(path)  # not "the store changed too quickly"
    # the refused open claimed the store but changed nothing a reader depends on
    assert set(before) <= set(os.listdir(path / "manifest"))
    with kvstore.open(path, accept_wal_loss=True) as db:  # what is left: 1..10, 21..25
        got = dict(db.scan())
        assert sorted(got) == [b"k%02d" % i for i in [*range(10), *range(20, 25)]]
        db.put(b"after", b"1")
    with kvstore.open(path) as db:  # and the store is whole again
        assert db.get(b"after") == b"1" and db.get(b"k22") == b"v22"


def test_accept_wal_loss_cuts_a_damaged_newest_segment_and_only_that(tmp_path: Path) -> None:
    """A power loss can persist unsynced pages of the live journal out of order
    (a later page, not an earlier one): the damage is not a torn tail, so an open
    refuses it; with accept_wal_loss the newest segment is cut at the damage and
    every write synced before it is kept. Damage in an older (synced, closed)
    segment (one followed by a segment holding frames) is never cut."""
    path = tmp_path / "db"
    quiet = {"background_flush": False, "background_compaction": False}
    db = kvstore.open(path, **quiet, wal_buffer_bytes=4096)
    for i in range(5):
        db.put(b"durable%d" % i, b"v" * 100)  # synced
    seg = path / "wal" / sorted(os.listdir(path / "wal"))[-1]
    for i in range(10):
        db.put(b"nd%d" % i, b"w" * 3000, durable=False)  # written out, never synced
    db.abandon()  # the power goes
    data = bytearray(seg.read_bytes())
    synced_end = data.rindex(b"v" * 100) + 100  # past the last durable frame
    page = (synced_end // 4096 + 1) * 4096  # a later page reached the disk, this one did not
    data[page : page + 4096] = bytes(4096)
    seg.write_bytes(bytes(data))
    with pytest.raises(CorruptionError, match="checksum mismatch"):
        kvstore.open(path, **quiet)
    with kvstore.open(path, **quiet, accept_wal_loss=True) as db:
        assert all(db.get(b"durable%d" % i) == b"v" * 100 for i in range(5))
        kept = [i for i in range(10) if db.get(b"nd%d" % i) is not None]
        assert kept == list(range(len(kept))) and len(kept) < 10  # a prefix, then the cut
    # damage in a segment that is not the newest is never cut
    db = kvstore.open(path, **quiet)
    db.put(b"x", b"1")
    db.flush()  # a fresh segment for what follows
    db.put(b"y", b"2")
    db.parts.commit.wal.rotate()  # y's segment is now closed (synced) and not the newest
    db.put(b"z", b"3")  # a frame in the newest segment
    db.abandon()  # a crash: nothing flushed, nothing closed
    older = path / "wal" / sorted(os.listdir(path / "wal"))[-2]
    raw = bytearray(older.read_bytes())
    raw[20] ^= 0xFF  # inside its first frame, followed by more data
    older.write_bytes(bytes(raw))
    with pytest.raises(CorruptionError, match="checksum mismatch"):
        kvstore.open(path, **quiet, accept_wal_loss=True)


def test_accept_wal_loss_cuts_the_live_segment_behind_an_empty_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An open replayed the live segment from the page cache, made its own (empty)
    segment and crashed before its manifest; then a power loss lost an unsynced
    page of the live segment. That segment is still the last one holding frames,
    so accept_wal_loss cuts it."""
    path = tmp_path / "db"
    quiet = {"background_flush": False, "background_compaction": False}
    w1 = kvstore.open(path, **quiet)
    w1.put(b"a", b"durable")
    w1.put(b"c", b"x" * 100, durable=False)
    w1.put(b"d", b"y" * 100, durable=False)
    w1.parts.commit.wal.write_out()
    seg = path / "wal" / sorted(os.listdir(path / "wal"))[-1]
    w1.abandon()  # a crash: nothing flushed, nothing closed

    def crash(self: ManifestWriter, m: Manifest) -> None:
        raise kvstore.objstore.SimulatedCrash("crash before the final manifest")

    real = ManifestWriter.write
    monkeypatch.setattr(ManifestWriter, "write", crash)
    with pytest.raises(kvstore.objstore.SimulatedCrash):
        kvstore.open(path, **quiet)
    monkeypatch.setattr(ManifestWriter, "write", real)
    assert len(os.listdir(path / "wal")) == 2  # the crashed open's empty segment
    data = bytearray(seg.read_bytes())
    first = 16 + 12 + struct.unpack_from("<I", data, 16)[0]  # past frame a
    data[first : first + 24] = bytes(24)  # frame c's page never reached the disk
    seg.write_bytes(bytes(data))
    with pytest.raises(CorruptionError):
        kvstore.open(path, **quiet)
    with kvstore.open(path, **quiet, accept_wal_loss=True) as db:
        assert db.get(b"a") == b"durable" and db.get(b"d") is None
