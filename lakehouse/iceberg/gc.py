"""Which Iceberg objects under ``<url>/iceberg/`` are garbage (expiry, orphans).

Every object the metadata writer keeps (:mod:`lakehouse.iceberg.paths`) is
immutable and named by the snapshot (version) it belongs to, so what a retained
version's metadata can reach follows from the names and the sidecars alone,
without reading Avro. With ``o`` the oldest retained version, an object of a
table is **kept** when:

* its table (the top folder, a table id) is one a retained version has (the
  table at ``o``, or created, renamed, restored or rolled back to later);
  everything of any other table (a dropped one) is garbage;
* a metadata JSON ``<v>-<o'>``: ``o' >= o``. One written for an older oldest
  lists expired snapshots; the writer writes ``<v>-<o>`` afresh when asked;
* a sidecar, manifest list, manifest or positional delete file named by a
  snapshot ``u >= o`` (its remapped ``-g`` variants included): always, reached
  or not: a writer may be writing that snapshot now, and what a crash left of
  it is written again with the same bytes (objects are deterministic);
* any object a *needed* sidecar names: its manifest list, the manifests of its
  manifest list, and for each file it indexes (whole or as a change) the
  materialised data file, data manifest, positional delete file and delete
  manifest. Needed are the sidecars ``u >= o`` and, transitively, the bases of
  change-only ones (``state.load`` reads them back, at most
  ``state.MAX_DEPTH`` deep): so manifests and delete files that a retained
  snapshot reuses from an expired one stay, as do the expired sidecars a chain
  reads;
* a remapped delete file ``deletes/<w>-<file>-g<g>.parquet``: while the delete
  file it was remapped from (``deletes/<w>-<file>.parquet``) is kept;
* a materialised data file ``data/<file id>.parquet``: while a retained version
  has that file in the table (a later snapshot, or the first snapshot at ``o``
  written after the expiry, finds and reuses it), or a needed sidecar names it;
* anything whose name none of these patterns matches: left alone.

Everything else of a table (objects of snapshots older than ``o`` that no needed
sidecar names; metadata JSONs of an older oldest) is garbage. Positional delete
files and materialised files that manifests of a retained snapshot name only in
``DELETED`` entries go too: readers never open those files (the lakehouse's own
data files of such entries go with expiry just the same).

Garbage is not deleted here: :mod:`lakehouse.maintenance` queues it (``L/gc``,
tagged ``iceberg:``) with the grace of ``expire_versions`` or the ``older_than``
of ``remove_orphan_files``, so a reader holding a metadata JSON of an older
oldest, or a writer in another process that read the oldest before the expiry,
keeps going for that long. Object names carry versions, not times, and the
object stores expose no modification time, so an orphan's age is the time since
a pass first found it unreachable. The deletion pass computes the garbage again
and deletes only queued objects that are still garbage: an object that a
retained version's metadata can reach is never deleted, whatever the clock.

The store listing comes before the lakehouse is read, so an object a writer
wrote for a table or file created after the listing's moment is never taken for
a dropped table's. A lakehouse whose ``iceberg/`` folder does not exist pays one
check; one opened on a store instance has no Iceberg objects. This module reads
only names and sidecars (no fastavro, no pyarrow writer).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kvstore.objstore import ObjectStore, open_store
from lakehouse import codec, keys
from lakehouse.data.table import file_key_id
from lakehouse.errors import NotFound
from lakehouse.iceberg import paths
from lakehouse.iceberg.state import FileRef, SnapshotState, decode
from lakehouse.model import DataOp, TableDef

if TYPE_CHECKING:
    from lakehouse.context import Context
    from lakehouse.view import LakehouseView

log = logging.getLogger("lakehouse.iceberg")

_TABLE_ID = re.compile(r"[0-9a-f]{32}$")
_V = r"(\d{20})"
_GEN = r"(?:-g([0-9a-f]{8}))?"
_STATE = re.compile(rf"metadata/{_V}\.state\.json$")
_LIST = re.compile(rf"metadata/snap-{_V}{_GEN}\.avro$")
_MANIFEST = re.compile(rf"metadata/{_V}{_GEN}-m\d+\.avro$")
_DELETES = re.compile(rf"deletes/{_V}-(.+?){_GEN}\.parquet$")
_DATA = re.compile(r"data/(.+)\.parquet$")


def store(ctx: Context) -> ObjectStore | None:
    """The lakehouse's iceberg store, or None when it can hold nothing: opened on a
    store instance, or a local lakehouse whose ``iceberg/`` folder does not exist."""
    root = ctx.layout.iceberg_url
    if root is None:
        return None
    if "://" not in root and not os.path.isdir(root):
        return None
    return open_store(root, dict(ctx.options.storage_options))


def garbage(ctx: Context, s: ObjectStore) -> set[str]:
    """Names (under the iceberg root) of the objects no retained version can reach
    (see the module docstring)."""
    listed = s.list("")
    if not listed:
        return set()
    by_table: dict[str, list[str]] = {}
    for name in listed:
        top, sep, rest = name.partition("/")
        if sep and _TABLE_ID.match(top):
            by_table.setdefault(top, []).append(rest)
    if not by_table:
        return set()
    oldest, live = retained_files(ctx)  # read after the listing (see the docstring)
    root = ctx.layout.iceberg_url
    assert root is not None
    out: set[str] = set()
    for tid, names in sorted(by_table.items()):
        if tid not in live:
            out.update(f"{tid}/{n}" for n in names)
            continue
        try:
            dead = _table_garbage(s, root, tid, names, oldest, live[tid])
        except (OSError, ValueError) as exc:  # unreadable sidecar: keep the table's objects
            log.warning("Iceberg objects of table %s left alone: %s", tid, exc)
            continue
        out.update(f"{tid}/{n}" for n in dead)
    return out


def delete(s: ObjectStore, names: Iterable[str], still: set[str]) -> tuple[set[str], set[str]]:
    """Delete those of ``names`` that are in ``still`` (the garbage as computed now);
    returns (deleted, no longer garbage or gone). A failed delete is in neither."""
    gone: set[str] = set()
    dropped: set[str] = set()
    for name in names:
        if name not in still:
            dropped.add(name)
            continue
        try:
            s.delete(name)
            gone.add(name)
        except OSError as exc:  # stays queued for the next pass
            log.warning("could not delete Iceberg object %s: %s", name, exc)
    return gone, dropped


# -- what a retained version has ----------------------------------------------------------
def retained_files(ctx: Context) -> tuple[int, dict[str, set[str]]]:
    """The oldest retained version and, per table id any retained version has, the
    ids of every data file a retained version has in it."""
    out: dict[str, set[str]] = {}
    with ctx.db.snapshot() as snap:
        head = ctx.u64(snap, keys.HEAD)
        oldest = ctx.u64(snap, keys.OLDEST, 0)
        with ctx.at_version(oldest) as view:
            _files(view, out, None)
        for u in range(oldest + 1, head + 1):
            rec = ctx.record(u, snap.get)
            whole = rec.rollback_of is not None or rec.source is not None
            named = {
                c.name
                for c in rec.changes
                if c.kind == "table"
                and c.op != "drop"
                and (c.op != "alter" or c.old_id != c.new_id)
            }
            for tc in rec.data:
                if tc.table_id and DataOp.RESTORE not in tc.ops:
                    out.setdefault(tc.table_id, set()).update(tc.added)
                else:  # an old record (matched by name), or a restore: read the table
                    named.add(tc.table)
            if whole or named:
                with ctx.at_version(u) as view:
                    _files(view, out, None if whole else named)
    return oldest, out


def _files(view: LakehouseView, out: dict[str, set[str]], names: set[str] | None) -> None:
    """Add the tables ``names`` (None: every table) of ``view`` and their files."""
    defs: list[TableDef] = []
    if names is None:
        for _, raw in view.raw_items(keys.TABLE_PREFIX):
            d = codec.decode_def(raw)
            if isinstance(d, TableDef):
                defs.append(d)
    else:
        for q in sorted(names):
            try:
                defs.append(view.describe_table(q))
            except NotFound:
                continue
    for d in defs:
        fids = out.setdefault(d.table_id, set())
        for k, raw in view.raw_items(keys.table_state_prefix(d.namespace, d.name)):
            if keys.is_data_file_key(k):
                fids.add(file_key_id(codec.decode_data_file(raw)))


# -- one table's objects -------------------------------------------------------------------
def _table_garbage(
    s: ObjectStore, root: str, tid: str, names: list[str], oldest: int, fids: set[str]
) -> set[str]:
    """Of one table's object names (relative to its folder), the garbage."""
    sidecars = {int(m.group(1)): n for n in names if (m := _STATE.match(n))}
    reached: set[str] = set()
    seen: set[int] = set()
    todo = [u for u in sidecars if u >= oldest]
    while todo:
        u = todo.pop()
        if u in seen or u not in sidecars:
            continue
        seen.add(u)
        name = f"{tid}/{sidecars[u]}"
        st = decode(s.get(name), name)
        reached |= _named(root, tid, st)
        reached.add(sidecars[u])
        if st.base is not None:
            todo.append(st.base)
    out: set[str] = set()
    for n in names:
        if _kept(n, oldest, fids, reached):
            continue
        out.add(n)
    return out


