"""A table's files at one version, and what a transaction changes in them.

The state of a table's rows is two kinds of kvstore keys under its state
prefix: ``F/<file id>`` (the file's record) and ``D/<file id>`` (its
deletion vector, absent when no row of the file is deleted). :func:`load`
turns a prefix scan into ``{file id: (DataFile, deleted positions)}``.

A transaction does not write those keys as it goes: it buffers, per table,
a :class:`TableWrite` holding the *intent* (files added and removed,
positions newly deleted, compaction rewrites, the predicates and keys its
conflicts depend on). Reads inside the transaction overlay it on the state
at its begin version (:meth:`TableWrite.overlay`); the commit turns it into
keys against the state at the head, which is where deletion vectors of
concurrent commits are merged (see :mod:`lakehouse.data.rebase`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import pyarrow as pa
from pyroaring import BitMap, FrozenBitMap

from lakehouse import keys
from lakehouse.data import dv as dvfmt
from lakehouse.data import record
from lakehouse.data.predicate import Predicate
from lakehouse.model import DataFile, DataOp, Rewrite, TableChange

FileState = tuple[DataFile, BitMap]


def load(items: Iterable[tuple[bytes, bytes]], prefix: bytes) -> dict[str, FileState]:
    """Files and deletion vectors from the state keys of one table, by file id."""
    recs: dict[str, DataFile] = {}
    dvs: dict[str, BitMap] = {}
    for k, v in items:
        kind = keys.state_file_id(prefix, k)
        if kind is None:
            continue
        if kind[0] == "F":
            recs[kind[1]] = record.decode_file(v)
        else:
            dvs[kind[1]] = dvfmt.decode(v)
    return {fid: (f, dvs.get(fid, BitMap())) for fid, f in recs.items()}


class LazyFiles(Mapping[str, FileState]):
    """A table's files looked up one by one (two point reads each), for commits
    that touch a few files of a table with many: no O(files) scan per commit."""

    def __init__(self, get: Callable[[bytes], bytes | None], ns: str, table: str) -> None:
        self._get = get
        # keys.data_file_key / dv_key with the table's prefix built once
        self._file_prefix = keys.data_file_key(ns, table, "")
        self._dv_prefix = keys.dv_key(ns, table, "")
        self._cache: dict[str, FileState | None] = {}

    def _lookup(self, fid: str) -> FileState | None:
        if fid not in self._cache:
            b = keys.name_bytes(fid)
            raw = self._get(self._file_prefix + b)
            if raw is None:
                self._cache[fid] = None
            else:
                dv = self._get(self._dv_prefix + b)
                bm = BitMap() if dv is None else dvfmt.decode(dv)
                self._cache[fid] = (record.decode_file(raw), bm)
        return self._cache[fid]

    def __getitem__(self, fid: str) -> FileState:
        hit = self._lookup(fid)
        if hit is None:
            raise KeyError(fid)
        return hit

    def __contains__(self, fid: object) -> bool:
        return isinstance(fid, str) and self._lookup(fid) is not None

    def __iter__(self) -> Iterator[str]:
        raise TypeError("LazyFiles cannot be listed; scan the table state instead")

    def __len__(self) -> int:
        raise TypeError("LazyFiles cannot be counted; scan the table state instead")


def file_key_id(f: DataFile) -> str:
    """The id a file is keyed by in table state (records written before ids: the path)."""
    return f.file_id or f.path.replace("/", "_")


#: per row: the base state's file (an int32 code, see ``TableWrite.file_code``) and
#: position (int64)
Origins = tuple[np.ndarray, np.ndarray]


def no_origins() -> Origins:
    return np.empty(0, dtype=np.int32), np.empty(0, dtype=np.int64)


def concat_origins(parts: list[Origins]) -> Origins:
    if not parts:
        return no_origins()
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


@dataclass
class TableWrite:
    """One table's buffered data changes in a transaction."""

    ns: str
    name: str
    ops: list[DataOp] = field(default_factory=list)
    added: dict[str, DataFile] = field(default_factory=dict)
    #: initial deletion vectors of added files that are not new (restore, clone)
    added_dvs: dict[str, BitMap] = field(default_factory=dict)
    removed: dict[str, DataFile] = field(default_factory=dict)
    deletes: dict[str, BitMap] = field(default_factory=dict)
    rewrites: list[Rewrite] = field(default_factory=list)
    #: concurrent inserts of rows matching these conflict (overwrite)
    guards: list[Predicate] = field(default_factory=list)
    #: merge key columns and the keys this transaction inserted by them
    keys: tuple[str, ...] = ()
    inserted: list[pa.Table] = field(default_factory=list)
    #: paths of files this transaction wrote (deleted if it does not commit)
    owned: list[str] = field(default_factory=list)
    #: of ``deletes``, positions an update or merge replaced (the change feed's
    #: pre-images), and the added files holding their new versions (post-images)
    updated: dict[str, BitMap] = field(default_factory=dict)
    post: set[str] = field(default_factory=set)
    #: per post-image file, per row, the row of a file of the base state it
    #: replaces (so a later delete in the same transaction makes that a delete)
    origin: dict[str, Origins] = field(default_factory=dict)
    #: the file ids ``origin`` codes stand for
    origin_files: list[str] = field(default_factory=list)
    #: owned files a later operation of the same transaction dropped again
    #: (deleted once it commits: no version references them)
    superseded: list[str] = field(default_factory=list)
    #: primary-key index entries of the rows added (:mod:`lakehouse.data.keyindex`),
    #: entries compaction moves (key -> (old value, new value)), and whether the
    #: index was rebuilt whole (then a concurrent change of the table conflicts)
    index: dict[bytes, bytes] = field(default_factory=dict)
    index_moves: dict[bytes, tuple[bytes, bytes]] = field(default_factory=dict)
    rebuilt: bool = False
    #: per index prefix, the largest key ``index`` holds under it
    index_high: dict[bytes, bytes] = field(default_factory=dict)

    @property
    def qualified(self) -> str:
        return f"{self.ns}.{self.name}"

    def note(self, op: DataOp) -> None:
        if op not in self.ops:
            self.ops.append(op)

    def overlay(self, base: dict[str, FileState]) -> list[FileState]:
        """The table's files as this transaction sees them, in file-id order."""
        out: dict[str, FileState] = {}
        for fid, (f, dv) in base.items():
            if fid in self.removed:
                continue
            extra = self.deletes.get(fid)
            out[fid] = (f, dv | extra if extra else dv)
        for fid, f in self.added.items():
            dv = self.added_dvs.get(fid, BitMap())
            extra = self.deletes.get(fid)
            out[fid] = (f, dv | extra if extra else dv)
        return [out[k] for k in sorted(out)]

    def add(self, f: DataFile, *, owned: bool, dv: BitMap | None = None) -> None:
        fid = file_key_id(f)
        self.added[fid] = f
        if dv:
            self.added_dvs[fid] = dv
        if owned:
            self.owned.append(f.path)

    def remove(self, fid: str, f: DataFile) -> None:
        """Drop a whole file: one this transaction added, or one of the base state."""
        if fid in self.added:
            gone = self.added.pop(fid)
            self.added_dvs.pop(fid, None)
            if gone.path in self.owned:
                self.superseded.append(gone.path)
        else:
            self.removed[fid] = f
        gone_rows = self.deletes.pop(fid, None) or BitMap()
        self.updated.pop(fid, None)
        self.post.discard(fid)
        # its live post-image rows are deleted now (those deleted before were handled)
        if fid in self.origin:
            live = BitMap(range(len(self.origin[fid][1]))) - gone_rows
            self._unreplace(fid, live)
            self.origin.pop(fid, None)

    def delete(self, fid: str, positions: BitMap, *, updated: bool = False) -> None:
        """Mark ``positions`` of file ``fid`` deleted; ``updated``: an update or merge
        replaced them (new versions of the rows are added by the same operation)."""
        if positions:
            cur = self.deletes.get(fid)
            self.deletes[fid] = positions if cur is None else cur | positions
            if updated and fid not in self.added:  # rows of its own files never existed
                old = self.updated.get(fid)
                self.updated[fid] = BitMap(positions) if old is None else old | positions
            if not updated:  # new versions deleted again: their old rows are deleted
                self._unreplace(fid, positions)

    def origins_of(self, fid: str, positions: np.ndarray) -> Origins:
        """The rows of the base state that rows ``positions`` of file ``fid`` stand for."""
        pos = np.asarray(positions, dtype=np.int64)
        rows = self.origin.get(fid)
        if rows is None:
            if fid not in self.origin_files:
                self.origin_files.append(fid)
            return np.full(len(pos), self.origin_files.index(fid), dtype=np.int32), pos
        return rows[0][pos], rows[1][pos]

    def _unreplace(self, fid: str, positions: BitMap) -> None:
        rows = self.origin.get(fid)
        if rows is None or not positions:
            return
        idx = np.frombuffer(positions.to_array(), dtype=np.uint32).astype(np.int64)
        codes, pos = rows[0][idx], rows[1][idx]
        for code in np.unique(codes).tolist():
            base = self.origin_files[code]
            upd = self.updated.get(base)
            if upd is not None:
                upd.difference_update(BitMap(pos[codes == code]))
                if not upd:
                    del self.updated[base]

    def is_empty(self) -> bool:
        """Nothing to commit: no file added or removed, no row deleted (a delete
        that matched nothing writes no version)."""
        return not (self.added or self.removed or self.deletes or self.rewrites or self.index)

    def copy(self) -> TableWrite:
        """A copy whose containers and bitmaps are its own (see ``TableData.atomic``)."""
        return TableWrite(
            self.ns,
            self.name,
            list(self.ops),
            dict(self.added),
            {k: BitMap(v) for k, v in self.added_dvs.items()},
            dict(self.removed),
            {k: BitMap(v) for k, v in self.deletes.items()},
            list(self.rewrites),
            list(self.guards),
            self.keys,
            list(self.inserted),
            list(self.owned),
            {k: BitMap(v) for k, v in self.updated.items()},
            set(self.post),
            dict(self.origin),
            list(self.origin_files),
            list(self.superseded),
            dict(self.index),
            dict(self.index_moves),
            self.rebuilt,
            dict(self.index_high),
        )

    def freeze(self) -> TableIntent:
        """This write as the immutable value a commit works from (see :class:`TableIntent`)."""
        return TableIntent(
            ns=self.ns,
            name=self.name,
            ops=tuple(self.ops),
            added=MappingProxyType(dict(self.added)),
            added_dvs=_frozen_maps(self.added_dvs),
            removed=MappingProxyType(dict(self.removed)),
            deletes=_frozen_maps(self.deletes),
            rewrites=tuple(self.rewrites),
            guards=tuple(self.guards),
            keys=self.keys,
            inserted=tuple(self.inserted),
            updated=_frozen_maps(self.updated),
            post=frozenset(self.post),
            index=MappingProxyType(dict(self.index)),
            index_moves=MappingProxyType(dict(self.index_moves)),
            rebuilt=self.rebuilt,
            index_high=MappingProxyType(dict(self.index_high)),
        )


