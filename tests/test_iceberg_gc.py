"""Expiry and orphan removal of the Iceberg objects under ``<url>/iceberg/``
(:mod:`lakehouse.iceberg.gc`, hooked into :mod:`lakehouse.maintenance`).

A local lakehouse writes Iceberg metadata at many versions of three tables
(inlined rows materialised, deletion vectors, a column dropped and added again
under its name: remapped snapshots, a compaction, a dropped table), then expires
versions. The oracle for "still there" is pyiceberg: every object a retained
metadata JSON reaches (manifest lists, manifests, live data and delete files)
exists, and every listed snapshot reads as ``lh.at_version(s).read(t)``. The
oracle for "gone" is the naming contract: no metadata JSON of an older oldest,
no object of an expired snapshot that no retained sidecar (or the chain it reads
back from) names, nothing of the dropped table. Time is a FakeClock.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO
from test_iceberg_metadata import ORDERS, check, check_sidecars, orders, static

import lakehouse
from kvstore.clock import FakeClock
from kvstore.objstore import open_store
from lakehouse import codec, keys, maintenance
from lakehouse.data.table import file_key_id
from lakehouse.iceberg import paths, write_metadata
from lakehouse.iceberg.state import decode
from lakehouse.iceberg.writer import clear_cache

NO_GRACE = timedelta(0)
AB = pa.schema([("id", pa.int64()), ("a", pa.string())])
AB2 = pa.schema([("id", pa.int64()), ("a", pa.int32())])
_VERSIONED = re.compile(
    r"metadata/(?:snap-)?(\d{20})(?:-g[0-9a-f]{8})?(?:-m\d+)?\.(?:avro|state\.json)$"
    r"|deletes/(\d{20})-"
)


def store(lh: Any) -> Any:
    return open_store(lh._ctx.layout.iceberg_url)


def objects(lh: Any) -> set[str]:
    return set(store(lh).list(""))


def tid(lh: Any, table: str, version: int | None = None) -> str:
    if version is None:
        return str(lh.describe_table(table).table_id)
    with lh.at_version(version) as view:
        return str(view.describe_table(table).table_id)


def version_of(name: str) -> int | None:
    """The snapshot version an object's name carries (None: a metadata JSON, a
    materialised file, ...)."""
    m = _VERSIONED.search(name)
    if m is None:
        return None
    return int(m.group(1) or m.group(2))


def reached(location: str) -> set[str]:
    """Every object the metadata JSON at ``location`` reaches, as pyiceberg reads it:
    manifest lists, manifests, live data and delete files (absolute paths)."""
    st = static(location)
    io = PyArrowFileIO()
    out = {location}
    for s in st.metadata.snapshots:
        out.add(s.manifest_list)
        for m in s.manifests(io):
            out.add(m.manifest_path)
            for e in m.fetch_manifest_entry(io, discard_deleted=True):
                out.add(e.data_file.file_path)
    return out


def create(lh: Any, name: str, schema: pa.Schema, **props: str) -> None:
    with lh.begin() as txn:
        txn.create_table(name, schema, {"compaction.auto": "false", **props})


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def lh(tmp_path: Path, clock: FakeClock) -> Any:
    clear_cache()
    h = lakehouse.open(str(tmp_path / "lh"), clock=clock)
    with h.begin() as txn:
        txn.create_namespace("s")
    yield h
    h.close()
    clear_cache()


def build(lh: Any) -> dict[str, Any]:
    """Tables s.a (inlined rows, deletion vectors, appends as change-only sidecars,
    a compaction), s.b (a column dropped and added again under its name: remapped
    snapshots), s.c (dropped); metadata written at many versions. Returns marks."""
    create(lh, "s.a", ORDERS)  # inlined rows: materialised
    create(lh, "s.b", AB, **{"inline.max_rows": "0"})
    create(lh, "s.c", AB, **{"inline.max_rows": "0"})
    lh.append("s.b", pa.table({"id": [1, 2, 3], "a": ["x", "y", "z"]}, schema=AB))
    lh.delete("s.b", "id = 2")
    write_metadata(lh, "s.b")
    lh.append("s.c", pa.table({"id": [1], "a": ["c"]}, schema=AB))
    write_metadata(lh, "s.c")
    c = tid(lh, "s.c")
    with lh.begin() as txn:  # the name a moves to a new column
        txn.alter_table("s.b", schema=pa.schema([("id", pa.int64())]))
    with lh.begin() as txn:
        txn.alter_table("s.b", schema=AB2)
    lh.append("s.b", pa.table({"id": [4], "a": [7]}, schema=AB2))
    write_metadata(lh, "s.b")  # remapped manifest lists of the snapshots before
    for i in range(3):
        lh.append("s.a", orders(range(i * 10, i * 10 + 10)))
        write_metadata(lh, "s.a")
    with lh.begin() as txn:
        txn.drop_table("s.c")
    lh.delete("s.a", "id % 7 = 0")  # positional deletes of materialised batches
    write_metadata(lh, "s.a")
    for i in range(3, 6):  # appends: change-only sidecars
        lh.append("s.a", orders(range(i * 10, i * 10 + 10)))
        write_metadata(lh, "s.a")
    mid = lh.version  # a version that changed s.a (its sidecar is a change)
    lh.append("s.a", orders(range(60, 70)))
    lh.append("s.b", pa.table({"id": [5], "a": [8]}, schema=AB2))
    write_metadata(lh, "s.a")
    write_metadata(lh, "s.b")
    with lh.begin() as txn:
        txn.compact("s.a")
    write_metadata(lh, "s.a")
    lh.append("s.a", orders([500]))
    write_metadata(lh, "s.a")
    return {"mid": mid, "c": c}


def sidecar_chain(lh: Any, t: str, oldest: int) -> set[int]:
    """Sidecar versions of table id ``t`` that retained sidecars read back from."""
    s = store(lh)
    have = {
        int(n.rsplit("/", 1)[1][:20])
        for n in objects(lh)
        if n.startswith(f"{t}/metadata/")
        if n.endswith(".state.json")
    }
    out: set[int] = set()
    for u in sorted(x for x in have if x >= oldest):
        w: int | None = u
        while w is not None and w not in out:
            out.add(w)
            w = decode(s.get(paths.state(t, w))).base
    return out


def assert_retained_read(lh: Any, tables: list[str]) -> None:
    """Fresh metadata (as a new process writes it) at the head and at the oldest
    version reads right, and every object it reaches exists."""
    clear_cache()
    oldest = lh.oldest_version
    for t in tables:
        for version in (None, oldest):
            loc = write_metadata(lh, t, version=version)
            assert loc.endswith(f"-{oldest:020d}.metadata.json")
            doc = check(lh, t, loc)
            check_sidecars(lh, t, doc)
            assert min(s["snapshot-id"] for s in doc["snapshots"]) >= oldest
            missing = [p for p in reached(loc) if p.startswith("/") and not Path(p).exists()]
            assert not missing, missing


def assert_no_garbage(lh: Any, live_tables: list[str], dropped: list[str]) -> None:
    """Nothing only expired versions reach is left."""
    oldest = lh.oldest_version
    have = objects(lh)
    for t in dropped:
        assert not [n for n in have if n.startswith(f"{t}/")], t
    for table in live_tables:
        t = tid(lh, table)
        mine = {n[len(t) + 1 :] for n in have if n.startswith(f"{t}/")}
        for n in mine:
            meta = paths.parse_metadata_json(n)
            if meta is not None:
                assert meta[1] >= oldest, n
        chain = sidecar_chain(lh, t, oldest)
        named: set[str] = set()
        root = lh._ctx.layout.iceberg_url
        s = store(lh)
        for u in chain:
            st = decode(s.get(paths.state(t, u)))
            locs = [st.snapshot["manifest-list"], *(r["manifest_path"] for r in st.manifests)]
            for r in [*st.files.values(), *st.changed.values()]:
                locs += [r.path, r.delete]
                named |= {r.manifest[len(t) + 1 :], r.delete_manifest[len(t) + 1 :]}
            named |= {x[len(t) + 1 :] for loc in locs if (x := paths.relative(root, loc))}
        for n in mine:
            w = version_of(n)
            if w is not None and w < oldest:
                assert n in named or (n.endswith(".state.json") and w in chain), n
        live_fids: set[str] = set()
        for v in range(oldest, lh.version + 1):
            with lh.at_version(v) as view:
                if view.table_exists(table):
                    live_fids |= {file_key_id(f) for f, _ in view.file_states(table)}
        for n in mine:
            if n.startswith("data/"):
                assert n[len("data/") : -len(".parquet")] in live_fids, n


# -- expiry ----------------------------------------------------------------------------------
def test_expiry_deletes_what_only_expired_versions_reach(lh: Any) -> None:
    marks = build(lh)
    c = marks["c"]
    a, b = tid(lh, "s.a"), tid(lh, "s.b")
    before = objects(lh)
    assert {n.split("/")[0] for n in before} == {a, b, c}
    assert any("-g" in n for n in before if n.startswith(f"{b}/"))  # remapped objects
    assert any(n.startswith(f"{a}/data/") for n in before)  # materialised batches
    assert any(n.startswith(f"{a}/deletes/") for n in before)
    keep = lh.version - marks["mid"] + 1
    assert lh.expire_versions(keep_last=keep, grace=NO_GRACE) == marks["mid"]
    after = objects(lh)
    gone = before - after
    assert gone and not after - before
    assert {n for n in before if n.startswith(f"{c}/")} <= gone  # the dropped table
    assert any(paths.parse_metadata_json(n) for n in gone)
    # s.a's sidecar at the new oldest is a change: the expired ones it reads back stay
    chain = sidecar_chain(lh, a, marks["mid"])
    assert min(chain) < marks["mid"]
    assert all(paths.state(a, u) in after for u in chain)
    assert not [q for q in lh.pending_deletions() if q.path.startswith("iceberg:")]
    assert_no_garbage(lh, ["s.a", "s.b"], [c])
    assert_retained_read(lh, ["s.a", "s.b"])

    # expire to the head: the compaction's whole sidecar ends the chain, the inlined
    # batches' materialised files and their delete files go
    mat = {n for n in objects(lh) if n.startswith(f"{a}/data/")}
    lh.expire_versions(keep_last=1, grace=NO_GRACE)
    assert lh.oldest_version == lh.version
    assert_no_garbage(lh, ["s.a", "s.b"], [c])
    head = {file_key_id(f) for f, _ in lh.file_states("s.a")}
    assert {n for n in mat if n[len(a) + 6 : -8] in head} == mat & objects(lh) != mat
    assert_retained_read(lh, ["s.a", "s.b"])


def test_fresh_metadata_of_the_new_oldest_lists_no_expired_snapshot(lh: Any) -> None:
    marks = build(lh)
    old = write_metadata(lh, "s.a", version=marks["mid"])
    assert old.endswith(f"-{0:020d}.metadata.json")
    lh.expire_versions(keep_last=lh.version - marks["mid"] + 1, grace=NO_GRACE)
    assert not Path(old).exists()  # listed expired snapshots
    new = write_metadata(lh, "s.a", version=marks["mid"])
    assert new != old and new.endswith(f"-{marks['mid']:020d}.metadata.json")
    doc = check(lh, "s.a", new)
    assert [s["snapshot-id"] for s in doc["snapshots"]] == [marks["mid"]]
    assert write_metadata(lh, "s.a") != write_metadata(lh, "s.a", version=marks["mid"])


def test_grace_keeps_everything_until_it_passes(lh: Any, clock: FakeClock, tmp_path: Path) -> None:
    marks = build(lh)
    before = objects(lh)
    lh.expire_versions(keep_last=lh.version - marks["mid"] + 1, grace=timedelta(minutes=10))
    assert objects(lh) == before
    queued = {q.path for q in lh.pending_deletions() if q.path.startswith("iceberg:")}
    assert queued and {p.removeprefix("iceberg:") for p in queued} <= before
    assert {q.grace_ms for q in lh.pending_deletions()} == {600_000}
    assert_retained_read(lh, ["s.a", "s.b"])  # new objects, none of them queued
    assert queued == {q.path for q in lh.pending_deletions() if q.path.startswith("iceberg:")}
    clock.advance(9 * 60)
    lh.expire_versions(keep_last=lh.version - marks["mid"] + 1)  # nothing new; not due
    assert before <= objects(lh)
    lh.close()
    clock.advance(61)
    lh = lakehouse.open(str(tmp_path / "lh"), clock=clock)  # the pass at open
    try:
        assert not {p.removeprefix("iceberg:") for p in queued} & objects(lh)
        assert not [q for q in lh.pending_deletions() if q.path.startswith("iceberg:")]
        assert_no_garbage(lh, ["s.a", "s.b"], [])
        assert_retained_read(lh, ["s.a", "s.b"])
    finally:
        lh.close()


def test_a_queued_object_reachable_again_is_kept(lh: Any, clock: FakeClock) -> None:
    marks = build(lh)
    a = tid(lh, "s.a")
    lh.expire_versions(keep_last=lh.version - marks["mid"] + 1, grace=timedelta(minutes=1))
    queued = [q.path for q in lh.pending_deletions() if q.path.startswith("iceberg:")]
    # a stale writer's doing, or a queue of an older release: an object of the new
    # oldest's chain is queued; the deletion pass computes the garbage again
    name = paths.state(a, marks["mid"])
    q = codec.QueuedFile("iceberg:" + name, 0, 0)
    lh.kvstore.put(keys.PENDING_GC, codec.encode_gc_queue([*lh.pending_deletions(), q]))
    clock.advance(61)
    lh.expire_versions(keep_last=lh.version - marks["mid"] + 1)
    assert name in objects(lh)
    assert not [q for q in lh.pending_deletions() if q.path.startswith("iceberg:")]
    assert not {p.removeprefix("iceberg:") for p in queued} & objects(lh)
    assert_retained_read(lh, ["s.a", "s.b"])


def test_materialised_files_stay_while_a_retained_version_has_the_file(lh: Any) -> None:
    build(lh)
    a = tid(lh, "s.a")
    create(lh, "s.x", AB)  # the new oldest leaves s.a alone: no sidecar of s.a at it yet
    mat = {n for n in objects(lh) if n.startswith(f"{a}/data/")}
    lh.expire_versions(keep_last=1, grace=NO_GRACE)
    live = {file_key_id(f) for f, _ in lh.file_states("s.a")}
    kept = {n for n in mat if n[len(a) + 6 : -8] in live}
    # no sidecar of a retained snapshot names them yet; its writer will reuse them
    assert kept and kept <= objects(lh)
    assert not (mat - kept) & objects(lh)
    assert_retained_read(lh, ["s.a", "s.b"])


# -- orphans -----------------------------------------------------------------------------------
def test_remove_orphan_files_takes_a_dropped_tables_objects_and_leaves_live_ones(
    lh: Any, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    marks = build(lh)
    c = marks["c"]
    before = objects(lh)
    # a crash after expiry's commit, before its Iceberg objects were queued
    monkeypatch.setattr(maintenance, "_queue_iceberg", lambda ctx, grace_ms: 0)
    lh.expire_versions(keep_last=lh.version - marks["mid"] + 1, grace=NO_GRACE)
    monkeypatch.undo()
    assert objects(lh) == before
    live = {p for t in ("s.a", "s.b") for p in reached(write_metadata(lh, t))}
    clear_cache()
    hour = timedelta(hours=1)
    assert lh.remove_orphan_files(older_than=hour) == []  # no data file is an orphan
    assert before <= objects(lh)  # found unreachable now: queued for an hour
    clock.advance(3600)
    lh.remove_orphan_files(older_than=hour)
    left = objects(lh)
    assert not [n for n in left if n.startswith(f"{c}/")]
    assert_no_garbage(lh, ["s.a", "s.b"], [c])
    assert all(Path(p).exists() for p in live if p.startswith("/"))
    assert_retained_read(lh, ["s.a", "s.b"])
    again = objects(lh)
    lh.remove_orphan_files(older_than=timedelta(0))  # nothing more is unreachable
    assert objects(lh) == again


def test_a_crash_leftover_of_a_snapshot_without_sidecar(lh: Any) -> None:
    marks = build(lh)
    a = tid(lh, "s.a")
    s = store(lh)
    some = next(n for n in sorted(objects(lh)) if re.search(r"/metadata/\d{20}-m0\.avro$", n))
    head = lh.version
    lh.append("s.a", orders([900]))  # a snapshot whose writer crashed before its sidecar
    crashed = lh.version
    lh.append("s.a", orders([901]))
    leftovers = [
        paths.manifest(a, crashed, 0),
        paths.manifest_list(a, crashed),
        paths.deletes(a, marks["mid"] - 1, "leftover"),  # of an expired snapshot
    ]
    for name in leftovers:
        s.put(name, s.get(some))
    assert head < crashed
    lh.expire_versions(keep_last=lh.version - marks["mid"] + 1, grace=NO_GRACE)
    have = objects(lh)
    # the retained snapshot's leftovers stay (its writer writes them again, or another
    # writer finds them); the expired snapshot's go
    assert leftovers[0] in have and leftovers[1] in have
    assert leftovers[2] not in have
    lh.remove_orphan_files(older_than=timedelta(0))
    assert leftovers[0] in objects(lh)
    # once that snapshot expires too, they are garbage like any other of it
    lh.expire_versions(keep_last=1, grace=NO_GRACE)
    assert not set(leftovers) & objects(lh)
    assert_retained_read(lh, ["s.a", "s.b"])


def test_a_lakehouse_without_iceberg_metadata_pays_nothing(tmp_path: Path) -> None:
    p = tmp_path / "plain"
    with lakehouse.open(str(p)) as h:
        with h.begin() as txn:
            txn.create_namespace("s")
        create(h, "s.t", AB, **{"inline.max_rows": "0"})
        for i in range(3):
            h.append("s.t", pa.table({"id": [i], "a": ["x"]}, schema=AB))
        h.expire_versions(keep_last=1, grace=NO_GRACE)
        h.remove_orphan_files(older_than=timedelta(0))
        assert h.pending_deletions() == []
    assert not (p / "iceberg").exists()  # never created by maintenance


def test_a_store_instance_lakehouse_has_no_iceberg_store() -> None:
    from kvstore.objstore import MemoryStore

    with lakehouse.open(MemoryStore()) as h:
        with h.begin() as txn:
            txn.create_namespace("s")
            txn.create_table("s.t", AB)
        h.append("s.t", pa.table({"id": [1], "a": ["x"]}, schema=AB))
        assert h.expire_versions(keep_last=1, grace=NO_GRACE) == h.version
        assert h.remove_orphan_files(older_than=timedelta(0)) == []
