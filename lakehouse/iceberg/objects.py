"""The objects one Iceberg snapshot writes, and how it writes them.

:class:`Target` says where (the iceberg root's store and location, the data
directory's); :class:`ManifestWriter` writes the manifests of one snapshot
(``<u>-b<b>-m<k>.avro``, or ``<u>-b<b>-g<g>-m<k>.avro`` for a remapped one,
``b`` the snapshot's chain, see :mod:`lakehouse.iceberg.paths`) with the
snapshot's schema and partition specs; :func:`materialise` writes a data file
again as Parquet with field ids (once); :func:`rewrite` and :func:`merge` turn
manifests of the previous snapshot into this one's. Every object is immutable
and its bytes deterministic, so :func:`put` losing a race is fine.
"""

from __future__ import annotations

import io
import logging
import os
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from crc32c import crc32c
from pyroaring import BitMap

from kvstore.objstore import ObjectStore
from lakehouse.data import files as datafiles
from lakehouse.data import inline
from lakehouse.data.scan import fetch
from lakehouse.iceberg import avro, files, paths, types
from lakehouse.iceberg.state import FileRef
from lakehouse.model import FIELD_ID_KEY, DataFile, TableDef

log = logging.getLogger("lakehouse.iceberg")

#: a snapshot with more manifests than this merges its smallest ones
MAX_MANIFESTS = 100

#: writes manifests while the snapshot goes on (each put is a durable write: its
#: fsyncs overlap the manifest list's); per process (a forked child has none of
#: its parent's threads)
_PUTS: dict[int, ThreadPoolExecutor] = {}
_PUTS_LOCK = threading.Lock()


def _puts() -> ThreadPoolExecutor:
    pid = os.getpid()
    pool = _PUTS.get(pid)
    if pool is None:
        with _PUTS_LOCK:
            pool = _PUTS.get(pid)
            if pool is None:
                _PUTS.clear()
                pool = _PUTS[pid] = ThreadPoolExecutor(4, thread_name_prefix="iceberg-put")
    return pool


@dataclass(frozen=True)
class Target:
    """Where the objects go and where the lakehouse's data files are."""

    table_id: str
    #: the iceberg root: its store and location
    store: ObjectStore
    root: str
    #: the data directory: its store, and its location as manifests name files by
    data: ObjectStore
    data_base: str


def fingerprint(dv: BitMap) -> str:
    """A deletion vector's identity: its cardinality and the CRC-32C of its positions."""
    if not dv:
        return ""
    arr = np.asarray(dv.to_array(), dtype=np.uint32)
    return f"{len(dv)}:{crc32c(arr.tobytes()):08x}"


class ObjectConflict(Exception):
    """An object of this name exists with other bytes: another process wrote the
    same snapshot from another base (see :func:`put`)."""


def put(store: ObjectStore, name: str, data: bytes) -> None:
    """Write an immutable object once. One that exists already is fine when it has
    the same bytes (a concurrent writer of the same snapshot); with other bytes,
    another writer computed that snapshot from another base (a new oldest version
    met an older chain of sidecars): :class:`ObjectConflict`, and the caller starts
    again from what is stored."""
    try:
        store.put_if_absent(name, data)
    except FileExistsError:
        if store.get(name) != data:
            raise ObjectConflict(name) from None
    except NotImplementedError:  # a store without atomic create
        store.put(name, data)


