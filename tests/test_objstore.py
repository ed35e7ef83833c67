"""The object-store boundary: every backend honours the same contract."""

from __future__ import annotations

import multiprocessing
import os
import threading
import uuid

import pytest

from kvstore.objstore import (
    FaultyStore,
    FsspecStore,
    LocalStore,
    MemoryStore,
    SimulatedCrash,
    open_store,
)


@pytest.fixture(params=["local", "memory", "fsspec-memory"])
def store(request, tmp_path):
    if request.param == "local":
        yield LocalStore(tmp_path / "root")
    elif request.param == "memory":
        name = f"objtest-{uuid.uuid4().hex}"
        yield MemoryStore.named(name)
        MemoryStore.drop(name)
    else:
        yield FsspecStore("memory", f"/objtest-{uuid.uuid4().hex}")


def test_put_get_roundtrip(store):
    store.put("a/b/c.bin", b"hello")
    assert store.get("a/b/c.bin") == b"hello"
    store.put("a/b/c.bin", b"replaced")
    assert store.get("a/b/c.bin") == b"replaced"
    assert store.size("a/b/c.bin") == 8
    assert store.exists("a/b/c.bin")
    assert not store.exists("a/b/missing")


def test_put_if_absent_refuses_existing(store):
    store.put_if_absent("m/1", b"first")
    with pytest.raises(FileExistsError):
        store.put_if_absent("m/1", b"second")
    assert store.get("m/1") == b"first"


def test_missing_objects_raise_file_not_found(store):
    with pytest.raises(FileNotFoundError):
        store.get("nope")
    with pytest.raises(FileNotFoundError):
        store.get_range("nope", 0, 1)
    with pytest.raises(FileNotFoundError):
        store.size("nope")


def test_get_range(store):
    store.put("r", bytes(range(100)))
    assert store.get_range("r", 10, 5) == bytes(range(10, 15))
    assert store.get_range("r", 95, 10) == bytes(range(95, 100))
    reader = store.open_range_reader("r")
    assert reader.read(0, 3) == b"\x00\x01\x02"
    reader.close()


def test_list_is_sorted_and_prefix_filtered(store):
    for name in ["wal/3", "wal/1", "wal/2", "manifest/1", "sst/x.sst", "walrus"]:
        store.put(name, b"x")
    assert store.list("wal/") == ["wal/1", "wal/2", "wal/3"]
    assert store.list("manifest/") == ["manifest/1"]
    assert store.list("") == sorted(
        ["wal/3", "wal/1", "wal/2", "manifest/1", "sst/x.sst", "walrus"]
    )
    assert store.list("nothing/") == []


def test_delete_is_idempotent(store):
    store.put("d", b"x")
    store.delete("d")
    store.delete("d")
    assert not store.exists("d")


@pytest.mark.parametrize("bad", ["", "/abs", "a/../b", "../x", "a//b", "./a"])
def test_names_cannot_escape(store, bad):
    with pytest.raises(ValueError):
        store.put(bad, b"x")


def test_put_if_absent_race_has_one_winner_threads(store):
    winners = []
    barrier = threading.Barrier(8)

    def race(i):
        barrier.wait()
        try:
            store.put_if_absent("race/obj", f"writer {i}".encode())
            winners.append(i)
        except FileExistsError:
            pass

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if isinstance(store, FsspecStore):  # fsspec's memory fs is not atomic; not used by writers
        return
    assert len(winners) == 1
    assert store.get("race/obj") == f"writer {winners[0]}".encode()


def _race_worker(root, i, barrier, results):
    store = LocalStore(root)
    barrier.wait()
    try:
        store.put_if_absent("race/obj", f"process {i}".encode() * 1000)
        results.put(i)
    except FileExistsError:
        results.put(-1)


def test_local_put_if_absent_race_across_processes(tmp_path):
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(6)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_race_worker, args=(str(tmp_path), i, barrier, results))
        for i in range(6)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    outcomes = [results.get() for _ in procs]
    winners = [o for o in outcomes if o >= 0]
    assert len(winners) == 1
    assert LocalStore(tmp_path).get("race/obj") == f"process {winners[0]}".encode() * 1000


