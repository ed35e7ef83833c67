"""The manifest: which SSTs are live, where WAL replay starts, who may write.

Each manifest is a new object ``manifest/<20-digit id>.manifest`` created with
``put_if_absent``; the newest id wins. Envelope::

    magic "KVMANIF1"  format_version:u16  flags:u16  body_len:u32  crc:u32
    body: UTF-8 JSON (keys hex-encoded)

    crc = crc32c(the 16 header bytes before it + body): every byte is covered

A manifest whose magic, version, length or checksum is wrong raises
:class:`~kvstore.errors.CorruptionError`; it is never skipped, because
skipping a manifest would silently roll the store back. (A crash cannot tear a
manifest: it is written whole by an atomic create.)

:meth:`Manifest.check` asserts the invariants before any manifest is written:

* L0 SSTs are listed newest first, with disjoint, descending seq ranges;
* every SST in a sorted run has a key range after the previous one's;
* SST ids are unique; ``last_flushed_seq`` covers every SST;
* the writer epoch and the id are positive.
"""

from __future__ import annotations

import json
import struct
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from crc32c import crc32c

from kvstore.errors import CorruptionError

MAGIC = b"KVMANIF1"
#: how many writer claims a manifest remembers (and GC keeps)
MAX_CLAIMS = 16
FORMAT_VERSION = 1
_HEAD = struct.Struct("<8sHHII")


@dataclass(frozen=True, slots=True)
class SstMeta:
    id: str
    size: int
    count: int
    tombstones: int
    min_seq: int
    max_seq: int
    first_key: bytes
    last_key: bytes

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["first_key"] = self.first_key.hex()
        d["last_key"] = self.last_key.hex()
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SstMeta:
        return cls(
            id=str(d["id"]),
            size=int(d["size"]),
            count=int(d["count"]),
            tombstones=int(d["tombstones"]),
            min_seq=int(d["min_seq"]),
            max_seq=int(d["max_seq"]),
            first_key=bytes.fromhex(d["first_key"]),
            last_key=bytes.fromhex(d["last_key"]),
        )