@dataclass
class ManifestWriter:
    t: Target
    u: int
    d: TableDef
    schema: dict[str, Any]
    #: the generation of a remapped snapshot's manifests ("": the snapshot's own)
    gen: str = ""
    k: int = 0
    #: partition values of the files touched (changed-partition-count)
    partitions: set[tuple[int, str]] = field(default_factory=set)
    #: per partition spec id: its partition type and entry encoder
    #: write manifests in the background (:meth:`wait` before anything names them)
    defer: bool = False
    #: the snapshot's chain (None: ``u``, a first snapshot)
    chain: int | None = None
    _pending: list[Future[None]] = field(default_factory=list, init=False)
    _fields: dict[int, list[dict[str, Any]]] = field(default_factory=dict, init=False)
    _encoders: dict[int, avro.EntryEncoder] = field(default_factory=dict, init=False)

    def wait(self) -> None:
        """Until every manifest written so far is stored (its error, if one failed)."""
        pending, self._pending = self._pending, []
        for fut in pending:
            fut.result()

    def next_manifest(self) -> str:
        chain = self.u if self.chain is None else self.chain
        name = paths.manifest(self.t.table_id, self.u, chain, self.k, self.gen)
        self.k += 1
        return name

    def partition_fields(self, spec_id: int) -> list[dict[str, Any]]:
        fields = self._fields.get(spec_id)
        if fields is None:
            spec = self.d.spec_by_id(spec_id)
            fields = self._fields[spec_id] = types.partition_type(
                spec, self.d.columns, self.d.schema
            )
        return fields

    def encoded(self, spec_id: int, e: dict[str, Any]) -> avro.Encoded:
        """Entry ``e`` of a manifest of spec ``spec_id`` in Avro binary (the dicts
        are dropped at once: a snapshot of many new files keeps bytes only)."""
        enc = self._encoders.get(spec_id)
        if enc is None:
            enc = self._encoders[spec_id] = avro.EntryEncoder(self.partition_fields(spec_id))
        return enc(e)

    def spec_json(self, spec_id: int) -> dict[str, Any]:
        return types.partition_spec_json(self.d.spec_by_id(spec_id), self.d.columns, self.d.schema)

    def partition(self, f: DataFile) -> dict[str, Any]:
        rec = types.file_partition(self.d, f)
        self.partitions.add((f.spec_id, repr(sorted(rec.items()))))
        return rec

    def write_manifest(
        self, entries: Sequence[dict[str, Any] | avro.Encoded], content: str, spec_id: int
    ) -> tuple[str, dict[str, Any]]:
        name = self.next_manifest()
        fields = self.partition_fields(spec_id)
        data = avro.manifest_bytes(
            entries=entries,
            content=content,
            partition_fields=fields,
            schema_json=self.schema,
            spec_json=self.spec_json(spec_id),
        )
        if self.defer:
            self._pending.append(_puts().submit(put, self.t.store, name, data))
        else:
            put(self.t.store, name, data)
        row = avro.manifest_file_for(
            entries,
            manifest_path=paths.location(self.t.root, name),
            manifest_length=len(data),
            partition_spec_id=spec_id,
            content=content,
            sequence_number=self.u,
            added_snapshot_id=self.u,
            partition_fields=fields,
        )
        return name, row


def _rows_of(t: Target, f: DataFile) -> pa.Table:
    if f.inline is not None:
        return inline.decode(f.inline, f.path)
    data = fetch(t.data, f.path)
    datafiles.check_bytes(data, f)  # damage is never materialised as sound
    return pq.read_table(pa.BufferReader(data))


def materialise(t: Target, fid: str, f: DataFile) -> tuple[str, int]:
    """The location and size of ``f`` rewritten as Parquet with field ids (once)."""
    name = paths.materialised(t.table_id, fid)
    try:  # one request when it exists
        return paths.location(t.root, name), t.store.size(name)
    except FileNotFoundError:
        pass
    ids = {n: cid for cid, n in f.columns}
    rows = _rows_of(t, f)
    rows = types.readable_rows(rows.select([n for n in rows.column_names if n in ids]))
    data = files.materialised_bytes(rows, ids)
    put(t.store, name, data)
    log.debug("materialised data file %s of table %s as %s", f.path, t.table_id, name)
    return paths.location(t.root, name), len(data)


def uses_lost(f: DataFile, lost: Mapping[int, Iterable[str]]) -> bool:
    """Whether ``f`` names a column by a name the name mapping gives another id."""
    return any(n in lost.get(cid, ()) for cid, n in f.columns)


def unreadable_ids(d: TableDef) -> set[int]:
    """Ids of ``d``'s columns whose Arrow type Iceberg readers refuse in a data file
    (a type the Iceberg schema leaves out, time32, a zone other than UTC, ...: see
    :func:`lakehouse.iceberg.types.readable_type`)."""
    out = set()
    for c in d.columns:
        t = d.schema.field(c.name).type
        if types.readable_type(t) != t:
            out.add(c.id)
    return out


