"""One Iceberg snapshot's objects, computed from the previous snapshot's state.

Given the previous snapshot's :class:`~lakehouse.iceberg.state.SnapshotState`
and what version ``u`` changed in the table (:class:`Change`: files added,
files removed, deletion vectors changed), :func:`build` writes, in this order:

1. materialised data files (inlined batches; files whose column names the name
   mapping gives to a newer column) and positional delete files;
2. manifests: one new data manifest per partition spec for the added files
   (ADDED), every previous manifest that holds a removed file rewritten (its
   other entries EXISTING with their snapshot ids and sequence numbers, the
   removed ones DELETED); delete manifests likewise; every other manifest of
   the previous snapshot is reused as it is; past :data:`MAX_MANIFESTS`, the
   smallest ones are merged;
3. the manifest list, then the sidecar (:mod:`lakehouse.iceberg.state`),

and returns the new state. Object names come from :mod:`lakehouse.iceberg.paths`;
contents are deterministic, so a concurrent writer of the same snapshot writes
the same bytes and ``put_if_absent`` losing the race is fine.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable, Mapping
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
from lakehouse.data import inline, partitioning
from lakehouse.data.scan import fetch
from lakehouse.data.table import FileState
from lakehouse.iceberg import avro, files, paths, types
from lakehouse.iceberg.state import FileRef, SnapshotState, encode
from lakehouse.model import DataFile, TableDef

log = logging.getLogger("lakehouse.iceberg")

#: a snapshot with more manifests than this merges its smallest ones
MAX_MANIFESTS = 100

_TOTALS = (
    "total-records",
    "total-data-files",
    "total-delete-files",
    "total-position-deletes",
    "total-files-size",
)


@dataclass
class Change:
    """What a version did to a table's files, relative to the previous snapshot."""

    #: files that are new in the snapshot, with their deletion vectors
    added: dict[str, FileState] = field(default_factory=dict)
    #: ids of files of the previous snapshot that are gone
    removed: set[str] = field(default_factory=set)
    #: files of the previous snapshot (still live) whose deletion vector may differ
    dvs: dict[str, FileState] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.added or self.removed or self.dvs)


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


def put(store: ObjectStore, name: str, data: bytes) -> None:
    """Write an immutable object once (an existing one has the same bytes)."""
    try:
        store.put_if_absent(name, data)
    except FileExistsError:
        pass
    except NotImplementedError:  # a store without atomic create
        store.put(name, data)


def diff(prev: SnapshotState | None, states: Iterable[FileState]) -> Change:
    """The change from ``prev`` to a table whose files are ``states`` (a full read)."""
    from lakehouse.data.table import file_key_id

    have = {} if prev is None else prev.files
    ch = Change()
    cur: set[str] = set()
    for f, dv in states:
        fid = file_key_id(f)
        cur.add(fid)
        ref = have.get(fid)
        if ref is None:
            ch.added[fid] = (f, dv)
        elif fingerprint(dv) != ref.dv:
            ch.dvs[fid] = (f, dv)
    ch.removed = {fid for fid in have if fid not in cur}
    return ch


