"""A fenced writer never shows what it failed to make durable (issue 13, item 1).

After a newer writer claims the store, the old handle's next durable write
raises FencedError; from then on its reads (get, scan, last_seq, new
snapshots and transactions) show only what it had made durable, and views
pinned past that point refuse to read.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import kvstore
from kvstore.objstore import MemoryStore


@pytest.fixture(params=["local", "memory", "memory-object-wal-dir"])
def url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """A store URL and the options every handle on it uses (both kinds of WAL)."""
    if request.param == "local":
        yield str(tmp_path / "db"), {}
    elif request.param == "memory":
        name = f"fence-vis-{uuid.uuid4().hex}"
        yield f"memory://{name}", {}
        MemoryStore.drop(name)
    else:  # SSTs in memory, a journal in a local wal_dir
        name = f"fence-vis-{uuid.uuid4().hex}"
        yield f"memory://{name}", {"wal_dir": str(tmp_path / "wal")}
        MemoryStore.drop(name)


def _open(u: str, opts: dict[str, Any], **more: Any) -> kvstore.DB:
    return kvstore.open(u, background_compaction=False, **opts, **more)


def _takeover(u: str, opts: dict[str, Any]) -> kvstore.DB:
    """A second writer that fences the first (takeover on a local directory)."""
    if "://" in u:
        return _open(u, opts)
    return _open(u, opts, takeover=True)


def test_failed_transaction_commit_is_not_visible(url: tuple[str, dict[str, Any]]) -> None:
    u, opts = url
    db = _open(u, opts)
    db.put(b"a", b"1")
    durable_seq = db.put(b"d", b"3")
    with _takeover(u, opts) as other:
        other.put(b"other", b"x")
        t = db.transaction()
        t.put(b"d", b"4")
        with pytest.raises(kvstore.FencedError):
            t.commit()
        assert db.get(b"d") == b"3"
        assert db.last_seq == durable_seq
        assert dict(db.scan()) == {b"a": b"1", b"d": b"3"}
        with db.snapshot() as snap:
            assert snap.seq == durable_seq
            assert snap.get(b"d") == b"3"
        assert db.transaction().get(b"d") == b"3"
        assert db.stats()["fenced"] is True
    db.close()


@pytest.mark.parametrize("how", ["put", "delete", "write"])
def test_failed_plain_write_is_not_visible(url: tuple[str, dict[str, Any]], how: str) -> None:
    u, opts = url
    db = _open(u, opts)
    seq = db.put(b"k", b"durable")
    other = _takeover(u, opts)
    with pytest.raises(kvstore.FencedError):
        if how == "put":
            db.put(b"k", b"lost")
        elif how == "delete":
            db.delete(b"k")
        else:
            batch = kvstore.WriteBatch()
            batch.put(b"k", b"lost")
            batch.put(b"k2", b"lost")
            db.write(batch)
    assert db.get(b"k") == b"durable"
    assert db.get(b"k2") is None
    assert db.last_seq == seq
    # later writes keep failing, reads keep showing the durable state
    with pytest.raises(kvstore.FencedError):
        db.put(b"k3", b"x")
    assert db.get(b"k") == b"durable"
    db.close()
    other.close()


def test_non_durable_writes_vanish_after_the_fence(url: tuple[str, dict[str, Any]]) -> None:
    """durable=False writes are visible while the handle writes; a fence that makes them
    impossible to persist hides them again (the new writer never had them)."""
    u, opts = url
    db = _open(u, opts)
    seq = db.put(b"k", b"durable")
    other = _takeover(u, opts)
    try:
        db.put(b"k", b"buffered", durable=False)
    except kvstore.FencedError:
        pass  # a cheap fence check noticed already
    with pytest.raises(kvstore.FencedError):
        db.flush()
    assert db.get(b"k") == b"durable"
    assert db.last_seq == seq
    other.close()
    db.close()
    with kvstore.open_reader(u, wal_dir=opts.get("wal_dir")) as r:
        assert r.get(b"k") == b"durable"


def test_views_past_the_durable_seq_refuse_to_read(url: tuple[str, dict[str, Any]]) -> None:
    u, opts = url
    db = _open(u, opts)
    seq = db.put(b"k", b"durable")
    early = db.snapshot()
    db.put(b"k", b"buffered", durable=False)
    late = db.snapshot()
    txn = db.transaction()
    assert late.get(b"k") == b"buffered"
    other = _takeover(u, opts)
    with pytest.raises(kvstore.FencedError):
        db.put(b"x", b"y")
    assert early.seq == seq and early.get(b"k") == b"durable"
    with pytest.raises(kvstore.FencedError, match="never"):
        late.get(b"k")
    with pytest.raises(kvstore.FencedError):
        list(late.scan())
    with pytest.raises(kvstore.FencedError):
        txn.get(b"k")
    txn.rollback()
    early.close()
    late.close()
    other.close()
    db.close()


def test_acknowledged_writes_stay_visible_after_the_fence(
    url: tuple[str, dict[str, Any]],
) -> None:
    u, opts = url
    db = _open(u, opts)
    seqs = [db.put(b"k%d" % i, b"v") for i in range(5)]
    db.flush()
    seqs.append(db.put(b"after-flush", b"v"))
    other = _takeover(u, opts)
    with pytest.raises(kvstore.FencedError):
        db.put(b"lost", b"v")
    assert db.last_seq == seqs[-1]
    assert db.get(b"after-flush") == b"v"
    assert db.get(b"lost") is None
    assert other.get(b"after-flush") == b"v"
    other.close()
    db.close()