#: has_field_ids by schema object (pa.Schema equality ignores field metadata, so
#: the key is the object itself, checked through a weak reference)
_FIELD_IDS: dict[int, tuple[weakref.ref[pa.Schema], bool]] = {}
_FIELD_IDS_MAX = 1024


def has_field_ids(d: TableDef) -> bool:
    """Whether ``d``'s schema has ``PARQUET:field_id`` metadata on any field, nested
    ones too. A table defined so before the lakehouse dropped them
    (:func:`lakehouse.model.without_field_ids`) had them written into its data
    files, and Iceberg readers prefer a file's field ids to the name mapping: such
    files are materialised with ours."""
    s = d.schema
    hit = _FIELD_IDS.get(id(s))
    if hit is not None and hit[0]() is s:
        return hit[1]
    out = any(_field_has_id(f) for f in s)
    if len(_FIELD_IDS) >= _FIELD_IDS_MAX:
        _FIELD_IDS.clear()
    _FIELD_IDS[id(s)] = (weakref.ref(s), out)
    return out


def _field_has_id(f: pa.Field) -> bool:
    if f.metadata and FIELD_ID_KEY in f.metadata:
        return True
    t = f.type
    if pa.types.is_dictionary(t):
        t = t.value_type
    return any(_field_has_id(t.field(i)) for i in range(t.num_fields))


def read_entries(t: Target, name: str, fields: list[dict[str, Any]]) -> list[dict[str, Any]]:
    raw = t.store.get(name)
    out = []
    back = {avro.avro_name(f["name"]): f["name"] for f in fields}
    wanted = [f["name"] for f in fields]
    for e in fastavro.reader(io.BytesIO(raw)):
        assert isinstance(e, dict)
        df = dict(e["data_file"])
        part = {back.get(k, k): v for k, v in (df.get("partition") or {}).items()}
        df["partition"] = {n: part.get(n) for n in wanted}
        out.append({**e, "data_file": df})
    return out


def rewrite(
    c: ManifestWriter, name: str, row: Mapping[str, Any], gone: set[str], content: str
) -> tuple[str | None, dict[str, Any] | None, list[dict[str, Any]]]:
    """Manifest ``name`` without the files at locations ``gone`` (DELETED entries);
    returns the new manifest's name and row (None: nothing live was left) and the
    entries it marked deleted."""
    spec_id = int(row["partition_spec_id"])
    entries = []
    deleted = []
    live = 0
    for e in read_entries(c.t, name, c.partition_fields(spec_id)):
        if e["status"] == avro.DELETED:
            continue
        if e["data_file"]["file_path"] in gone:
            e = {**e, "status": avro.DELETED, "snapshot_id": c.u}
            deleted.append(e)
        else:
            e = {**e, "status": avro.EXISTING}
            live += 1
        entries.append(e)
    if not live:
        return None, None, deleted
    new, new_row = c.write_manifest(entries, content, spec_id)
    return new, new_row, deleted


def data_entry(c: ManifestWriter, path: str, size: int, f: DataFile) -> avro.Encoded:
    """The ADDED manifest entry of data file ``f`` at ``path`` (``size`` bytes)."""
    # column sizes are not recorded: an empty map, not null (pyiceberg's
    # inspect.entries() reads the map without a null check)
    # (the avro.data_file / avro.entry dicts, spelt out: this runs once per new file)
    df = {
        "content": avro.DATA,
        "file_path": path,
        "file_format": "PARQUET",
        "partition": c.partition(f),
        "record_count": f.record_count,
        "file_size_in_bytes": size,
        "column_sizes": [],
        **types.file_metrics(f, c.d.columns, c.d.schema),
    }
    e = {
        "status": avro.ADDED,
        "snapshot_id": c.u,
        "sequence_number": c.u,
        "file_sequence_number": c.u,
        "data_file": df,
    }
    return c.encoded(f.spec_id, e)


