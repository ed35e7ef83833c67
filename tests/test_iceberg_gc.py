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
from lakehouse import codec, keys
from lakehouse.data.table import file_key_id
from lakehouse.iceberg import gc as iceberg_gc
from lakehouse.iceberg import paths, write_metadata, writer
from lakehouse.iceberg.writer import clear_cache

NO_GRACE = timedelta(0)
AB = pa.schema([("id", pa.int64()), ("a", pa.string())])
AB2 = pa.schema([("id", pa.int64()), ("a", pa.int32())])
_CHAINED = re.compile(
    r"metadata/(?:snap-)?\d{20}-b(\d{20})(?:-g[0-9a-f]{8})?(?:-m\d+)?\.(?:avro|state\.json)$"
)
_DELETES = re.compile(r"deletes/(\d{20})-")


def store(lh: Any) -> Any:
    return open_store(lh._ctx.layout.iceberg_url)


def objects(lh: Any) -> set[str]:
    return set(store(lh).list(""))


def tid(lh: Any, table: str, version: int | None = None) -> str:
    if version is None:
        return str(lh.describe_table(table).table_id)
    with lh.at_version(version) as view:
        return str(view.describe_table(table).table_id)


def chain_of(name: str) -> int | None:
    """The chain a sidecar's, manifest list's or manifest's name carries (None: not
    one of those)."""
    m = _CHAINED.search(name)
    return None if m is None else int(m.group(1))


def deletes_version(name: str) -> int | None:
    """The snapshot version a positional delete file's name carries (None: not one)."""
    m = _DELETES.search(name)
    return None if m is None else int(m.group(1))


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


def chains(lh: Any, t: str) -> set[int]:
    """The chains of the sidecars, manifest lists and manifests of table id ``t``."""
    return {b for n in objects(lh) if n.startswith(f"{t}/") if (b := chain_of(n)) is not None}


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
        for n in mine:  # no object of a chain or a snapshot older than the oldest
            b, w = chain_of(n), deletes_version(n)
            assert b is None or b >= oldest, n
            assert w is None or w >= oldest, n
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
    # s.a's snapshots from its creation on are one chain: the new oldest is past its
    # start, so none of it is retained metadata's (the writer starts a new one)
    assert chains(lh, a) == set()
    assert not [q for q in lh.pending_deletions() if q.path.startswith("iceberg:")]
    assert_no_garbage(lh, ["s.a", "s.b"], [c])
    assert_retained_read(lh, ["s.a", "s.b"])
    assert chains(lh, a) == {marks["mid"]}
    assert paths.state(a, marks["mid"], marks["mid"]) in objects(lh)

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
    write_metadata(lh, "s.a")  # the new oldest's chain
    name = paths.state(a, marks["mid"], marks["mid"])
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
    monkeypatch.setattr(iceberg_gc, "queue_unreachable", lambda ctx, grace_ms: 0)
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
    some = next(
        n for n in sorted(objects(lh)) if re.search(r"/metadata/\d{20}-b\d{20}-m0\.avro$", n)
    )
    old = chain_of(some)
    assert old is not None
    head = lh.version
    lh.append("s.a", orders([900]))  # a snapshot whose writer crashed before its sidecar
    crashed = lh.version
    lh.append("s.a", orders([901]))
    mid = marks["mid"]
    leftovers = [
        paths.manifest(a, crashed, mid, 0),  # of the chain the new oldest starts
        paths.manifest_list(a, crashed, mid),
        paths.manifest(a, crashed, old, 0),  # of the chain before the expiry
        paths.deletes(a, mid - 1, "leftover"),  # of an expired snapshot
    ]
    for name in leftovers:
        s.put(name, s.get(some))
    assert head < crashed
    lh.expire_versions(keep_last=lh.version - mid + 1, grace=NO_GRACE)
    have = objects(lh)
    # the retained chain's leftovers stay (its writer writes them again, or another
    # writer finds them); the old chain's and the expired snapshot's go
    assert leftovers[0] in have and leftovers[1] in have
    assert not set(leftovers[2:]) & have
    lh.remove_orphan_files(older_than=timedelta(0))
    assert leftovers[0] in objects(lh)
    # once that snapshot expires too, they are garbage like any other of it
    lh.expire_versions(keep_last=1, grace=NO_GRACE)
    assert not set(leftovers) & objects(lh)
    assert_retained_read(lh, ["s.a", "s.b"])


