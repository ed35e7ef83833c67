"""``write_metadata``: the Iceberg metadata of a lakehouse table at a version.

One Iceberg snapshot per lakehouse version that changed the table (its rows or
its definition; a rollback or export only when the table differs from the
previous snapshot), from the oldest retained version (or the table's creation)
up to the requested version::

    records oldest..v ──► snapshot versions (TableChange / ObjectChange / rollback)
        chain b = the first listed snapshot (max(oldest, the table's creation))
        for each snapshot u, oldest first:
            sidecar (u, b) in storage? ── yes ──► its state (written before, by anyone)
                                          └ no ──► state of the previous snapshot + u's
                                                   change (point reads), or a full read
                                                   ──► snapshots.build: files, manifests,
                                                       manifest list, sidecar
        ──► metadata JSON <v>-<o>.metadata.json (v: effective version, o: oldest)

Every object is immutable and named by what it holds, so a metadata JSON that
exists is returned without reading anything else. Snapshot objects are named by
their chain too (:mod:`lakehouse.iceberg.paths`): after an expiry moves the
oldest version past the chain's first snapshot, the retained snapshots are
computed again in the new chain (a full read at the new oldest, then each
version's change), never from the old chain's sidecars. That costs one pass
over the retained versions per expiry, and buys: a crash leftover (objects of
a snapshot whose sidecar was never written) of an old chain is not in the new
chain's way, a writer that read the oldest before an expiry only writes and
reads objects of its own (now garbage) chain, and the metadata JSON
``<v>-<o>`` has one content whoever writes it. A process that wrote version
``v`` keeps the table's latest state in memory (:data:`_CACHE`, bounded)
to write ``v + 1`` from it alone.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from kvstore.objstore import ObjectStore
from lakehouse import keys
from lakehouse.context import Context
from lakehouse.data.table import FileState, file_key_id
from lakehouse.errors import VersionExpired
from lakehouse.iceberg import history, metadata, objects, paths, remap, snapshots
from lakehouse.iceberg.history import CHANGE, DDL, FIRST, FULL, TableCache, classify, label
from lakehouse.iceberg.state import Light, SnapshotState, decode, load
from lakehouse.model import TableChange, TableDef, VersionInfo
from lakehouse.view import LakehouseView

log = logging.getLogger("lakehouse.iceberg")

#: tables whose latest snapshot state a process keeps in memory
MAX_CACHED_TABLES = 32

#: attempts of one call when another writer's objects differ (objects.ObjectConflict)
CONFLICT_RETRIES = 5

#: attempts of one call when versions it reads expire meanwhile (each one an expiry)
EXPIRY_RETRIES = 20

_CACHE: OrderedDict[tuple[str, str], TableCache] = OrderedDict()
_LOCK = threading.Lock()


def _cached(root: str, table_id: str) -> TableCache:
    with _LOCK:
        key = (root, table_id)
        t = _CACHE.get(key)
        if t is None:
            t = _CACHE[key] = TableCache()
            while len(_CACHE) > MAX_CACHED_TABLES:
                _CACHE.popitem(last=False)
        _CACHE.move_to_end(key)
        return t


def _store(root: str, storage_options: dict[str, Any]) -> ObjectStore:
    return paths.store(root, storage_options)


def _forget(root: str, table_id: str) -> None:
    with _LOCK:
        _CACHE.pop((root, table_id), None)


def clear_cache() -> None:
    """Forget what this process knows (tests use it to act as a fresh process)."""
    with _LOCK:
        _CACHE.clear()


def context_of(lh: Any) -> Context:
    ctx = getattr(lh, "_ctx", None)
    if not isinstance(ctx, Context):
        raise TypeError(
            f"write_metadata needs a Lakehouse or LakehouseReader, not {type(lh).__name__}"
        )
    return ctx


def write_metadata(lh: Any, table: str, *, version: int | None = None) -> str:
    """See :func:`lakehouse.iceberg.write_metadata`."""
    return write_metadata_bytes(lh, table, version=version)[0]


def write_metadata_bytes(
    lh: Any, table: str, *, version: int | None = None
) -> tuple[str, bytes | None]:
    """:func:`write_metadata`, and the bytes it wrote (None: it found the document
    written already); the catalog keeps them rather than reading them back."""
    ctx = context_of(lh)
    ctx.check_open()
    root = ctx.layout.iceberg_url
    if root is None or ctx.layout.data_url is None:
        raise ValueError(
            "this lakehouse was opened on a store instance: Iceberg metadata needs a URL "
            "(its data files must be named by location); open it by URL"
        )
    if version is None:
        version = ctx.head()
    with ctx.at_version(version) as view:  # NotFound past the head, VersionExpired
        d = view.describe_table(table)
    target = objects.Target(
        d.table_id,
        _store(root, dict(ctx.options.storage_options)),
        root,
        ctx.data,
        ctx.layout.data_url.removeprefix("file://"),
    )
    conflicts = expiries = 0
    while True:
        # the oldest retained version and the records from one snapshot: an expiry
        # (or a reader's refresh) between the two reads cannot leave a gap
        with ctx.db.snapshot() as snap:
            oldest = _oldest(ctx, snap)
            if version < oldest:
                raise VersionExpired(
                    f"version {version} has expired; the oldest retained version is {oldest}"
                )
            cache = _cached(root, d.table_id)
            if cache.created is not None and cache.created > version:
                # re-created later (a rollback brought it back): what the cache knows
                # starts after the version asked for, so this call starts afresh
                cache = TableCache()
            with cache.lock:
                # a call that read the store before an expiry the cache has caught up
                # over: the cache lacks its candidates below that expiry's oldest
                mine = cache if oldest >= cache.floor else TableCache()
                try:
                    run = _Run(ctx, target, mine, d, version, oldest, snap.get)
                    return run.write(), run.written
                except objects.ObjectConflict as exc:
                    conflicts += 1
                    if conflicts == CONFLICT_RETRIES:
                        raise
                    log.warning(
                        "Iceberg object %s of table %s was written differently by another "
                        "writer; starting again from storage",
                        exc,
                        d.qualified_name,
                    )
                    _forget(root, d.table_id)
                except VersionExpired:
                    # a version this call reads (a view of a listed snapshot) expired
                    # meanwhile: again from the new oldest, unless the version asked
                    # for is the one that expired
                    now = ctx.oldest_now()
                    if version < now:
                        raise VersionExpired(
                            f"version {version} has expired; the oldest retained version is {now}"
                        ) from None
                    expiries += 1
                    if now == oldest or expiries == EXPIRY_RETRIES:
                        raise
                    log.info(
                        "versions of table %s expired while writing its Iceberg metadata "
                        "at version %d; starting again from version %d",
                        d.qualified_name,
                        version,
                        now,
                    )
                    continue
        ctx.sleep(ctx.backoff(conflicts))


def _oldest(ctx: Context, snap: Any) -> int:
    """The oldest retained version as ``snap`` shows it (tests replace this to act as
    a writer that read the store before an expiry)."""
    return ctx.u64(snap, keys.OLDEST, 0)


class _Run:
    """One ``write_metadata`` call (under the table's cache lock)."""

    def __init__(
        self,
        ctx: Context,
        t: objects.Target,
        cache: TableCache,
        d: TableDef,
        v: int,
        oldest: int,
        get: Callable[[bytes], bytes | None],
    ) -> None:
        self.ctx, self.t, self.cache, self.d, self.v, self.oldest = ctx, t, cache, d, v, oldest
        #: reads the records through the snapshot ``oldest`` was read from (all of
        #: ``oldest``..head are in it, whatever expires meanwhile)
        self.get = get
        #: the first listed snapshot: the chain this call's objects are of (set by write)
        self.chain = oldest
        #: the metadata JSON bytes write stored (None: it found one)
        self.written: bytes | None = None

    def record(self, u: int) -> VersionInfo:
        return self.ctx.record(u, self.get)

    def _found(self, eff: int) -> str | None:
        name = paths.metadata_json(self.t.table_id, eff, self.oldest)
        if name in self.cache.found or self.t.store.exists(name):
            self.cache.found.add(name)
            return paths.location(self.t.root, name)
        return None

    # -- the call ----------------------------------------------------------------------------
    def write(self) -> str:
        found = history.scan(self.cache, self.d, self.v, self.oldest, self.record, self._found)
        if found is not None:
            return found
        listed = history.listed(self.cache, self.v, self.oldest)
        self.chain = listed[0][0]
        self.cache.use_chain(self.chain)
        last, kind = listed[-1]
        checked = None
        if kind != FULL or last in self.cache.lights:
            if (found := self._found(last)) is not None:
                return found
            checked = last
        lights = self._snapshots(listed)
        eff = int(lights[-1].snapshot["snapshot-id"])
        if eff != checked and (found := self._found(eff)) is not None:
            return found
        mapping, lost = metadata.name_mapping(self.d, lights)  # remapping keeps it
        if any(lost.values()):
            gen = remap.generation(lost)
            lights = [self._remapped(light, lost, gen) for light in lights]
        doc = metadata.build(
            self.d,
            location=paths.table_location(self.t.root, self.t.table_id),
            snapshots=lights,
            current=eff,
            mapping=mapping,
        )
        name = paths.metadata_json(self.t.table_id, eff, self.oldest)
        data = metadata.encode(doc)
        objects.put(self.t.store, name, data)
        self.written = data
        self.cache.found.add(name)
        log.info(
            "wrote Iceberg metadata of table %s at version %d (%d snapshots): %s",
            self.d.qualified_name,
            eff,
            len(lights),
            name,
        )
        return paths.location(self.t.root, name)

    def _remapped(self, light: Light, lost: dict[int, set[str]], gen: str) -> Light:
        """``light`` with its remapped manifest list when files of it use names the
        mapping gives to newer columns (see :mod:`lakehouse.iceberg.remap`)."""
        fresh = remap.affected(light.names, light.lost, lost)
        if not fresh:
            return light
        u = int(light.snapshot["snapshot-id"])
        key = (u, gen)
        if key not in self.cache.remapped:
            with self.ctx.at_version(u) as view:
                self.cache.remapped[key] = remap.remapped_list(
                    self.t, view, self.d.qualified_name, self._state(u), fresh, gen
                )
        loc = self.cache.remapped[key]
        if loc is None:
            return light
        return replace(light, snapshot={**light.snapshot, "manifest-list": loc})

    def _prefetch(self, versions: list[int]) -> dict[int, bytes | None]:
        def get(u: int) -> bytes | None:
            try:
                data: bytes = self.t.store.get(paths.state(self.t.table_id, u, self.chain))
            except FileNotFoundError:
                return None
            return data

        if len(versions) <= 1:
            return {u: get(u) for u in versions}
        with ThreadPoolExecutor(max_workers=min(16, len(versions))) as pool:
            return dict(zip(versions, pool.map(get, versions), strict=True))

    def _state(self, u: int) -> SnapshotState:
        """Snapshot ``u``'s whole state (in memory, or its sidecars)."""
        c = self.cache
        if c.state is not None and c.state.version == u:
            return c.state

        def get(w: int) -> SnapshotState:
            name = paths.state(self.t.table_id, w, self.chain)
            return decode(self.t.store.get(name), name)

        return load(get, u)

    def _snapshots(self, listed: list[tuple[int, str]]) -> list[Light]:
        c = self.cache
        missing = [u for u, _ in listed if u not in c.lights]
        if c.state is not None and all(u > c.state.version for u in missing):
            # warm: the newer snapshots follow from the state in memory (another
            # process writing the same ones writes the same bytes)
            stored: dict[int, bytes | None] = {}
        else:
            stored = self._prefetch(missing)
        out: list[Light] = []
        prev: SnapshotState | None = None
        prev_u: int | None = None
        for u, kind in listed:
            light = c.lights.get(u)
            if light is None:
                raw = stored.get(u)
                if raw is not None:
                    name = paths.state(self.t.table_id, u, self.chain)
                    st: SnapshotState | None = decode(raw, name)
                else:
                    if prev is None and prev_u is not None:
                        prev = self._state(prev_u)
                    st = self._compute(u, kind, prev, prev_u)
                    if st is None:
                        c.skipped.add(u)
                        continue
                assert st is not None
                light = c.lights[u] = st.light()
                prev = None if st.partial else st
                if prev is not None:
                    c.state = prev
            else:
                prev = c.state if c.state is not None and c.state.version == u else None
            out.append(light)
            prev_u = u
        return out

    def _compute(
        self, u: int, kind: str, prev: SnapshotState | None, prev_u: int | None
    ) -> SnapshotState | None:
        """Snapshot ``u`` computed and written (None: a rollback or export that left
        the table as ``prev``)."""
        rec = self.record(u)
        _, _, tc = classify(rec, self.d)
        q = self.d.qualified_name
        if kind == FIRST:
            prev, prev_u = None, None
        with self.ctx.at_version(u) as view:
            du = view.describe_table(q)
            schema, _, _ = metadata.schema_json(du)
            full: dict[str, FileState] | None = None
            change = None
            if kind == CHANGE and prev is not None and tc is not None:
                change = self._change(view, du, tc, prev)
            elif kind == DDL and prev is not None:
                change = snapshots.Change()
            if change is None:
                full = self._full(view, q)
                change = snapshots.diff(prev, full.values())
                if kind == FULL and prev is not None and change.is_empty() and not self._ddl(rec):
                    return None
            args: dict[str, Any] = {
                "schema": schema,
                "parent": prev_u,
                "timestamp_ms": rec.created_ms,
                "labels": {
                    "lakehouse.version": str(u),
                    "lakehouse.operation": label(rec, du, tc),
                },
            }
            try:
                return snapshots.build(self.t, prev, u, du, change, full=full, **args)
            except snapshots.NeedFullState:
                full = self._full(view, q)
                return snapshots.build(self.t, prev, u, du, change, full=full, **args)

    def _ddl(self, rec: VersionInfo) -> bool:
        """Whether ``rec`` changed the table's definition."""
        q = self.d.qualified_name
        return any(c.kind == "table" and c.name == q and c.old_id != c.new_id for c in rec.changes)

    @staticmethod
    def _full(view: LakehouseView, q: str) -> dict[str, FileState]:
        return {file_key_id(f): (f, dv) for f, dv in view.file_states(q)}

    @staticmethod
    def _change(
        view: LakehouseView, d: TableDef, tc: TableChange, prev: SnapshotState
    ) -> snapshots.Change | None:
        """Version ``u``'s change from its record and point reads (None: the record
        and the state disagree; the caller reads the whole state instead)."""
        files = view.files_by_id(d.qualified_name)
        ch = snapshots.Change()
        for fid in tc.added:
            fs = files.get(fid)  # one lookup: its record and vector, decoded once
            if fs is None:
                return None
            if fid in prev.files:
                ch.removed.add(fid)
            ch.added[fid] = fs
        for fid in tc.removed:
            if fid in prev.files:
                ch.removed.add(fid)
        for fid in tc.deleted:
            if fid in ch.added or fid in ch.removed:
                continue
            fs = files.get(fid) if fid in prev.files else None
            if fs is None:
                return None
            ch.dvs[fid] = fs
        return ch