def delete_entry(
    c: ManifestWriter, ref: FileRef, f: DataFile, dv: BitMap, fid: str
) -> avro.Encoded:
    # the file's location is in the bytes: one of a materialised copy is named apart
    name = paths.deletes(c.t.table_id, c.u, fid, copy=ref.path.startswith(c.t.root))
    data = files.position_deletes_bytes(ref.path, dv)
    put(c.t.store, name, data)
    loc = paths.location(c.t.root, name)
    bound = ref.path.encode()
    df = avro.data_file(
        content=avro.POSITION_DELETES,
        file_path=loc,
        record_count=len(dv),
        file_size_in_bytes=len(data),
        partition=c.partition(f),
        column_sizes={},
        value_counts={files.FILE_PATH_ID: len(dv), files.POS_ID: len(dv)},
        null_value_counts={files.FILE_PATH_ID: 0, files.POS_ID: 0},
        lower_bounds={files.FILE_PATH_ID: bound},
        upper_bounds={files.FILE_PATH_ID: bound},
    )
    ref.delete, ref.delete_seq, ref.delete_rows, ref.delete_size = loc, c.u, len(dv), len(data)
    ref.dv = fingerprint(dv)
    e = avro.entry(
        df, status=avro.ADDED, snapshot_id=c.u, sequence_number=c.u, file_sequence_number=c.u
    )
    return c.encoded(f.spec_id, e)


def moved(ref: FileRef, attr: str, manifest: str) -> FileRef:
    """A copy of ``ref`` whose data (``attr`` "manifest") or delete manifest
    ("delete_manifest") is ``manifest``."""
    out = replace(ref)
    setattr(out, attr, manifest)
    return out


def holders(files_: Mapping[str, FileRef], attr: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for fid, ref in files_.items():
        name = getattr(ref, attr)
        if name:
            out.setdefault(name, []).append(fid)
    return out


def manifest_name(t: Target, row: Mapping[str, Any]) -> str:
    name = paths.relative(t.root, str(row["manifest_path"]))
    assert name is not None
    return name


def merge(
    c: ManifestWriter, rows: list[dict[str, Any]], files_: dict[str, FileRef], protect: set[str]
) -> list[dict[str, Any]]:
    """``rows`` with the smallest manifests of each kind and spec merged into one,
    until at most half of :data:`MAX_MANIFESTS` are left (deterministic: by live
    entries, then name); this snapshot's new manifests stay as they are."""

    def live(r: Mapping[str, Any]) -> int:
        return int(r["added_files_count"]) + int(r["existing_files_count"])

    groups: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for r in rows:
        if manifest_name(c.t, r) not in protect:
            groups.setdefault((int(r["content"]), int(r["partition_spec_id"])), []).append(r)
    excess = len(rows) - MAX_MANIFESTS // 2
    merged: dict[str, dict[str, Any]] = {}
    dropped: set[str] = set()
    for key in sorted(groups, key=lambda k: (-len(groups[k]), k)):
        if excess <= 0:
            break
        g = sorted(groups[key], key=lambda r: (live(r), str(r["manifest_path"])))
        take = g[: excess + 1]
        if len(take) < 2:
            continue
        content, spec_id = key
        kind = "data" if content == avro.MANIFEST_DATA else "deletes"
        entries: list[dict[str, Any]] = []
        for r in take:
            for e in read_entries(c.t, manifest_name(c.t, r), c.partition_fields(spec_id)):
                if e["status"] != avro.DELETED:
                    entries.append({**e, "status": avro.EXISTING})
        name, row = c.write_manifest(entries, kind, spec_id)
        names = {manifest_name(c.t, r) for r in take}
        attr = "manifest" if kind == "data" else "delete_manifest"
        for fid, ref in list(files_.items()):
            if getattr(ref, attr) in names:
                files_[fid] = moved(ref, attr, name)
        first = manifest_name(c.t, take[0])
        merged[first] = row
        dropped |= names - {first}
        excess -= len(take) - 1
    out = []
    for r in rows:
        name = manifest_name(c.t, r)
        if name in merged:
            out.append(merged[name])
        elif name not in dropped:
            out.append(r)
    return out