def _kept(n: str, oldest: int, fids: set[str], reached: set[str]) -> bool:
    meta = paths.parse_metadata_json(n)
    if meta is not None and n.startswith("metadata/"):
        return meta[1] >= oldest
    if n in reached:
        return True
    for pattern in (_STATE, _LIST, _MANIFEST):
        if m := pattern.match(n):
            return int(m.group(1)) >= oldest
    if m := _DELETES.match(n):
        if int(m.group(1)) >= oldest:
            return True
        if m.group(3):  # remapped: kept with the delete file it was remapped from
            return f"deletes/{m.group(1)}-{m.group(2)}.parquet" in reached
        return False
    if m := _DATA.match(n):
        return m.group(1) in fids
    return True  # not ours to judge


def _named(root: str, tid: str, st: SnapshotState) -> set[str]:
    """What sidecar ``st`` names, relative to the table's folder."""
    out: set[str] = set()

    def add(loc: Any) -> None:
        name = _relative(root, tid, str(loc)) if loc else None
        if name is not None:
            out.add(name)

    add(st.snapshot.get("manifest-list"))
    for row in st.manifests:
        add(row.get("manifest_path"))
    refs: list[FileRef] = [*st.files.values(), *st.changed.values()]
    for r in refs:
        add(r.path)
        add(r.delete)
        for name in (r.manifest, r.delete_manifest):
            if name.startswith(f"{tid}/"):
                out.add(name[len(tid) + 1 :])
    return out


def _relative(root: str, tid: str, loc: str) -> str | None:
    """``loc`` relative to table ``tid``'s folder: under ``root``, or (a lakehouse
    moved since the sidecar was written) after the last ``/<tid>/`` in it."""
    name = paths.relative(root, loc)
    if name is None:
        i = loc.rfind(f"/{tid}/")
        name = loc[i + 1 :] if i >= 0 else None
    if name is None or not name.startswith(f"{tid}/"):
        return None
    return name[len(tid) + 1 :]