@dataclass(frozen=True, slots=True)
class Manifest:
    id: int
    writer_epoch: int
    last_flushed_seq: int = 0
    wal_replay_from: int = 1
    l0: tuple[SstMeta, ...] = ()
    runs: tuple[tuple[SstMeta, ...], ...] = ()
    retention_seq: int | None = None  # None: no watermark (only snapshots keep versions)
    seq_times: tuple[tuple[int, int], ...] = ()  # (seq, ms) samples for age-based retention
    checkpoints: dict[str, Any] = field(default_factory=dict)
    created_ms: int = 0
    writer_nonce: str = ""  # random per writer session: tells same-epoch writes apart
    #: ids of the manifests with which the latest writers claimed the store (newest
    #: last, at most MAX_CLAIMS): GC keeps them, so an old writer's probe of "its
    #: latest id + 1" still finds the claim that fenced it (see ManifestStore)
    claims: tuple[int, ...] = ()
    #: absolute path of the local WAL directory (option wal_dir) of the writer
    #: that wrote this manifest; None: its WAL lives in the store
    wal_dir: str | None = None
    #: identity of that WAL location (its ``wal.id``); None: not recorded
    wal_id: str | None = None
    #: its writer closed with everything flushed: the WAL holds nothing to replay
    wal_clean: bool = False
    #: random identity of the store, fixed when it is created ("" for old stores
    #: until their next open)
    store_id: str = ""
    #: its writer's WAL is a journal whose segment ``wal_replay_from`` must exist
    #: (created before any manifest named it, deleted only after a newer manifest
    #: moved on), so a missing one is damage, not "no writes"; a claim made after
    #: a clean close says False (nothing there is needed)
    wal_journal: bool = False
    #: WAL ids below this hold no data objects any more (only fences, kept)
    wal_swept: int = 0
    #: SSTs no manifest references any more, with when they stopped being
    #: referenced (ms): GC's grace period counts from then, across processes
    obsolete: tuple[tuple[str, int], ...] = ()

    def evolve(self, **changes: Any) -> Manifest:
        return replace(self, **changes)

    def all_ssts(self) -> list[SstMeta]:
        return [*self.l0, *(s for run in self.runs for s in run)]

    def check(self) -> None:
        """Raise AssertionError naming the first broken invariant."""
        if self.retention_seq is not None and self.retention_seq < 0:
            raise AssertionError(f"retention watermark {self.retention_seq} is negative")
        for name, cp in self.checkpoints.items():
            if not isinstance(cp, dict) or not 1 <= int(cp.get("manifest_id", 0)) <= self.id:
                raise AssertionError(f"checkpoint {name!r} points to no valid manifest")
        if self.id < 1 or self.writer_epoch < 0:
            raise AssertionError(f"manifest id {self.id} / epoch {self.writer_epoch} invalid")
        if any(not 1 <= c <= self.id for c in self.claims) or list(self.claims) != sorted(
            set(self.claims)
        ):
            raise AssertionError(f"claims {self.claims} are not ascending ids <= {self.id}")
        ids = [s.id for s in self.all_ssts()]
        if len(ids) != len(set(ids)):
            raise AssertionError("an SST is listed twice")
        for newer, older in zip(self.l0, self.l0[1:]):
            if newer.min_seq <= older.max_seq:
                raise AssertionError(f"L0 {newer.id} is not strictly newer than {older.id}")
        for run in self.runs:
            for a, b in zip(run, run[1:]):
                if a.last_key >= b.first_key:
                    raise AssertionError(f"sorted run SSTs {a.id} and {b.id} overlap")
        for s in self.all_ssts():
            if s.max_seq > self.last_flushed_seq:
                raise AssertionError(f"SST {s.id} holds seq {s.max_seq} > last_flushed_seq")
            if s.first_key > s.last_key or s.min_seq > s.max_seq:
                raise AssertionError(f"SST {s.id} has an inverted range")

    def encode(self) -> bytes:
        body = json.dumps(
            {
                "id": self.id,
                "writer_epoch": self.writer_epoch,
                "last_flushed_seq": self.last_flushed_seq,
                "wal_replay_from": self.wal_replay_from,
                "l0": [s.to_json() for s in self.l0],
                "runs": [[s.to_json() for s in run] for run in self.runs],
                "retention_seq": self.retention_seq,
                "seq_times": [list(x) for x in self.seq_times],
                "checkpoints": self.checkpoints,
                "created_ms": self.created_ms,
                "writer_nonce": self.writer_nonce,
                # only when set: a manifest without claims encodes as before
                **({"claims": list(self.claims)} if self.claims else {}),
                **({"wal_dir": self.wal_dir} if self.wal_dir is not None else {}),
                **({"wal_id": self.wal_id} if self.wal_id is not None else {}),
                **({"wal_clean": True} if self.wal_clean else {}),
                **({"store_id": self.store_id} if self.store_id else {}),
                **({"wal_journal": True} if self.wal_journal else {}),
                **({"wal_swept": self.wal_swept} if self.wal_swept else {}),
                **({"obsolete": [list(x) for x in self.obsolete]} if self.obsolete else {}),
            },
            separators=(",", ":"),
            sort_keys=True,
        ).encode()
        head = _HEAD.pack(MAGIC, FORMAT_VERSION, 0, len(body), 0)[:16]
        return head + struct.pack("<I", crc32c(head + body)) + body

    @classmethod
    def decode(cls, data: bytes, *, where: str = "manifest") -> Manifest:
        if len(data) < _HEAD.size:
            raise CorruptionError("manifest shorter than its header", object_name=where)
        magic, version, flags, length, crc = _HEAD.unpack_from(data, 0)
        if magic != MAGIC:
            raise CorruptionError("bad manifest magic", object_name=where)
        if version != FORMAT_VERSION:
            raise CorruptionError(f"unsupported manifest version {version}", object_name=where)
        body = data[_HEAD.size :]
        if flags != 0:
            raise CorruptionError(f"unknown manifest flags {flags:#x}", object_name=where)
        if len(body) != length:
            raise CorruptionError("manifest length mismatch", object_name=where)
        if crc32c(data[:16] + body) != crc:
            raise CorruptionError("manifest checksum mismatch", object_name=where)
        try:
            d = json.loads(body)
            m = cls(
                id=int(d["id"]),
                writer_epoch=int(d["writer_epoch"]),
                last_flushed_seq=int(d["last_flushed_seq"]),
                wal_replay_from=int(d["wal_replay_from"]),
                l0=tuple(SstMeta.from_json(s) for s in d["l0"]),
                runs=tuple(tuple(SstMeta.from_json(s) for s in run) for run in d["runs"]),
                retention_seq=None if d.get("retention_seq") is None else int(d["retention_seq"]),
                seq_times=tuple((int(a), int(b)) for a, b in d.get("seq_times", [])),
                checkpoints=dict(d.get("checkpoints", {})),
                created_ms=int(d.get("created_ms", 0)),
                writer_nonce=str(d.get("writer_nonce", "")),
                claims=tuple(int(i) for i in d.get("claims", ())),
                wal_dir=None if d.get("wal_dir") is None else str(d["wal_dir"]),
                wal_id=None if d.get("wal_id") is None else str(d["wal_id"]),
                wal_clean=bool(d.get("wal_clean", False)),
                store_id=str(d.get("store_id", "")),
                wal_journal=bool(d.get("wal_journal", False)),
                wal_swept=int(d.get("wal_swept", 0)),
                obsolete=tuple((str(a), int(b)) for a, b in d.get("obsolete", ())),
            )
        except (
            ValueError,
            KeyError,
            TypeError,
            OverflowError,
            RecursionError,
            AttributeError,
        ) as exc:
            raise CorruptionError(f"malformed manifest body: {exc}", object_name=where) from None
        try:
            m.check()
        except (AssertionError, ValueError, TypeError, OverflowError, AttributeError) as exc:
            raise CorruptionError(
                f"manifest breaks an invariant: {exc}", object_name=where
            ) from None
        return m