def _frozen_maps(m: Mapping[str, BitMap]) -> Mapping[str, FrozenBitMap]:
    return MappingProxyType({k: FrozenBitMap(v) for k, v in m.items()})


@dataclass(frozen=True)
class TableIntent:
    """One table's data changes as a commit sees them: what :class:`TableWrite`
    buffered, frozen when the transaction commits (no mapping or bitmap of it can
    change afterwards). The rebase planner (:mod:`lakehouse.data.rebase_plan`) turns
    it into a plan at the head, :mod:`lakehouse.data.rebase` into kvstore writes and
    a :class:`~lakehouse.model.TableChange`."""

    ns: str
    name: str
    ops: tuple[DataOp, ...]
    #: files added, by file id (new, adopted, or re-added by restore / clone)
    added: Mapping[str, DataFile]
    #: initial deletion vectors of added files that are not new (restore, clone)
    added_dvs: Mapping[str, FrozenBitMap]
    #: files removed whole, by file id
    removed: Mapping[str, DataFile]
    #: positions newly deleted, by file id
    deletes: Mapping[str, FrozenBitMap]
    rewrites: tuple[Rewrite, ...]
    #: concurrent inserts of rows matching these conflict (overwrite)
    guards: tuple[Predicate, ...]
    #: merge key columns and the keys this transaction inserted by them
    keys: tuple[str, ...]
    inserted: tuple[pa.Table, ...]
    #: of ``deletes``, the positions an update or merge replaced (pre-images)
    updated: Mapping[str, FrozenBitMap]
    #: added files holding new versions of replaced rows (post-images)
    post: frozenset[str]
    #: primary-key index entries to put, entries to move (compaction: put only
    #: where the head still holds the old value) and whether it was rebuilt whole
    index: Mapping[bytes, bytes] = field(default_factory=dict)
    index_moves: Mapping[bytes, tuple[bytes, bytes]] = field(default_factory=dict)
    rebuilt: bool = False
    index_high: Mapping[bytes, bytes] = field(default_factory=dict)

    @property
    def qualified(self) -> str:
        return f"{self.ns}.{self.name}"

    def is_empty(self) -> bool:
        """Nothing to commit (see :meth:`TableWrite.is_empty`)."""
        return not (self.added or self.removed or self.deletes or self.rewrites or self.index)

    def change(
        self,
        deleted_base: Mapping[str, BitMap],
        removed: Iterable[str],
        updated_base: Mapping[str, BitMap] | None = None,
    ) -> TableChange:
        """The record of this write, as rebased at the head: ``deleted_base`` holds the
        positions newly deleted in files that existed before, ``removed`` the files
        removed whole, ``updated_base`` which of those deletions were updates."""
        upd = updated_base or {}
        return TableChange(
            table=self.qualified,
            ops=self.ops,
            added=tuple(sorted(self.added)),
            removed=tuple(sorted(removed)),
            deleted={fid: dvfmt.encode(bm) for fid, bm in sorted(deleted_base.items()) if bm},
            rewrites=self.rewrites,
            keys=self.keys,
            updated={fid: dvfmt.encode(bm) for fid, bm in sorted(upd.items()) if bm},
            post=tuple(sorted(fid for fid in self.post if fid in self.added)),
        )
