"""Power loss on a pre-written journal: unsynced pages lost or persisted out of order.

A journal segment is pre-written with zeros (and synced) ahead of its write
position, so the blocks a commit's frames land in hold either zeros or this
segment's own frames, never anything older: there is no stale data to
replay (docs/format/wal.md, "Pre-written segments"). What a power cut can do
is lose any subset of the pages written since the last sync, and keep the
others: each page of the file is either as it was at the last sync or as the
process last wrote it. For many such mixes this checks the written
torn-tail rule: every frame acknowledged by a sync is read back, what is
read is a prefix of what was written, and when a later page survived an
earlier one that was lost, decoding reports ``CorruptionError`` (never a
guess), while the lenient decode that ``accept_wal_loss=True`` uses still
returns every acknowledged frame.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kvstore import CorruptionError
from kvstore.format.wal import decode_segment, encode_record
from kvstore.objstore import LocalStore, local
from kvstore.wal import JournalWal

PAGE = 4096


def _frames(n: int, rng: random.Random) -> list[bytes]:
    return [
        encode_record(i + 1, [b"k%05d" % i], [bytes([i % 250 + 1]) * rng.randrange(20, 900)])
        for i in range(n)
    ]


def _mix(synced: bytes, final: bytes, rng: random.Random) -> bytes:
    """A file after a power cut: each page as at the last sync, or as last written."""
    size = len(final) if rng.random() < 0.5 else max(len(synced), len(final) - PAGE * 3)
    out = bytearray()
    for start in range(0, size, PAGE):
        new = final[start : start + PAGE]
        old = synced[start : start + PAGE].ljust(len(new), b"\0")
        out += new if rng.random() < 0.5 else old
    return bytes(out[:size])


@pytest.mark.parametrize("seed", range(6))
def test_power_loss_keeps_every_synced_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    monkeypatch.setattr(local, "JOURNAL_PREALLOCATE", 16 * PAGE)
    rng = random.Random(seed)
    frames = _frames(300, rng)
    wal = JournalWal(LocalStore(tmp_path), 1, lambda: None)
    path = tmp_path / "wal" / "00000000000000000001.log"
    assert path.parent.exists()
    path = sorted(path.parent.glob("*.log"))[0]
    checked = corrupt = 0
    acked = 0
    synced = path.read_bytes()
    for i, frame in enumerate(frames):
        wal.append(frame)
        if rng.random() < 0.15:
            wal.sync(wal.appended)
            acked = i + 1
            synced = path.read_bytes()
        if rng.random() < 0.3 and acked:
            final = path.read_bytes() if not wal.pending_bytes else None
            if final is None:
                wal.write_out()
                final = path.read_bytes()
            for _ in range(4):
                data = _mix(synced, final, rng)
                checked += 1
                try:
                    got = decode_segment(data).records
                except CorruptionError:
                    corrupt += 1
                    got = decode_segment(data, lenient=True).records
                assert len(got) >= acked, (i, acked, len(got))
                assert [r.seq for r in got] == list(range(1, len(got) + 1))
                assert len(got) <= i + 1
    wal.close()
    assert checked > 50 and corrupt > 0  # out-of-order persistence was exercised
