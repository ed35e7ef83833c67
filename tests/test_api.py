"""Focused tests of the public kvstore contract (see docs/api.md).

Most tests run on both the process-local memory backend and a local
directory (with ``fsync=False`` to stay fast).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid

import pytest

import kvstore
from kvstore.objstore import MemoryStore

FAST = {"fsync": False}


@pytest.fixture(params=["memory", "local"])
def url(request, tmp_path):
    """A fresh, empty store URL on each backend."""
    if request.param == "memory":
        name = f"test-api-{uuid.uuid4().hex}"
        yield f"memory://{name}"
        MemoryStore.drop(name)
    else:
        yield str(tmp_path / "db")


@pytest.fixture
def local_url(tmp_path):
    return str(tmp_path / "db")


@pytest.fixture
def db(url):
    handle = kvstore.open(url, **FAST)
    yield handle
    handle.close()


def open_db(url, **options):
    return kvstore.open(url, **{**FAST, **options})


def items(it):
    return list(it)


# ----------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------
BAD_BYTES = ["text", 1, 1.5, None, [b"a"], object()]


@pytest.mark.parametrize("bad", BAD_BYTES, ids=lambda v: type(v).__name__)
def test_put_rejects_non_bytes_key(db, bad):
    with pytest.raises(TypeError, match="key"):
        db.put(bad, b"v")
    assert db.last_seq == 0


@pytest.mark.parametrize("bad", BAD_BYTES, ids=lambda v: type(v).__name__)
def test_put_rejects_non_bytes_value(db, bad):
    with pytest.raises(TypeError, match="value"):
        db.put(b"k", bad)
    assert db.get(b"k") is None


@pytest.mark.parametrize("bad", BAD_BYTES, ids=lambda v: type(v).__name__)
def test_get_and_delete_reject_non_bytes_key(db, bad):
    with pytest.raises(TypeError, match="key"):
        db.get(bad)
    with pytest.raises(TypeError, match="key"):
        db.delete(bad)


def test_str_key_is_rejected_even_if_ascii(db):
    with pytest.raises(TypeError, match="key"):
        db.put("abc", b"v")
    with pytest.raises(TypeError, match="value"):
        db.put(b"abc", "v")
    assert db.get(b"abc") is None


def test_bytes_like_keys_and_values_are_accepted(db):
    db.put(bytearray(b"ba"), bytearray(b"v1"))
    db.put(memoryview(b"mv"), memoryview(b"v2"))
    assert db.get(b"ba") == b"v1"
    assert db.get(bytearray(b"mv")) == b"v2"
    assert db.get(memoryview(b"ba")) == b"v1"
    value = db.get(b"mv")
    assert type(value) is bytes
    assert items(db.scan(bytearray(b"b"), memoryview(b"z"))) == [(b"ba", b"v1"), (b"mv", b"v2")]
    for k, v in db.scan():
        assert type(k) is bytes and type(v) is bytes
    db.delete(bytearray(b"ba"))
    assert db.get(b"ba") is None


def test_bytearray_mutated_after_put_does_not_change_stored_value(db):
    key, value = bytearray(b"key"), bytearray(b"value")
    db.put(key, value)
    key[0] = ord("X")
    value[0] = ord("X")
    assert db.get(b"key") == b"value"
    assert db.get(b"Xey") is None


def test_empty_key_is_value_error(db):
    with pytest.raises(ValueError, match="key"):
        db.put(b"", b"v")
    with pytest.raises(ValueError, match="key"):
        db.delete(b"")
    with pytest.raises(ValueError, match="key"):
        db.get(b"")
    with pytest.raises(ValueError, match="key"):
        kvstore.WriteBatch().put(b"", b"v")
    with pytest.raises(ValueError, match="key"):
        kvstore.WriteBatch().delete(bytearray())


def test_empty_value_is_allowed_and_distinct_from_missing(db):
    db.put(b"k", b"")
    assert db.get(b"k") == b""
    assert items(db.scan()) == [(b"k", b"")]
    db.flush()
    assert db.get(b"k") == b""


def test_unknown_option_is_type_error_naming_it(local_url):
    with pytest.raises(TypeError, match="no_such_option"):
        kvstore.open(local_url, no_such_option=1)
    with pytest.raises(TypeError, match="no_such_option"):
        kvstore.open("memory://test-api-unknown-option", no_such_option=1)
    MemoryStore.drop("test-api-unknown-option")


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("memtable_bytes", 0),
        ("memtable_bytes", -1),
        ("block_bytes", 0),
        ("block_cache_bytes", -5),
        ("max_immutable_memtables", 0),
        ("wal_buffer_bytes", 0),
        ("bloom_bits_per_key", -1),
        ("compression", "lz4"),
        ("wal", "sometimes"),
    ],
)
def test_bad_option_value_is_value_error_naming_it(local_url, option, value):
    with pytest.raises(ValueError, match=option):
        kvstore.open(local_url, **{option: value})


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("memtable_bytes", "64"),
        ("memtable_bytes", 1.5),
        ("block_bytes", None),
        ("storage_options", ["endpoint_url"]),
        ("bloom_bits_per_key", "10"),
        ("compression", 3),
        ("fsync", "no"),
        ("background_flush", "yes"),
    ],
)
def test_bad_option_type_is_type_error_naming_it(local_url, option, value):
    with pytest.raises(TypeError, match=option):
        kvstore.open(local_url, **{option: value})


def test_url_of_wrong_type_is_type_error():
    with pytest.raises(TypeError):
        kvstore.open(12345)


def test_write_batch_rejects_bad_types():
    batch = kvstore.WriteBatch()
    with pytest.raises(TypeError, match="key"):
        batch.put("k", b"v")
    with pytest.raises(TypeError, match="value"):
        batch.put(b"k", "v")
    with pytest.raises(TypeError, match="value"):
        batch.put(b"k", None)
    with pytest.raises(TypeError, match="key"):
        batch.delete(7)
    assert len(batch) == 0


@pytest.mark.parametrize(
    "not_a_batch", [None, [(b"k", b"v")], {b"k": b"v"}, b"k"], ids=["None", "list", "dict", "bytes"]
)
def test_write_of_non_batch_is_type_error(db, not_a_batch):
    with pytest.raises(TypeError, match="batch"):
        db.write(not_a_batch)
    assert db.get(b"k") is None


def test_scan_bounds_of_wrong_type_are_type_errors(db):
    db.put(b"a", b"1")
    with pytest.raises(TypeError, match="start"):
        items(db.scan("a"))
    with pytest.raises(TypeError, match="end"):
        items(db.scan(b"a", 5))
    with pytest.raises(TypeError, match="prefix"):
        items(db.scan_prefix("a"))
    with pytest.raises(TypeError, match="prefix"):
        items(db.scan_prefix(None))
    with pytest.raises(TypeError, match="reverse"):
        items(db.scan(reverse="yes"))
    with db.snapshot() as snap:
        with pytest.raises(TypeError, match="start"):
            items(snap.scan(1))
        with pytest.raises(TypeError, match="prefix"):
            items(snap.scan_prefix("a"))


def test_durable_flag_must_be_bool(db):
    with pytest.raises(TypeError, match="durable"):
        db.put(b"k", b"v", durable="yes")
    with pytest.raises(TypeError, match="durable"):
        db.delete(b"k", durable=1)
    with pytest.raises(TypeError, match="durable"):
        db.write(kvstore.WriteBatch().put(b"k", b"v"), durable=None)
    assert db.get(b"k") is None


def test_durable_is_keyword_only(db):
    with pytest.raises(TypeError):
        db.put(b"k", b"v", False)


# ----------------------------------------------------------------------
# close, context managers
# ----------------------------------------------------------------------
CLOSED_CALLS = {
    "put": lambda db: db.put(b"k", b"v"),
    "put_nondurable": lambda db: db.put(b"k", b"v", durable=False),
    "get": lambda db: db.get(b"k"),
    "delete": lambda db: db.delete(b"k"),
    "write": lambda db: db.write(kvstore.WriteBatch().put(b"k", b"v")),
    "scan": lambda db: items(db.scan()),
    "scan_bounded": lambda db: items(db.scan(b"a", b"z", reverse=True)),
    "scan_prefix": lambda db: items(db.scan_prefix(b"k")),
    "snapshot": lambda db: db.snapshot(),
    "flush": lambda db: db.flush(),
}


@pytest.mark.parametrize("call", sorted(CLOSED_CALLS))
def test_calls_after_close_raise_closed_error(url, call):
    db = open_db(url)
    db.put(b"k", b"v")
    db.close()
    with pytest.raises(kvstore.ClosedError):
        CLOSED_CALLS[call](db)


def test_stats_after_close_raises_closed_error(url):
    db = open_db(url)
    db.close()
    with pytest.raises(kvstore.ClosedError):
        db.stats()


def test_closed_error_is_a_kv_error():
    assert issubclass(kvstore.ClosedError, kvstore.KvError)
    for name in (
        "TransactionConflict",
        "FencedError",
        "CorruptionError",
        "SnapshotTooOld",
        "TransactionExpired",
        "ReadOnlyError",
    ):
        assert issubclass(getattr(kvstore, name), kvstore.KvError), name


def test_close_is_idempotent(url):
    db = open_db(url)
    db.put(b"k", b"v")
    db.close()
    db.close()
    db.close()
    with open_db(url) as again:
        assert again.get(b"k") == b"v"


def test_db_is_a_context_manager(url):
    with open_db(url) as db:
        assert isinstance(db, kvstore.DB)
        db.put(b"k", b"v", durable=False)
    with pytest.raises(kvstore.ClosedError):
        db.get(b"k")
    with open_db(url) as db:
        assert db.get(b"k") == b"v"


def test_db_context_manager_closes_on_exception(url):
    with pytest.raises(RuntimeError), open_db(url) as db:
        db.put(b"k", b"v")
        raise RuntimeError("boom")
    with pytest.raises(kvstore.ClosedError):
        db.put(b"k2", b"v")
    with open_db(url) as db:
        assert db.get(b"k") == b"v"


def test_snapshot_is_a_context_manager_and_close_is_idempotent(db):
    db.put(b"k", b"v")
    with db.snapshot() as snap:
        assert isinstance(snap, kvstore.Snapshot)
        assert snap.get(b"k") == b"v"
        assert db.stats()["open_snapshots"] == 1
    assert db.stats()["open_snapshots"] == 0
    with pytest.raises(kvstore.ClosedError):
        snap.get(b"k")
    with pytest.raises(kvstore.ClosedError):
        items(snap.scan())
    with pytest.raises(kvstore.ClosedError):
        items(snap.scan_prefix(b"k"))
    snap.close()
    snap.close()


def test_snapshot_of_closed_db_raises_closed_error(url):
    db = open_db(url)
    db.put(b"k", b"v")
    snap = db.snapshot()
    db.close()
    with pytest.raises(kvstore.ClosedError):
        snap.get(b"k")
    with pytest.raises(kvstore.ClosedError):
        items(snap.scan())
    snap.close()


# ----------------------------------------------------------------------
# sequence numbers
# ----------------------------------------------------------------------
def test_writes_return_increasing_seqs(db):
    assert db.last_seq == 0
    seqs = [
        db.put(b"a", b"1"),
        db.put(b"b", b"2", durable=False),
        db.delete(b"a"),
        db.write(kvstore.WriteBatch().put(b"c", b"3").delete(b"b")),
        db.delete(b"never-written"),
        db.put(b"a", b"again"),
    ]
    assert all(isinstance(s, int) for s in seqs)
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)
    assert db.last_seq == seqs[-1]
    assert db.stats()["last_seq"] == seqs[-1]


def test_delete_of_missing_key_is_fine(db):
    seq = db.delete(b"missing")
    assert seq == db.last_seq
    assert db.get(b"missing") is None
    assert items(db.scan()) == []


def test_write_batch_uses_one_seq_for_all_its_ops(db):
    db.put(b"gone", b"x")
    before = db.last_seq
    batch = kvstore.WriteBatch()
    batch.put(b"a", b"1").put(b"b", b"2").delete(b"gone").put(b"c", b"3")
    assert len(batch) == 4
    seq = db.write(batch)
    assert seq > before
    assert db.last_seq == seq
    assert db.put(b"z", b"after") > seq
    with db.snapshot(seq=before) as old:
        assert items(old.scan()) == [(b"gone", b"x")]
    with db.snapshot(seq=seq) as new:
        assert items(new.scan()) == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]


def test_write_batch_same_key_last_op_wins(db):
    db.put(b"d", b"old")
    batch = kvstore.WriteBatch()
    batch.put(b"p", b"1").put(b"p", b"2")  # put, put -> 2
    batch.put(b"q", b"1").delete(b"q")  # put, delete -> absent
    batch.delete(b"d").put(b"d", b"new")  # delete, put -> new
    batch.put(b"r", b"1").delete(b"r").put(b"r", b"3")  # -> 3
    db.write(batch)
    assert db.get(b"p") == b"2"
    assert db.get(b"q") is None
    assert db.get(b"d") == b"new"
    assert db.get(b"r") == b"3"
    assert items(db.scan()) == [(b"d", b"new"), (b"p", b"2"), (b"r", b"3")]
    db.flush()
    assert items(db.scan()) == [(b"d", b"new"), (b"p", b"2"), (b"r", b"3")]


def test_write_batch_can_be_reused_and_applies_bytes_like(db):
    batch = kvstore.WriteBatch()
    batch.put(bytearray(b"k"), memoryview(b"v"))
    s1 = db.write(batch)
    s2 = db.write(batch)
    assert s2 > s1
    assert db.get(b"k") == b"v"


def test_seqs_keep_increasing_across_reopen(url):
    with open_db(url) as db:
        db.put(b"a", b"1")
        last = db.put(b"b", b"2", durable=False)
    with open_db(url) as db:
        assert db.last_seq >= last
        assert db.put(b"c", b"3") > last
        assert db.get(b"b") == b"2"


# ----------------------------------------------------------------------
# scans
# ----------------------------------------------------------------------
def key(i):
    return b"k%03d" % i


@pytest.fixture
def layered(url):
    """Keys k000..k059 spread over several SSTs and the memtable, some deleted.

    Returns (db, expected dict).
    """
    db = open_db(url, memtable_bytes=4096, block_bytes=256, background_compaction=False)
    expected = {}
    for i in range(0, 60):
        db.put(key(i), b"v1-%d" % i)
        expected[key(i)] = b"v1-%d" % i
    db.flush()
    for i in range(0, 60, 3):  # overwrite some in a newer SST
        db.put(key(i), b"v2-%d" % i)
        expected[key(i)] = b"v2-%d" % i
    for i in range(1, 60, 7):  # tombstones in an SST over older values
        db.delete(key(i))
        expected.pop(key(i))
    db.flush()
    for i in range(2, 60, 5):  # tombstones in the memtable
        db.delete(key(i))
        expected.pop(key(i), None)
    for i in range(60, 65):  # memtable-only keys
        db.put(key(i), b"mem-%d" % i)
        expected[key(i)] = b"mem-%d" % i
    db.delete(key(61))
    expected.pop(key(61))
    assert db.stats()["l0_ssts"] + db.stats()["sorted_runs"] >= 2
    yield db, expected
    db.close()


def model_scan(expected, start=None, end=None, reverse=False):
    out = sorted(
        (k, v)
        for k, v in expected.items()
        if (start is None or k >= start) and (end is None or k < end)
    )
    return out[::-1] if reverse else out


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (None, None),
        (key(10), key(20)),
        (key(10), key(11)),
        (b"k0105", b"k0305"),  # bounds that are not keys
        (None, key(5)),
        (key(55), None),
        (b"a", b"z"),
        (b"k", b"k0"),
        (key(2), key(3)),  # a single deleted key
    ],
)
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_is_half_open_over_memtable_and_ssts(layered, start, end, reverse):
    db, expected = layered
    assert items(db.scan(start, end, reverse=reverse)) == model_scan(expected, start, end, reverse)


def test_scan_end_is_exclusive_start_inclusive(layered):
    db, _ = layered
    got = [k for k, _ in db.scan(key(3), key(6))]
    assert got == [key(3), key(4), key(5)]
    got = [k for k, _ in db.scan(key(3), key(6), reverse=True)]
    assert got == [key(5), key(4), key(3)]


@pytest.mark.parametrize("reverse", [False, True])
def test_empty_ranges(layered, reverse):
    db, _ = layered
    assert items(db.scan(key(10), key(10), reverse=reverse)) == []
    assert items(db.scan(key(20), key(10), reverse=reverse)) == []
    assert items(db.scan(b"zzz", None, reverse=reverse)) == []
    assert items(db.scan(None, b"a", reverse=reverse)) == []
    assert items(db.scan_prefix(b"nope", reverse=reverse)) == []


def test_scan_of_empty_db(db):
    assert items(db.scan()) == []
    assert items(db.scan(reverse=True)) == []
    assert items(db.scan_prefix(b"a")) == []
    assert db.get(b"a") is None


def test_tombstones_are_hidden_everywhere(url):
    with open_db(url) as db:
        db.put(b"a", b"1")
        db.put(b"b", b"2")
        db.put(b"c", b"3")
        db.flush()
        db.delete(b"b")  # memtable tombstone over an SST value
        assert db.get(b"b") is None
        assert items(db.scan()) == [(b"a", b"1"), (b"c", b"3")]
        assert items(db.scan(reverse=True)) == [(b"c", b"3"), (b"a", b"1")]
        db.flush()  # tombstone now in an SST
        assert db.get(b"b") is None
        assert items(db.scan(b"b", b"c")) == []
        assert items(db.scan_prefix(b"b")) == []
    with open_db(url) as db:
        assert db.get(b"b") is None
        assert items(db.scan()) == [(b"a", b"1"), (b"c", b"3")]
        db.put(b"b", b"back")
        assert items(db.scan()) == [(b"a", b"1"), (b"b", b"back"), (b"c", b"3")]


@pytest.mark.parametrize("flush", [False, True])
def test_scan_prefix_with_ff_bytes(url, flush):
    keys = [
        b"\x00",
        b"a",
        b"a\xff",
        b"a\xff\x00",
        b"a\xff\xff",
        b"a\xff\xff\xff",
        b"b",
        b"\xfe\xff",
        b"\xff",
        b"\xff\x00",
        b"\xff\xff",
        b"\xff\xff\x01",
        b"\xff\xff\xff",
    ]
    with open_db(url, memtable_bytes=4096) as db:
        for i, k in enumerate(keys):
            db.put(k, b"%d" % i)
        if flush:
            db.flush()
        expected = {k: b"%d" % i for i, k in enumerate(keys)}

        def check(prefix):
            want = [(k, v) for k, v in sorted(expected.items()) if k.startswith(prefix)]
            assert items(db.scan_prefix(prefix)) == want, prefix
            assert items(db.scan_prefix(prefix, reverse=True)) == want[::-1], prefix

        for prefix in [
            b"\xff",
            b"\xff\xff",
            b"\xff\xff\xff",
            b"a\xff",
            b"a\xff\xff",
            b"a",
            b"\xfe",
            b"\x00",
            b"",
            b"b",
            b"c",
        ]:
            check(prefix)
        db.delete(b"\xff\xff")
        expected.pop(b"\xff\xff")
        check(b"\xff")
        check(b"\xff\xff")


def test_scan_prefix_on_layered_store(layered):
    db, expected = layered
    for prefix in [b"k00", b"k01", b"k06", b"k0", b"k1", b"k"]:
        want = model_scan({k: v for k, v in expected.items() if k.startswith(prefix)})
        assert items(db.scan_prefix(prefix)) == want
        assert items(db.scan_prefix(prefix, reverse=True)) == want[::-1]


def test_scan_sees_many_auto_flushed_ssts(url):
    with open_db(url, memtable_bytes=4096, block_bytes=512) as db:
        expected = {}
        for i in range(400):
            k = b"key-%05d" % ((i * 7919) % 400)
            db.put(k, b"x" * (i % 50), durable=(i % 10 == 0))
            expected[k] = b"x" * (i % 50)
        db.flush()
        stats = db.stats()
        assert stats["flushes"] >= 2
        assert items(db.scan()) == sorted(expected.items())
        assert items(db.scan(reverse=True)) == sorted(expected.items(), reverse=True)
    with open_db(url) as db:
        assert items(db.scan()) == sorted(expected.items())


# ----------------------------------------------------------------------
# snapshots
# ----------------------------------------------------------------------
def test_snapshot_isolation(url):
    with open_db(url, memtable_bytes=4096) as db:
        db.put(b"a", b"a1")
        db.put(b"b", b"b1")
        db.put(b"c", b"c1")
        snap = db.snapshot()
        assert snap.seq == db.last_seq
        db.put(b"a", b"a2")
        db.delete(b"b")
        db.put(b"d", b"d1")
        old = [(b"a", b"a1"), (b"b", b"b1"), (b"c", b"c1")]
        new = [(b"a", b"a2"), (b"c", b"c1"), (b"d", b"d1")]

        def check():
            assert snap.get(b"a") == b"a1"
            assert snap.get(b"b") == b"b1"
            assert snap.get(b"d") is None
            assert items(snap.scan()) == old
            assert items(snap.scan(reverse=True)) == old[::-1]
            assert items(snap.scan(b"b", b"d")) == old[1:]
            assert items(snap.scan_prefix(b"a")) == old[:1]
            assert items(db.scan()) == new
            assert db.get(b"a") == b"a2"

        check()
        db.flush()
        check()
        for i in range(200):  # force background flushes while the snapshot is open
            db.put(b"a", b"a-%d" % i, durable=False)
        db.put(b"a", b"a2")
        db.flush()
        check()
        snap.close()


def test_snapshot_at_explicit_seq(db):
    s1 = db.put(b"k", b"v1")
    s2 = db.put(b"k", b"v2")
    db.delete(b"k")
    with db.snapshot(seq=s1) as snap:
        assert snap.seq == s1
        assert snap.get(b"k") == b"v1"
    with db.snapshot(seq=s2) as snap:
        assert items(snap.scan()) == [(b"k", b"v2")]
    with db.snapshot(seq=db.last_seq) as snap:
        assert snap.get(b"k") is None


def test_snapshot_at_old_seq_after_flush_is_too_old_or_correct(db):
    s1 = db.put(b"k", b"v1")
    db.put(b"k", b"v2")
    db.flush()
    try:
        snap = db.snapshot(seq=s1)
    except kvstore.SnapshotTooOld:
        return
    with snap:
        assert snap.get(b"k") == b"v1"


def test_snapshot_seq_out_of_range_or_wrong_type(db):
    db.put(b"k", b"v")
    with pytest.raises(ValueError, match="seq"):
        db.snapshot(seq=db.last_seq + 1)
    with pytest.raises(ValueError, match="seq"):
        db.snapshot(seq=-1)
    for bad in ["1", 1.0, True, [1]]:
        with pytest.raises(TypeError, match="seq"):
            db.snapshot(seq=bad)
    assert db.stats()["open_snapshots"] == 0


def test_snapshots_are_gone_after_reopen(url):
    db = open_db(url)
    db.put(b"k", b"v")
    snap = db.snapshot()
    db.close()
    with open_db(url) as db2:
        assert db2.stats()["open_snapshots"] == 0
        with pytest.raises(kvstore.ClosedError):
            snap.get(b"k")


# ----------------------------------------------------------------------
# fencing
# ----------------------------------------------------------------------
FENCED_WRITES = {
    "put_durable": lambda db: db.put(b"stale", b"x"),
    "put_nondurable": lambda db: db.put(b"stale", b"x", durable=False),
    "delete": lambda db: db.delete(b"shared"),
    "delete_nondurable": lambda db: db.delete(b"shared", durable=False),
    "write": lambda db: db.write(kvstore.WriteBatch().put(b"stale", b"x").delete(b"shared")),
}


@pytest.mark.parametrize("first_op", sorted(FENCED_WRITES))
def test_second_writer_fences_the_first(url, first_op):
    old = open_db(url)
    old.put(b"shared", b"v1")
    old.put(b"unflushed", b"u", durable=False)
    old.flush()
    new = open_db(url, takeover=True)  # fences old (a local store would refuse)
    try:
        with pytest.raises(kvstore.FencedError):
            FENCED_WRITES[first_op](old)
        for op in sorted(FENCED_WRITES):  # and every later write too
            with pytest.raises(kvstore.FencedError):
                FENCED_WRITES[op](old)
        assert new.get(b"stale") is None
        assert new.get(b"shared") == b"v1"
        assert new.get(b"unflushed") == b"u"
        new.put(b"fresh", b"f")
        new.flush()
        reader = kvstore.open_reader(url)
        assert reader.get(b"stale") is None
        assert reader.get(b"shared") == b"v1"
        assert reader.get(b"fresh") == b"f"
        reader.close()
    finally:
        old.close()  # must not raise
    new.put(b"after-old-closed", b"ok")
    assert new.get(b"stale") is None
    new.close()
    with open_db(url) as third:
        assert third.get(b"stale") is None
        assert third.get(b"shared") == b"v1"
        assert third.get(b"fresh") == b"f"
        assert third.get(b"after-old-closed") == b"ok"


def test_fenced_writer_without_new_writes_closes_cleanly(url):
    old = open_db(url)
    old.put(b"a", b"1")
    new = open_db(url, takeover=True)  # fences old (a local store would refuse)
    old.close()  # the memtable still holds a; closing must not raise
    assert new.get(b"a") == b"1"
    new.put(b"b", b"2")
    new.close()
    with open_db(url) as db:
        assert items(db.scan()) == [(b"a", b"1"), (b"b", b"2")]


def test_fenced_writer_write_that_fills_its_memtable_raises_fenced_error(url):
    old = open_db(url, memtable_bytes=4096)
    old.put(b"a", b"1")
    new = open_db(url, takeover=True)  # fences old (a local store would refuse)
    try:
        with pytest.raises(kvstore.FencedError):
            old.put(b"big", b"x" * 8192)  # freezes the memtable (WAL rotation)
    finally:
        try:
            old.close()
        finally:
            new.close()
    with open_db(url) as db:
        assert db.get(b"big") is None
        assert db.get(b"a") == b"1"


def test_fenced_writes_are_not_visible_after_second_writer_closes(url):
    old = open_db(url)
    old.put(b"k", b"v1")
    new = open_db(url, takeover=True)  # fences old (a local store would refuse)
    with pytest.raises(kvstore.FencedError):
        old.put(b"k", b"stale")
    new.put(b"k", b"v2")
    new.close()
    old.close()
    with open_db(url) as db:
        assert db.get(b"k") == b"v2"


# ----------------------------------------------------------------------
# readers
# ----------------------------------------------------------------------
def test_reader_sees_durable_writes_after_refresh(url):
    with open_db(url) as db:
        db.put(b"a", b"1")
        reader = kvstore.open_reader(url)
        assert reader.get(b"a") == b"1"
        db.put(b"b", b"2")
        db.delete(b"a")
        assert reader.get(b"b") is None  # not before refresh
        assert reader.get(b"a") == b"1"
        seq = reader.refresh()
        assert seq == db.last_seq
        assert reader.last_seq == db.last_seq
        assert reader.get(b"b") == b"2"
        assert reader.get(b"a") is None
        assert items(reader.scan()) == [(b"b", b"2")]
        reader.close()


def test_reader_sees_flushed_and_non_durable_after_flush(url):
    with open_db(url, memtable_bytes=4096) as db:
        reader = kvstore.open_reader(url)
        assert items(reader.scan()) == []
        expected = {}
        for i in range(150):
            k = b"r%03d" % (i % 90)
            db.put(k, b"v%d" % i, durable=False)
            expected[k] = b"v%d" % i
        db.flush()
        reader.refresh()
        assert items(reader.scan()) == sorted(expected.items())
        assert items(reader.scan(b"r010", b"r020", reverse=True)) == sorted(
            ((k, v) for k, v in expected.items() if b"r010" <= k < b"r020"), reverse=True
        )
        assert items(reader.scan_prefix(b"r08")) == sorted(
            (k, v) for k, v in expected.items() if k.startswith(b"r08")
        )
        reader.close()


def test_reader_works_after_writer_closes(url):
    db = open_db(url, memtable_bytes=4096)
    db.put(b"a", b"1")
    reader = kvstore.open_reader(url)
    for i in range(100):
        db.put(b"n%03d" % i, b"x" * 40, durable=False)
    db.delete(b"a")
    db.close()
    reader.refresh()
    assert reader.get(b"a") is None
    assert reader.get(b"n050") == b"x" * 40
    assert len(items(reader.scan())) == 100
    reader.close()
    with kvstore.open_reader(url) as fresh:
        assert fresh.get(b"a") is None
        assert len(items(fresh.scan_prefix(b"n"))) == 100


def test_reader_of_missing_store_is_empty_or_errors_cleanly(url):
    try:
        reader = kvstore.open_reader(url)
    except (FileNotFoundError, kvstore.KvError):
        return
    with reader:
        assert reader.get(b"a") is None
        assert items(reader.scan()) == []


def test_reader_refresh_interval(url):
    with open_db(url) as db:
        db.put(b"a", b"1")
        with kvstore.open_reader(url, refresh_interval=0.0) as reader:
            assert reader.get(b"a") == b"1"
            db.put(b"b", b"2")
            assert reader.get(b"b") == b"2"


def test_reader_writes_raise_read_only_error(url):
    with open_db(url) as db:
        db.put(b"a", b"1")
    reader = kvstore.open_reader(url)
    calls = [
        lambda: reader.put(b"a", b"2"),
        lambda: reader.delete(b"a"),
        lambda: reader.write(kvstore.WriteBatch().put(b"a", b"2")),
    ]
    for call in calls:
        with pytest.raises(kvstore.ReadOnlyError):
            call()
    with pytest.raises(kvstore.KvError):
        reader.put(b"a", b"3")
    assert issubclass(kvstore.ReadOnlyError, kvstore.KvError)
    assert reader.get(b"a") == b"1"
    reader.close()
    with open_db(url) as db:
        assert db.get(b"a") == b"1"


def test_reader_after_close_raises_closed_error(url):
    with open_db(url) as db:
        db.put(b"a", b"1")
    reader = kvstore.open_reader(url)
    reader.close()
    with pytest.raises(kvstore.ClosedError):
        reader.get(b"a")
    with pytest.raises(kvstore.ClosedError):
        reader.refresh()


def test_reader_does_not_fence_the_writer(url):
    with open_db(url) as db:
        db.put(b"a", b"1")
        with kvstore.open_reader(url) as reader:
            assert reader.get(b"a") == b"1"
        db.put(b"b", b"2")
        db.put(b"c", b"3", durable=False)
        db.flush()
        assert db.get(b"b") == b"2"


READER_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import kvstore
    with kvstore.open_reader(sys.argv[1]) as reader:
        out = {
            "seq": reader.last_seq,
            "items": [[k.hex(), v.hex()] for k, v in reader.scan()],
            "missing": reader.get(b"deleted") is None,
        }
    print(json.dumps(out))
    """
)