@dataclass
class _Ctx:
    t: Target
    u: int
    d: TableDef
    schema: dict[str, Any]
    #: the generation of a remapped snapshot's manifests ("": the snapshot's own)
    gen: str = ""
    k: int = 0
    #: partition values of the files touched (changed-partition-count)
    partitions: set[tuple[int, str]] = field(default_factory=set)

    def next_manifest(self) -> str:
        name = paths.manifest(self.t.table_id, self.u, self.k, self.gen)
        self.k += 1
        return name

    def partition_fields(self, spec_id: int) -> list[dict[str, Any]]:
        return types.partition_type(self.d.spec_by_id(spec_id), self.d.columns, self.d.schema)

    def spec_json(self, spec_id: int) -> dict[str, Any]:
        return types.partition_spec_json(self.d.spec_by_id(spec_id), self.d.columns, self.d.schema)

    def partition(self, f: DataFile) -> dict[str, Any]:
        values = partitioning.partition_dict(self.d, f)
        rec = types.partition_record(
            self.d.spec_by_id(f.spec_id), f, self.d.columns, self.d.schema, values
        )
        self.partitions.add((f.spec_id, repr(sorted(rec.items()))))
        return rec

    def write_manifest(
        self, entries: list[dict[str, Any]], content: str, spec_id: int
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
    if t.store.exists(name):
        return paths.location(t.root, name), t.store.size(name)
    ids = {n: cid for cid, n in f.columns}
    rows = _rows_of(t, f)
    rows = rows.select([n for n in rows.column_names if n in ids])
    data = files.materialised_bytes(rows, ids)
    put(t.store, name, data)
    log.debug("materialised data file %s of table %s as %s", f.path, t.table_id, name)
    return paths.location(t.root, name), len(data)


def _uses_lost(f: DataFile, lost: Mapping[int, Iterable[str]]) -> bool:
    return any(n in lost.get(cid, ()) for cid, n in f.columns)


def _read_entries(t: Target, name: str, fields: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


def _rewrite(
    c: _Ctx, name: str, row: Mapping[str, Any], gone: set[str], content: str
) -> tuple[str | None, dict[str, Any] | None, list[dict[str, Any]]]:
    """Manifest ``name`` without the files at locations ``gone`` (DELETED entries);
    returns the new manifest's name and row (None: nothing live was left) and the
    entries it marked deleted."""
    spec_id = int(row["partition_spec_id"])
    entries = []
    deleted = []
    live = 0
    for e in _read_entries(c.t, name, c.partition_fields(spec_id)):
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


def _data_entry(c: _Ctx, path: str, size: int, f: DataFile) -> dict[str, Any]:
    metrics = types.file_metrics(f, c.d.columns, c.d.schema)
    df = avro.data_file(
        file_path=path,
        record_count=f.record_count,
        file_size_in_bytes=size,
        partition=c.partition(f),
        **metrics,
    )
    return avro.entry(
        df, status=avro.ADDED, snapshot_id=c.u, sequence_number=c.u, file_sequence_number=c.u
    )


def _delete_entry(c: _Ctx, ref: FileRef, f: DataFile, dv: BitMap, fid: str) -> dict[str, Any]:
    name = paths.deletes(c.t.table_id, c.u, fid)
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
        value_counts={files.FILE_PATH_ID: len(dv), files.POS_ID: len(dv)},
        null_value_counts={files.FILE_PATH_ID: 0, files.POS_ID: 0},
        lower_bounds={files.FILE_PATH_ID: bound},
        upper_bounds={files.FILE_PATH_ID: bound},
    )
    ref.delete, ref.delete_seq, ref.delete_rows, ref.delete_size = loc, c.u, len(dv), len(data)
    ref.dv = fingerprint(dv)
    return avro.entry(
        df, status=avro.ADDED, snapshot_id=c.u, sequence_number=c.u, file_sequence_number=c.u
    )


class NeedFullState(Exception):
    """:func:`build` found that live files of the previous snapshot may need
    materialising (a name moved to a newer column): call it again with ``full``."""


def _moved(ref: FileRef, attr: str, manifest: str) -> FileRef:
    """A copy of ``ref`` whose data (``attr`` "manifest") or delete manifest
    ("delete_manifest") is ``manifest``."""
    out = replace(ref)
    setattr(out, attr, manifest)
    return out


def _reverse(files_: Mapping[str, FileRef], attr: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for fid, ref in files_.items():
        name = getattr(ref, attr)
        if name:
            out.setdefault(name, []).append(fid)
    return out


def _manifest_name(t: Target, row: Mapping[str, Any]) -> str:
    name = paths.relative(t.root, str(row["manifest_path"]))
    assert name is not None
    return name


def build(
    t: Target,
    prev: SnapshotState | None,
    u: int,
    d: TableDef,
    change: Change,
    *,
    schema: dict[str, Any],
    parent: int | None,
    timestamp_ms: int,
    labels: Mapping[str, str],
    full: Mapping[str, FileState] | None = None,
) -> SnapshotState:
    """Write snapshot ``u`` (see the module docstring) and return its state.

    ``schema``: ``d``'s Iceberg schema with its id; ``labels``: extra summary
    entries (``lakehouse.version``, ``lakehouse.operation``); ``full``: the table's
    files at ``u`` by id when the caller read them all (else :class:`NeedFullState`
    may be raised)."""
    c = _Ctx(t, u, d, schema)
    files_: dict[str, FileRef] = dict(prev.files) if prev else {}
    names: dict[int, set[str]] = {k: set(v) for k, v in prev.names.items()} if prev else {}
    lost_prev = {k: set(v) for k, v in prev.lost.items()} if prev else {}
    for f, _ in change.added.values():
        if not f.is_inline:
            for cid, n in f.columns:
                names.setdefault(cid, set()).add(n)
    _, lost = types.name_mapping(d.columns, d.schema, names)
    fresh = {cid: ns - lost_prev.get(cid, set()) for cid, ns in lost.items()}
    fresh = {cid: ns for cid, ns in fresh.items() if ns}
    remat: dict[str, FileState] = {}
    if fresh and prev is not None and prev.files:
        if full is None:
            raise NeedFullState(u)
        for fid, (f, dv) in full.items():
            ref = files_.get(fid)
            if ref is None or fid in change.removed or fid in change.added:
                continue
            if not ref.path.startswith(t.root) and _uses_lost(f, fresh):
                remat[fid] = (f, dv)

    # -- files gone -------------------------------------------------------------------
    gone_data: dict[str, set[str]] = {}
    gone_del: dict[str, set[str]] = {}
    removed_rows = removed_dels = removed_del_rows = removed_size = 0
    gone_refs = [files_.pop(fid) for fid in sorted(change.removed | set(remat)) if fid in files_]
    for ref in gone_refs:
        gone_data.setdefault(ref.manifest, set()).add(ref.path)
        removed_rows += ref.rows
        removed_size += ref.size
        if ref.delete:
            gone_del.setdefault(ref.delete_manifest, set()).add(ref.delete)
            removed_dels += 1
            removed_del_rows += ref.delete_rows
            removed_size += ref.delete_size

    # -- files added --------------------------------------------------------------------
    added = {**change.added, **remat}
    data_entries: dict[int, list[tuple[str, dict[str, Any]]]] = {}
    dv_work: dict[str, FileState] = {}
    added_rows = added_size = 0
    for fid in sorted(added):
        f, dv = added[fid]
        if f.is_inline or fid in remat or _uses_lost(f, lost):
            path, size = materialise(t, fid, f)
        else:
            path = f.path if f.is_external else f"{t.data_base}/{f.path}"
            size = f.size
        files_[fid] = FileRef(path, "", u, f.record_count, size, f.spec_id)
        data_entries.setdefault(f.spec_id, []).append((fid, _data_entry(c, path, size, f)))
        added_rows += f.record_count
        added_size += size
        if dv:
            dv_work[fid] = (f, dv)
    for fid, fs in change.dvs.items():
        if fid in files_ and fid not in added:
            dv_work[fid] = fs

    # -- deletion vectors -----------------------------------------------------------------
    del_entries: dict[int, list[tuple[str, dict[str, Any]]]] = {}
    added_dels = added_del_rows = 0
    for fid in sorted(dv_work):
        f, dv = dv_work[fid]
        ref = files_[fid]
        if fid not in added and fingerprint(dv) == ref.dv:
            continue
        ref = files_[fid] = replace(ref)
        if ref.delete:
            gone_del.setdefault(ref.delete_manifest, set()).add(ref.delete)
            removed_dels += 1
            removed_del_rows += ref.delete_rows
            removed_size += ref.delete_size
            ref.delete, ref.delete_manifest, ref.dv = "", "", ""
            ref.delete_seq = ref.delete_rows = ref.delete_size = 0
            c.partition(f)
        if dv:
            e = _delete_entry(c, ref, f, dv, fid)
            del_entries.setdefault(f.spec_id, []).append((fid, e))
            added_dels += 1
            added_del_rows += len(dv)
            added_size += ref.delete_size

    # -- manifests ---------------------------------------------------------------------------
    new_rows: list[dict[str, Any]] = []
    for content, by_spec, attr in (
        ("data", data_entries, "manifest"),
        ("deletes", del_entries, "delete_manifest"),
    ):
        for spec_id in sorted(by_spec):
            pairs = by_spec[spec_id]
            name, row = c.write_manifest([e for _, e in pairs], content, spec_id)
            for fid, _ in pairs:
                setattr(files_[fid], attr, name)
            new_rows.append(row)
    replaced: dict[str, dict[str, Any] | None] = {}
    for content, gone, attr in (
        ("data", gone_data, "manifest"),
        ("deletes", gone_del, "delete_manifest"),
    ):
        if not gone:
            continue
        holders = _reverse(files_, attr)
        old_rows = {_manifest_name(t, r): r for r in (prev.manifests if prev else [])}
        for name in sorted(gone):
            new_name, new_row, deleted = _rewrite(c, name, old_rows[name], gone[name], content)
            for e in deleted:
                c.partitions.add(
                    (
                        int(old_rows[name]["partition_spec_id"]),
                        repr(sorted(e["data_file"]["partition"].items())),
                    )
                )
            replaced[name] = new_row
            for fid in holders.get(name, ()):
                files_[fid] = _moved(files_[fid], attr, new_name or "")
    rows = list(new_rows)
    for r in prev.manifests if prev else []:
        name = _manifest_name(t, r)
        if name in replaced:
            if (again := replaced[name]) is not None:
                rows.append(again)
        else:
            rows.append(r)
    if len(rows) > MAX_MANIFESTS:
        rows = _merge(c, rows, files_, protect={_manifest_name(t, r) for r in new_rows})

    # -- manifest list, summary, sidecar --------------------------------------------------------
    mlist = paths.manifest_list(t.table_id, u)
    put(
        t.store,
        mlist,
        avro.manifest_list_bytes(rows, snapshot_id=u, parent_id=parent, sequence_number=u),
    )
    totals = dict(prev.totals) if prev else dict.fromkeys(_TOTALS, 0)
    totals["total-records"] += added_rows - removed_rows
    totals["total-data-files"] += len(added) - len(gone_refs)
    totals["total-delete-files"] += added_dels - removed_dels
    totals["total-position-deletes"] += added_del_rows - removed_del_rows
    totals["total-files-size"] += added_size - removed_size
    if not (added or gone_refs or added_dels or removed_dels):
        operation = "append"  # a definition change: no file changed
    elif added and not (gone_refs or added_dels or removed_dels):
        operation = "append"
    elif not added:
        operation = "delete"
    else:
        operation = "overwrite"
    summary = {
        "operation": operation,
        "added-data-files": str(len(added)),
        "deleted-data-files": str(len(gone_refs)),
        "added-records": str(added_rows),
        "deleted-records": str(removed_rows),
        "added-delete-files": str(added_dels),
        "removed-delete-files": str(removed_dels),
        "added-position-deletes": str(added_del_rows),
        "removed-position-deletes": str(removed_del_rows),
        "changed-partition-count": str(len(c.partitions)),
        **{k: str(v) for k, v in totals.items()},
        **labels,
    }
    entry: dict[str, Any] = {"snapshot-id": u}
    if parent is not None:
        entry["parent-snapshot-id"] = parent
    entry |= {
        "sequence-number": u,
        "timestamp-ms": timestamp_ms,
        "manifest-list": paths.location(t.root, mlist),
        "summary": summary,
        "schema-id": int(schema["schema-id"]),
    }
    state = SnapshotState(
        snapshot=entry,
        schema=schema,
        names={k: sorted(v) for k, v in names.items()},
        manifests=rows,
        files=files_,
        totals=totals,
        lost={k: sorted(v) for k, v in lost.items()},
    )
    put(t.store, paths.state(t.table_id, u), encode(state))
    return state


def _merge(
    c: _Ctx, rows: list[dict[str, Any]], files_: dict[str, FileRef], protect: set[str]
) -> list[dict[str, Any]]:
    """``rows`` with the smallest manifests of each kind and spec merged into one,
    until at most half of :data:`MAX_MANIFESTS` are left (deterministic: by live
    entries, then name); this snapshot's new manifests stay as they are."""

    def live(r: Mapping[str, Any]) -> int:
        return int(r["added_files_count"]) + int(r["existing_files_count"])

    groups: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for r in rows:
        if _manifest_name(c.t, r) not in protect:
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
            for e in _read_entries(c.t, _manifest_name(c.t, r), c.partition_fields(spec_id)):
                if e["status"] != avro.DELETED:
                    entries.append({**e, "status": avro.EXISTING})
        name, row = c.write_manifest(entries, kind, spec_id)
        names = {_manifest_name(c.t, r) for r in take}
        attr = "manifest" if kind == "data" else "delete_manifest"
        for fid, ref in list(files_.items()):
            if getattr(ref, attr) in names:
                files_[fid] = _moved(ref, attr, name)
        first = _manifest_name(c.t, take[0])
        merged[first] = row
        dropped |= names - {first}
        excess -= len(take) - 1
    out = []
    for r in rows:
        name = _manifest_name(c.t, r)
        if name in merged:
            out.append(merged[name])
        elif name not in dropped:
            out.append(r)
    return out