class SidecarFails:
    """A store whose writes of the sidecars of one snapshot fail (a crash after its
    manifests and manifest list, before its sidecar)."""

    def __init__(self, inner: Any, snapshot: int) -> None:
        self.inner = inner
        self.pattern = re.compile(rf"/metadata/{snapshot:020d}(?:-b\d{{20}})?\.state\.json$")
        self.failed: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _check(self, name: str) -> None:
        if self.pattern.search(name):
            self.failed.append(name)
            raise OSError(f"crash before {name}")

    def put(self, name: str, data: bytes) -> None:
        self._check(name)
        self.inner.put(name, data)

    def put_if_absent(self, name: str, data: bytes) -> None:
        self._check(name)
        self.inner.put_if_absent(name, data)


@pytest.mark.parametrize("past", ["to the snapshot", "between"])
def test_a_crash_before_the_sidecar_then_an_expiry_past_its_predecessor(
    lh: Any, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, past: str
) -> None:

    create(lh, "s.t", AB, **{"inline.max_rows": "0"})
    for i in range(3):
        lh.append("s.t", pa.table({"id": [i, i + 10], "a": ["x", "y"]}, schema=AB))
    lh.delete("s.t", "id = 10")  # a deletion vector: a positional delete file
    write_metadata(lh, "s.t")
    pred = lh.version
    if past == "between":  # a version that leaves s.t alone: the new oldest
        create(lh, "s.other", AB)
    with lh.begin() as txn:  # snapshot u: a new file, a deletion vector changed
        txn.append("s.t", pa.table({"id": [7], "a": ["z"]}, schema=AB))
        txn.delete("s.t", "id = 1 or id = 11")
    u = lh.version
    # the writer of snapshot u crashes after its manifests, before its sidecar
    real = writer._store
    failing = SidecarFails(real(lh._ctx.layout.iceberg_url, {}), u)
    monkeypatch.setattr(writer, "_store", lambda root, opts: failing)
    with pytest.raises(OSError, match="crash before"):
        write_metadata(lh, "s.t")
    monkeypatch.undo()
    assert failing.failed
    clear_cache()  # the crashed process is gone
    t = tid(lh, "s.t")
    leftovers = {n for n in objects(lh) if n.startswith(f"{t}/metadata/") and f"{u:020d}" in n}
    assert leftovers and not [n for n in leftovers if n.endswith(".state.json")]
    lh.append("s.t", pa.table({"id": [8], "a": ["w"]}, schema=AB))
    # the oldest moves past u's predecessor; the leftovers stay for the grace
    oldest = u if past == "to the snapshot" else pred + 1
    hour = timedelta(hours=1)
    lh.expire_versions(keep_last=lh.version - oldest + 1, grace=hour)
    assert lh.oldest_version == oldest > pred
    assert leftovers <= objects(lh)
    loc = write_metadata(lh, "s.t")
    doc = check(lh, "s.t", loc)
    check_sidecars(lh, "s.t", doc)
    snaps = [x["snapshot-id"] for x in doc["snapshots"]]
    assert snaps[0] == oldest and u in snaps
    clear_cache()  # a fresh process finds the same
    assert write_metadata(lh, "s.t") == loc
    assert check(lh, "s.t", write_metadata(lh, "s.t", version=u))
    # after the grace the leftovers go; what the metadata reaches stays
    clock.advance(3601)
    lh.expire_versions(keep_last=lh.version - oldest + 1, grace=hour)
    assert not leftovers & objects(lh)
    assert not [p for p in reached(loc) if p.startswith("/") and not Path(p).exists()]
    assert_no_garbage(lh, ["s.t"], [])
    assert_retained_read(lh, ["s.t"])


