"""Time travel (at_version / at_time), rollback, export and version expiration."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from raw_state import record_raw_file

import lakehouse
from kvstore.objstore import MemoryStore
from lakehouse import DataFile

SCHEMA = pa.schema([("id", pa.int64())])
T0 = 1_700_000_000.0  # epoch seconds of the fake clock's start


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", "local"])
def url(request, tmp_path):
    if request.param == "memory":
        name = f"lh-tt-{uuid.uuid4().hex}"
        yield f"memory://{name}"
        for part in ("meta", "data"):
            MemoryStore.drop(f"{name}/{part}")
    else:
        yield str(tmp_path / "lh")


@pytest.fixture
def clock():
    return Clock()


class CommitHook:
    """The ``commit_hook`` option (a testing injection point) the ``lh`` fixture opens
    with: calls ``fn(intent, attempt)`` inside each commit attempt while it is set."""

    def __init__(self) -> None:
        self.fn = None

    def __call__(self, intent, attempt) -> None:
        if self.fn is not None:
            self.fn(intent, attempt)


@pytest.fixture
def hook():
    return CommitHook()


@pytest.fixture
def lh(url, clock, hook):
    h = lakehouse.open(
        url, clock=clock, kv_options={"fsync": False, "gc_grace_seconds": 0}, commit_hook=hook
    )
    yield h
    h.close()


def state_of(view) -> dict:
    """Everything a reader can see, as plain data."""
    out = {}
    for ns in view.list_namespaces():
        tables = {
            t: (
                dict(view.describe_table(f"{ns}.{t}").properties),
                str(view.describe_table(f"{ns}.{t}").schema),
            )
            for t in view.list_tables(ns)
        }
        views = {v: view.describe_view(f"{ns}.{v}").sql for v in view.list_views(ns)}
        out[ns] = (dict(view.describe_namespace(ns).properties), tables, views)
    return out


def random_history(lh, clock, n, seed=1):
    """Apply n random committed transactions; returns {version: state}."""
    rng = random.Random(seed)
    states = {0: {}}
    for _ in range(n):
        clock.now += rng.choice([0.0, 0.001, 0.5, 2.0])
        with lh.begin() as txn:
            nss = txn.list_namespaces()
            r = rng.random()
            if not nss or r < 0.1:
                name = f"ns{rng.randrange(6)}"
                if name not in nss:
                    txn.create_namespace(name, {"n": str(rng.randrange(100))})
                else:
                    txn.alter_namespace(name, set_properties={"n": str(rng.randrange(100))})
            else:
                ns = rng.choice(nss)
                tables = txn.list_tables(ns)
                if r < 0.35 or not tables:
                    t = f"t{rng.randrange(8)}"
                    if t not in tables and not txn.view_exists(f"{ns}.{t}"):
                        txn.create_table(f"{ns}.{t}", SCHEMA, {"v": "0"})
                elif r < 0.75:
                    txn.alter_table(
                        f"{ns}.{rng.choice(tables)}", set_properties={"v": str(rng.randrange(1000))}
                    )
                elif r < 0.85:
                    txn.drop_table(f"{ns}.{rng.choice(tables)}")
                elif r < 0.95:
                    v = f"v{rng.randrange(3)}"
                    if txn.view_exists(f"{ns}.{v}"):
                        txn.drop_view(f"{ns}.{v}")
                    else:
                        txn.create_view(f"{ns}.{v}", f"SELECT {rng.randrange(9)}")
                else:
                    txn.alter_table(
                        f"{ns}.{rng.choice(tables)}",
                        schema=SCHEMA.append(pa.field(f"c{rng.randrange(99)}", pa.string())),
                    )
        if txn.committed_version is not None:
            states[txn.committed_version] = state_of(lh.at_version(txn.committed_version))
        if rng.random() < 0.03:
            lh.kvstore.flush()  # move history into SSTs, keep going
    return states


def test_at_version_is_exact_for_every_version(lh, clock):
    states = random_history(lh, clock, 150)
    lh.kvstore.compact()  # compaction must keep every retained version exact
    for v, expected in states.items():
        with lh.at_version(v) as view:
            assert view.version == v
            assert state_of(view) == expected, f"version {v}"
    with pytest.raises(lakehouse.NotFound, match="does not exist"):
        lh.at_version(lh.version + 1)
    with pytest.raises(ValueError):
        lh.at_version(-1)
    with pytest.raises(TypeError):
        lh.at_version("3")


def test_at_version_survives_reopen(url, clock):
    opts = {"clock": clock, "kv_options": {"fsync": False}}
    with lakehouse.open(url, **opts) as lh:
        states = random_history(lh, clock, 40, seed=5)
    with lakehouse.open(url, **opts) as lh:
        for v, expected in states.items():
            assert state_of(lh.at_version(v)) == expected


def test_at_time_picks_newest_version_at_or_before(lh, clock):
    times = {0: lh.version_info(0).created_ms}
    for i in range(1, 30):
        clock.now += 1.0 if i % 5 else 0.0  # some versions share a millisecond
        with lh.begin() as txn:
            txn.create_namespace(f"n{i}")
        times[i] = lh.version_info(i).created_ms
    for v, ms in times.items():
        newest_same_ms = max(u for u, t in times.items() if t == ms)
        assert lh.at_time(ms).version == newest_same_ms
        dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
        assert lh.at_time(dt).version == newest_same_ms
        if v > 0 and times[v - 1] < ms:
            assert lh.at_time(ms - 1).version == v - 1
    assert lh.at_time(times[29] + 10**9).version == 29
    view = lh.at_time(times[7] + 500)
    assert view.list_namespaces() == sorted(f"n{i}" for i in range(1, 8))
    with pytest.raises(lakehouse.NotFound, match="did not exist"):
        lh.at_time(times[0] - 1)
    with pytest.raises(ValueError, match="naive"):
        lh.at_time(datetime(2030, 1, 1))
    with pytest.raises(TypeError):
        lh.at_time(1.5)


def test_created_at_never_goes_backwards(lh, clock):
    with lh.begin() as txn:
        txn.create_namespace("a")
    clock.now -= 3600  # the wall clock jumps back
    with lh.begin() as txn:
        txn.create_namespace("b")
    h = lh.history()
    assert h[0].created_at == h[1].created_at
    assert lh.at_time(h[0].created_at).version == 2


def test_rollback_rolls_forward(lh, clock):
    states = random_history(lh, clock, 40, seed=3)
    head = lh.version
    for target in (5, 17, head - 1, 0):
        before = lh.version
        v = lh.rollback(target)
        assert v == before + 1
        assert state_of(lh.at_version(v)) == states[target]
        info = lh.version_info(v)
        assert info.rollback_of == target and "rollback to version" in info.summary()
    # history is never rewritten: old versions are still readable
    for u in range(head + 1):
        assert state_of(lh.at_version(u)) == states[u]
    # rollback of a rollback
    v = lh.rollback(head)
    assert state_of(lh.at_version(v)) == states[head]


def test_rollback_errors_and_concurrency(lh, hook):
    with lh.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table("ns.t", SCHEMA)
    with lh.begin() as txn:
        txn.alter_table("ns.t", set_properties={"a": "1"})
    with pytest.raises(lakehouse.NotFound):
        lh.rollback(99)
    # a transaction begun before the rollback conflicts with it on the same table
    txn = lh.begin()
    txn.alter_table("ns.t", set_properties={"b": "2"})
    lh.rollback(1)
    with pytest.raises(lakehouse.RetryableConflict):
        txn.commit()
    assert lh.at_version(lh.version).describe_table("ns.t").properties == {}
    # a rollback racing a commit retries and still lands on the exact old state
    calls = {"n": 0}

    def race(intent, attempt):
        if calls["n"] == 0:  # the first commit from here on: the rollback's first attempt
            calls["n"] += 1
            with lh.begin() as other:
                other.create_namespace("sneaky")

    hook.fn = race
    v = lh.rollback(2)
    hook.fn = None
    assert calls["n"] == 1
    view = lh.at_version(v)
    assert view.list_namespaces() == ["ns"]
    assert view.describe_table("ns.t").properties == {"a": "1"}


def add_file(lh, table, path, data):
    lh.data_store.put(path, data)
    with lh.begin() as txn:
        record_raw_file(lh, txn, table, path.replace("/", "_"), DataFile(path, len(data), 1))


@pytest.mark.parametrize("kind", ["full", "minimal"])
def test_export(lh, clock, kind, tmp_path):
    states = random_history(lh, clock, 30, seed=9)
    with lh.begin() as txn:
        txn.create_namespace("files")
        txn.create_table("files.t", SCHEMA)
    add_file(lh, "files.t", "t/part-0.parquet", b"parquet bytes 0")
    add_file(lh, "files.t", "t/part-1.parquet", b"parquet bytes 1")
    src_state = state_of(lh.at_version(lh.version))
    dest = str(tmp_path / f"export-{kind}")
    summary = lh.export(dest, kind=kind)
    assert summary["source_version"] == lh.version and summary["kind"] == kind
    assert summary["files_copied"] == (2 if kind == "full" else 0)
    with lakehouse.open(dest) as ex:
        assert ex.version == 1
        assert ex.definition.id != lh.definition.id
        assert state_of(ex.at_version(1)) == src_state
        info = ex.version_info(1)
        assert info.source["version"] == lh.version and info.source["kind"] == kind
        files = ex.at_version(1).list_data_files("files.t")
        if kind == "full":
            assert sorted(f.path for f in files) == ["t/part-0.parquet", "t/part-1.parquet"]
            assert ex.data_store.get("t/part-1.parquet") == b"parquet bytes 1"
        else:
            assert all(f.is_external for f in files)
            assert not ex.data_store.list()
    # an older version exports too, and a non-empty destination is refused
    old = str(tmp_path / f"old-{kind}")
    lh.export(old, version=12, kind=kind)
    with lakehouse.open(old) as ex:
        assert state_of(ex.at_version(ex.version)) == states[12]
    with pytest.raises(lakehouse.AlreadyExists):
        lh.export(old, kind=kind)
    with pytest.raises(ValueError):
        lh.export(str(tmp_path / "x"), kind="partial")


def test_expire_keep_last(lh, clock):
    states = random_history(lh, clock, 60, seed=11)
    head = lh.version
    oldest = lh.expire_versions(keep_last=10)
    assert oldest == head - 9 == lh.oldest_version
    assert [h.version for h in lh.history()] == list(range(head, head - 10, -1))
    for v in range(head - 9, head + 1):
        assert state_of(lh.at_version(v)) == states[v]
    for v in (0, 1, head - 10):
        with pytest.raises(lakehouse.VersionExpired):
            lh.at_version(v)
        with pytest.raises(lakehouse.VersionExpired):
            lh.version_info(v)
    with pytest.raises(lakehouse.VersionExpired):
        lh.rollback(1)
    with pytest.raises(lakehouse.VersionExpired):
        lh.at_time(lh.definition.created_ms)
    # nothing to do the second time; keep_last never drops the head
    assert lh.expire_versions(keep_last=10) == oldest
    assert lh.expire_versions(keep_last=1) == head
    assert state_of(lh.at_version(head)) == states[head]
    # commits continue on top
    with lh.begin() as txn:
        txn.create_namespace("after")
    assert lh.version == head + 1 and lh.version_info(head + 1).parent == head


def test_expire_older_than_keeps_time_travel_to_the_cutoff(lh, clock):
    for i in range(10):
        clock.now += 10
        with lh.begin() as txn:
            txn.create_namespace(f"n{i}")
    cutoff = lh.version_info(4).created_ms + 5000  # between versions 4 and 5
    oldest = lh.expire_versions(older_than=cutoff)
    assert oldest == 4
    assert lh.at_time(cutoff).version == 4
    with pytest.raises(lakehouse.VersionExpired):
        lh.at_version(3)
    # timedelta: "25 s ago" (the clock says T0+100): version 7 (T0+70) was current then
    assert lh.expire_versions(older_than=timedelta(seconds=25)) == 7
    # both rules: a version survives if either keeps it (keep_last=2 alone would say 9)
    assert lh.expire_versions(keep_last=2, older_than=timedelta(seconds=15)) == 8
    with pytest.raises(ValueError):
        lh.expire_versions()
    with pytest.raises(ValueError):
        lh.expire_versions(keep_last=0)


def test_expire_reclaims_space_and_files(lh, clock):
    with lh.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table("ns.t", SCHEMA)
        txn.create_table("ns.gone", SCHEMA)
    add_file(lh, "ns.gone", "gone/a.parquet", b"a" * 100)
    add_file(lh, "ns.t", "t/b.parquet", b"b" * 100)
    with lh.begin() as txn:
        txn.drop_table("ns.gone")  # its file is now referenced by old versions only
    big = "x" * 2000
    for i in range(300):
        with lh.begin() as txn:
            txn.alter_table("ns.t", set_properties={"blob": f"{i}{big}"})
    lh.kvstore.compact()
    before = lh.kvstore.stats()
    lh.expire_versions(keep_last=1, grace=timedelta(0))  # no grace: its files go now
    after = lh.kvstore.stats()

    def size(stats):
        return stats["l0_bytes"] + stats["sorted_run_bytes"]

    assert size(after) < size(before) / 10, (size(before), size(after))
    assert not lh.data_store.exists("gone/a.parquet")
    assert lh.data_store.exists("t/b.parquet")  # still referenced by the head
    assert [f.path for f in lh.at_version(lh.version).list_data_files("ns.t")] == ["t/b.parquet"]
    assert lh.at_version(lh.version).describe_table("ns.t").properties["blob"].startswith("299")


def test_expire_survives_reopen(url, clock):
    opts = {"clock": clock, "kv_options": {"fsync": False}}
    with lakehouse.open(url, **opts) as lh:
        states = random_history(lh, clock, 30, seed=2)
        lh.expire_versions(keep_last=5)
        head = lh.version
    with lakehouse.open(url, **opts) as lh:
        assert lh.oldest_version == head - 4
        with pytest.raises(lakehouse.VersionExpired):
            lh.at_version(head - 5)
        for v in range(head - 4, head + 1):
            assert state_of(lh.at_version(v)) == states[v]


def test_transaction_begun_before_expiry(lh, clock):
    with lh.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table("ns.t", SCHEMA)
    old = lh.begin()
    for i in range(5):
        with lh.begin() as txn:
            txn.alter_table("ns.t", set_properties={"i": str(i)})
    lh.expire_versions(keep_last=1)
    assert old.list_tables("ns") == ["t"]  # its snapshot still reads
    old.create_table("ns.u", SCHEMA)
    with pytest.raises(lakehouse.RetryableConflict, match="expired"):
        old.commit()