def test_local_leaves_no_temp_files_and_cleans_crash_leftovers(tmp_path):
    store = LocalStore(tmp_path)
    store.put("a/x", b"1")
    store.put_if_absent("a/y", b"2")
    with pytest.raises(FileExistsError):
        store.put_if_absent("a/y", b"3")
    assert sorted(os.listdir(tmp_path / "a")) == ["x", "y"]
    (tmp_path / "a" / ".tmp-deadbeef").write_bytes(b"half")
    assert store.list("a/") == ["a/x", "a/y"]
    assert store.cleanup_temp() == 1


def test_local_journal_appends(tmp_path):
    store = LocalStore(tmp_path)
    j = store.open_journal("wal/1.log")
    j.append(b"abc")
    j.append(b"def")
    j.sync()
    j.close()
    assert store.get("wal/1.log") == b"abcdef"
    with pytest.raises(FileExistsError):
        store.open_journal("wal/1.log")


def test_object_stores_have_no_journal():
    assert MemoryStore().open_journal("wal/1.log") is None


def test_memory_store_is_shared_by_name():
    name = f"shared-{uuid.uuid4().hex}"
    try:
        MemoryStore.named(name).put("k", b"v")
        assert open_store(f"memory://{name}").get("k") == b"v"
    finally:
        MemoryStore.drop(name)


def test_open_store_urls(tmp_path):
    assert isinstance(open_store(str(tmp_path)), LocalStore)
    assert isinstance(open_store(tmp_path), LocalStore)
    assert open_store(f"file://{tmp_path}").root == str(tmp_path)
    assert isinstance(open_store("memory://u"), MemoryStore)
    with pytest.raises(ValueError):
        open_store("")
    with pytest.raises(ValueError):
        open_store("memory://")
    with pytest.raises(TypeError):
        open_store(42)  # type: ignore[arg-type]
    mem = MemoryStore()
    assert open_store(mem) is mem


def test_faulty_crash_before_kth_mutation_kills_everything():
    inner = MemoryStore()
    f = FaultyStore(inner, crash_before=3)
    f.put("a", b"1")
    f.put_if_absent("b", b"2")
    with pytest.raises(SimulatedCrash):
        f.put("c", b"3")
    assert not inner.exists("c")
    with pytest.raises(SimulatedCrash):
        f.get("a")
    assert [op for _, op, _ in f.log] == ["put", "put_if_absent", "put"]


def test_faulty_fail_before_is_one_shot():
    inner = MemoryStore()
    f = FaultyStore(inner, fail_before=2)
    f.put("a", b"1")
    with pytest.raises(OSError):
        f.put("b", b"2")
    assert not inner.exists("b")
    f.put("b", b"2")
    assert inner.get("b") == b"2"


def test_faulty_error_after_applies_then_fails():
    inner = MemoryStore()
    f = FaultyStore(inner, error_after=1)
    with pytest.raises(OSError):
        f.put_if_absent("a", b"1")
    assert inner.get("a") == b"1"


def test_faulty_torn_journal_append(tmp_path):
    inner = LocalStore(tmp_path)
    f = FaultyStore(inner, crash_before=3, torn=True)
    j = f.open_journal("wal/1.log")  # mutation 1
    assert j is not None
    j.append(b"0123456789")  # mutation 2
    with pytest.raises(SimulatedCrash):
        j.append(b"abcdefghij")  # mutation 3: half of it lands
    data = inner.get("wal/1.log")  # the journal is preallocated: zeros follow while open
    assert data[:15] == b"0123456789abcde" and not any(data[15:])


def test_local_put_new_creates_once_and_durably(tmp_path):
    """put_new: in-place O_EXCL create for objects nobody reads before it returns."""
    from kvstore.objstore import LocalStore

    store = LocalStore(tmp_path / "s")
    store.put_new("t/a.parquet", b"abc")
    assert store.get("t/a.parquet") == b"abc"
    with pytest.raises(FileExistsError):
        store.put_new("t/a.parquet", b"other")
    assert store.get("t/a.parquet") == b"abc"
    assert [n for n in store.list("t/")] == ["t/a.parquet"]