def test_a_stale_writer_after_an_expiry_leaves_the_new_oldests_metadata_alone(
    lh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(lh, "s.t", AB, **{"inline.max_rows": "0"})
    for i in range(4):
        lh.append("s.t", pa.table({"id": [i], "a": ["x"]}, schema=AB))
        write_metadata(lh, "s.t")  # this process keeps the state in memory
    stale = lh.oldest_version
    create(lh, "s.other", AB)  # the new oldest: no snapshot of s.t is retained
    lh.expire_versions(keep_last=1, grace=NO_GRACE)  # the old chain's objects go
    new = lh.oldest_version
    assert new > stale
    t = tid(lh, "s.t")
    assert chains(lh, t) == set()
    lh.append("s.t", pa.table({"id": [9], "a": ["y"]}, schema=AB))
    # a writer that read the oldest before the expiry: its change-only sidecar's base
    # (of its chain) is gone
    monkeypatch.setattr(writer, "_oldest", lambda ctx, snap: stale)
    gone = write_metadata(lh, "s.t")
    monkeypatch.undo()
    assert gone.endswith(f"-{stale:020d}.metadata.json")
    for fresh in (False, True):
        if fresh:
            clear_cache()
        loc = write_metadata(lh, "s.t")
        assert loc.endswith(f"-{new:020d}.metadata.json")
        doc = check(lh, "s.t", loc)
        check_sidecars(lh, "s.t", doc)
        assert not [p for p in reached(loc) if p.startswith("/") and not Path(p).exists()]
    assert min(chains(lh, t)) < new  # the stale writer's chain
    # GC takes the stale writer's objects, keeps the new chain's
    lh.remove_orphan_files(older_than=NO_GRACE)
    assert chains(lh, t) == {new}
    assert not Path(gone).exists()
    assert_no_garbage(lh, ["s.t"], [])
    assert_retained_read(lh, ["s.t"])


def test_writers_of_one_snapshot_from_two_bases_both_read_right(
    lh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from collections import OrderedDict

    from test_iceberg_metadata import normalised

    # two processes: each its own memory of the table
    memory: dict[str, OrderedDict[Any, Any]] = {"stale": OrderedDict(), "new": OrderedDict()}
    create(lh, "s.t", AB, **{"inline.max_rows": "0"})
    for i in range(4):
        lh.append("s.t", pa.table({"id": [i, i + 10], "a": ["x", "y"]}, schema=AB))
        lh.delete("s.t", f"id = {i + 10}")
    monkeypatch.setattr(writer, "_CACHE", memory["stale"])
    write_metadata(lh, "s.t")  # the stale process read the oldest before the expiry
    monkeypatch.undo()
    stale = lh.oldest_version
    lh.expire_versions(keep_last=3, grace=timedelta(hours=1))  # nothing deleted yet
    new = lh.oldest_version
    locs: dict[str, list[str]] = {"stale": [], "new": []}
    for step in range(2):  # the two writers take turns
        lh.append("s.t", pa.table({"id": [100 + step], "a": ["z"]}, schema=AB))
        lh.delete("s.t", f"id = {step}")
        for who, oldest in (("stale", stale), ("new", new)):
            monkeypatch.setattr(writer, "_CACHE", memory[who])
            monkeypatch.setattr(writer, "_oldest", lambda ctx, snap, o=oldest: o)
            locs[who].append(write_metadata(lh, "s.t"))
            monkeypatch.undo()
    assert [x.endswith(f"-{stale:020d}.metadata.json") for x in locs["stale"]] == [True] * 2
    for loc in [*locs["stale"], *locs["new"]]:
        st = static(loc)
        for snap in st.metadata.snapshots:
            if snap.snapshot_id < new:
                continue  # the stale writer's expired snapshots
            got = st.scan(snapshot_id=snap.snapshot_id).to_arrow()
            with lh.at_version(snap.snapshot_id) as view:
                want = view.read("s.t")
            assert normalised(got, want.schema) == normalised(want, want.schema)
    t = tid(lh, "s.t")
    assert len(chains(lh, t)) == 2 and min(chains(lh, t)) < new <= max(chains(lh, t))
    check_sidecars(lh, "s.t", check(lh, "s.t", locs["new"][-1]))


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


def test_retained_files_reads_again_when_an_expiry_moves_the_oldest_meanwhile(
    lh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lakehouse.errors import VersionExpired
    from lakehouse.iceberg import gc

    create(lh, "s.t", AB, **{"inline.max_rows": "0"})
    for i in range(3):
        lh.append("s.t", pa.table({"id": [i], "a": ["x"]}, schema=AB))
    want = gc.retained_files(lh._ctx)
    real = lh._ctx.at_version
    seen: list[int] = []

    def racing(version: int) -> Any:  # the first view: its version expired meanwhile
        seen.append(version)
        if len(seen) == 1:
            raise VersionExpired(f"version {version} has expired")
        return real(version)

    monkeypatch.setattr(lh._ctx, "at_version", racing)
    assert gc.retained_files(lh._ctx) == want
    assert seen[0] == seen[1] == lh.oldest_version
