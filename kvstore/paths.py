"""Every object name the store uses, in one place.

Layout under the store root::

    manifest/00000000000000000001.manifest    numbered manifests (create-if-absent)
    wal/00000000000000000007.log              local journal segments (append + fsync)
    wal/00000000000000000007.wal              immutable WAL objects (object stores)
    sst/<26-char ULID>.sst                    sorted string tables (never reused)
    writer.epoch                              local only: 8-byte fencing hint (mmap)
    writer.lock, writers/<nonce>.lock         local only: the live writer's OS locks
                                              (files, not objects: objstore/writer_lock.py)

Names sort lexically in numeric order (ids are zero-padded to 20 digits).
"""

from __future__ import annotations

MANIFEST_DIR = "manifest/"
WAL_DIR = "wal/"
SST_DIR = "sst/"
EPOCH_CELL = "writer.epoch"
#: names the WAL location (the store, or a wal_dir) and the store it belongs to
WAL_IDENTITY = "wal.id"

_ID_WIDTH = 20


def manifest_name(manifest_id: int) -> str:
    return f"{MANIFEST_DIR}{manifest_id:0{_ID_WIDTH}d}.manifest"


def parse_manifest_name(name: str) -> int | None:
    return _parse_numbered(name, MANIFEST_DIR, ".manifest")


def wal_segment_name(segment_id: int) -> str:
    """A local journal segment (appended to)."""
    return f"{WAL_DIR}{segment_id:0{_ID_WIDTH}d}.log"


def wal_object_name(wal_id: int) -> str:
    """An immutable WAL object (object-store WAL)."""
    return f"{WAL_DIR}{wal_id:0{_ID_WIDTH}d}.wal"


def parse_wal_name(name: str) -> tuple[int, str] | None:
    """``(id, kind)`` with kind ``"log"`` or ``"wal"``, or None for foreign names."""
    for suffix, kind in ((".log", "log"), (".wal", "wal")):
        wal_id = _parse_numbered(name, WAL_DIR, suffix)
        if wal_id is not None:
            return wal_id, kind
    return None


def sst_name(sst_id: str) -> str:
    return f"{SST_DIR}{sst_id}.sst"


def parse_sst_name(name: str) -> str | None:
    if name.startswith(SST_DIR) and name.endswith(".sst") and "/" not in name[len(SST_DIR) :]:
        return name[len(SST_DIR) : -len(".sst")] or None
    return None


def _parse_numbered(name: str, prefix: str, suffix: str) -> int | None:
    if not (name.startswith(prefix) and name.endswith(suffix)):
        return None
    digits = name[len(prefix) : len(name) - len(suffix)]
    if len(digits) != _ID_WIDTH or not digits.isdigit():
        return None
    return int(digits)
