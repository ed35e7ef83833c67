"""One Iceberg snapshot's objects, computed from the previous snapshot's state.

Given the previous snapshot's :class:`~lakehouse.iceberg.state.SnapshotState`
and what version ``u`` changed in the table (:class:`Change`: files added,
files removed, deletion vectors changed), :func:`build` writes, in this order:

1. materialised data files (inlined batches; files whose column names the name
   mapping gives to a newer column; files with columns of a type readers refuse;
   files added while the table's schema had Parquet field ids, which the files
   then carry) and positional delete files;
2. manifests: one new data manifest per partition spec for the added files
   (ADDED), every previous manifest that holds a removed file rewritten (its
   other entries EXISTING with their snapshot ids and sequence numbers, the
   removed ones DELETED); delete manifests likewise; every other manifest of
   the previous snapshot is reused as it is; past :data:`MAX_MANIFESTS`, the
   smallest ones are merged;
3. the manifest list, then the sidecar (:mod:`lakehouse.iceberg.state`),

and returns the new state. Object names come from :mod:`lakehouse.iceberg.paths`:
the manifests, manifest list and sidecar carry the chain (the first snapshot of
the run: ``u`` itself when there is no previous state, else the previous
state's chain), since their bytes depend on it. Contents are deterministic for
a chain, so a concurrent writer of the same snapshot in the same chain writes
the same bytes and ``put_if_absent`` losing the race is fine; one in another
chain writes other names.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from lakehouse.data.table import FileState
from lakehouse.iceberg import avro, paths, types
from lakehouse.iceberg.objects import (
    MAX_MANIFESTS,
    ManifestWriter,
    Target,
    data_entry,
    delete_entry,
    fingerprint,
    has_field_ids,
    holders,
    manifest_name,
    materialise,
    merge,
    moved,
    put,
    rewrite,
    unreadable_ids,
    uses_lost,
)
from lakehouse.iceberg.state import FileRef, SnapshotState, Touched, delta_of, encode
from lakehouse.model import TableDef

log = logging.getLogger("lakehouse.iceberg")

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


class NeedFullState(Exception):
    """:func:`build` found that live files of the previous snapshot may need
    materialising (a name moved to a newer column): call it again with ``full``."""


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
    chain = prev.chain if prev is not None else u
    c = ManifestWriter(t, u, d, schema, defer=True, chain=chain)
    files_ = Touched(prev.files if prev else None)
    names: dict[int, set[str]] = {k: set(v) for k, v in prev.names.items()} if prev else {}
    lost_prev = {k: set(v) for k, v in prev.lost.items()} if prev else {}
    for f, _ in change.added.values():
        if not f.is_inline:
            for cid, n in f.columns:
                names.setdefault(cid, set()).add(n)
    _, lost = types.name_mapping(d.columns, d.schema, names)
    unreadable = set(prev.unreadable if prev else ()) | unreadable_ids(d)
    # files added while the definition had Parquet field ids (a table defined before
    # the lakehouse dropped them) carry them: readers would prefer them to the mapping
    field_ids = has_field_ids(d)
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
            if not ref.path.startswith(t.root) and uses_lost(f, fresh):
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
    data_entries: dict[int, list[tuple[str, avro.Encoded]]] = {}
    dv_work: dict[str, FileState] = {}
    added_rows = added_size = 0
    for fid in sorted(added):
        f, dv = added[fid]
        if (
            f.is_inline
            or fid in remat
            or (lost and uses_lost(f, lost))
            or (unreadable and any(cid in unreadable for cid, _ in f.columns))
            or field_ids
        ):
            path, size = materialise(t, fid, f)
        else:
            path = f.path if f.is_external else f"{t.data_base}/{f.path}"
            size = f.size
        files_[fid] = FileRef(path, "", u, f.record_count, size, f.spec_id)
        data_entries.setdefault(f.spec_id, []).append((fid, data_entry(c, path, size, f)))
        added_rows += f.record_count
        added_size += size
        if dv:
            dv_work[fid] = (f, dv)
    for fid, fs in change.dvs.items():
        if fid in files_ and fid not in added:
            dv_work[fid] = fs

    # -- deletion vectors -----------------------------------------------------------------
    del_entries: dict[int, list[tuple[str, avro.Encoded]]] = {}
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
            e = delete_entry(c, ref, f, dv, fid)
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
        held = holders(files_, attr)
        old_rows = {manifest_name(t, r): r for r in (prev.manifests if prev else [])}
        for name in sorted(gone):
            new_name, new_row, deleted = rewrite(c, name, old_rows[name], gone[name], content)
            for de in deleted:
                c.partitions.add(
                    (
                        int(old_rows[name]["partition_spec_id"]),
                        repr(sorted(de["data_file"]["partition"].items())),
                    )
                )
            replaced[name] = new_row
            for fid in held.get(name, ()):
                files_[fid] = moved(files_[fid], attr, new_name or "")
    rows = list(new_rows)
    for r in prev.manifests if prev else []:
        name = manifest_name(t, r)
        if name in replaced:
            if (again := replaced[name]) is not None:
                rows.append(again)
        else:
            rows.append(r)
    if len(rows) > MAX_MANIFESTS:
        rows = merge(c, rows, files_, protect={manifest_name(t, r) for r in new_rows})

    # -- manifest list, summary, sidecar --------------------------------------------------------
    mlist = paths.manifest_list(t.table_id, u, chain)
    try:
        put(
            t.store,
            mlist,
            avro.manifest_list_bytes(rows, snapshot_id=u, parent_id=parent, sequence_number=u),
        )
    finally:
        c.wait()  # the manifests are stored before the sidecar trusts them
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
        unreadable=sorted(unreadable),
        chain=chain,
    )
    delta_of(state, prev)
    put(t.store, paths.state(t.table_id, u, chain), encode(state))
    return state