def read_in_subprocess(url):
    proc = subprocess.run(
        [sys.executable, "-c", READER_SCRIPT, url], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    out["items"] = [(bytes.fromhex(k), bytes.fromhex(v)) for k, v in out["items"]]
    return out


def test_reader_in_another_process(local_url):
    db = open_db(local_url, memtable_bytes=4096)
    try:
        expected = {}
        db.put(b"deleted", b"soon")
        for i in range(60):
            k = b"p\x00%02d\xff" % i
            db.put(k, b"v%d" % i, durable=(i % 4 == 0))
            expected[k] = b"v%d" % i
        db.delete(b"deleted")  # durable: also makes the non-durable ones durable
        out = read_in_subprocess(local_url)  # writer still open
        assert out["items"] == sorted(expected.items())
        assert out["missing"]
        assert out["seq"] == db.last_seq
        db.put(b"late", b"L")
        expected[b"late"] = b"L"
    finally:
        db.close()
    out = read_in_subprocess(local_url)
    assert out["items"] == sorted(expected.items())


# ----------------------------------------------------------------------
# stats
# ----------------------------------------------------------------------
def test_stats(url):
    with open_db(url, memtable_bytes=1 << 20) as db:
        st = db.stats()
        assert isinstance(st, dict)
        for name in ("last_seq", "l0_ssts", "memtable_bytes", "block_cache_hits"):
            assert name in st, name
            assert isinstance(st[name], int), name
        assert st["last_seq"] == 0
        for i in range(50):
            db.put(b"s%02d" % i, b"v" * 100)
        st = db.stats()
        assert st["last_seq"] == db.last_seq
        assert st["memtable_bytes"] > 50 * 100
        l0_before = st["l0_ssts"]
        db.flush()
        st = db.stats()
        assert st["l0_ssts"] + st["sorted_runs"] > l0_before
        assert st["memtable_bytes"] < 50 * 100
        for _ in range(3):
            for i in range(50):
                assert db.get(b"s%02d" % i) == b"v" * 100
        assert db.stats()["block_cache_hits"] > st["block_cache_hits"]


# ----------------------------------------------------------------------
# sizes and binary keys
# ----------------------------------------------------------------------
def test_large_values(url):
    big = bytes(range(256)) * 4096  # 1 MiB
    with open_db(url) as db:
        db.put(b"big", big)
        db.put(b"big2", big[::-1], durable=False)
        db.put(b"small", b"s")
        assert db.get(b"big") == big
        db.flush()
        assert db.get(b"big") == big
        assert items(db.scan()) == [(b"big", big), (b"big2", big[::-1]), (b"small", b"s")]
    with open_db(url) as db:
        assert db.get(b"big") == big
        assert db.get(b"big2") == big[::-1]


def test_binary_keys_sort_bytewise(url):
    keys = [
        b"\x00",
        b"\x00\x00",
        b"\x00\xff",
        b"\x01",
        b"a\x00b",
        b"a",
        b"a\xff",
        b"\x7f",
        b"\x80",
        b"\xff",
        b"\xff\x00",
        b"\xff\xff",
        b"\xff\xff\xff",
    ]
    with open_db(url) as db:
        for i, k in enumerate(keys):
            db.put(k, bytes([i]) + b"\x00\xff")
        want = sorted((k, bytes([i]) + b"\x00\xff") for i, k in enumerate(keys))
        assert items(db.scan()) == want
        db.flush()
        assert items(db.scan()) == want
        assert items(db.scan(reverse=True)) == want[::-1]
        for k, v in want:
            assert db.get(k) == v
    with open_db(url) as db:
        assert items(db.scan()) == want
        assert items(db.scan(b"\x00", b"\x01")) == [kv for kv in want if kv[0][:1] == b"\x00"]


def test_max_key_length(url):
    longest = b"\xab" * 65535
    too_long = b"\xab" * 65536
    with open_db(url) as db:
        db.put(longest, b"v")
        assert db.get(longest) == b"v"
        with pytest.raises(ValueError, match="key"):
            db.put(too_long, b"v")
        with pytest.raises(ValueError, match="key"):
            db.delete(too_long)
        with pytest.raises(ValueError, match="key"):
            kvstore.WriteBatch().put(too_long, b"v")
        db.flush()
        assert db.get(longest) == b"v"
        assert items(db.scan()) == [(longest, b"v")]
    with open_db(url) as db:
        assert db.get(longest) == b"v"
