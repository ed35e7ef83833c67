"""Expiry and readers (issue 19, part 2): ``expire_versions(grace=)`` deletes the
data files only expired versions reference once the grace has passed (the queue
and its times survive a restart); open views, transactions and streams of the
writer's process pin their files whatever the grace; a reader elsewhere at a
version whose files are gone gets ``VersionExpired``; a transaction whose base
expired gets ``RetryableConflict``; ``remove_orphan_files`` and ``verify`` agree
with the grace. Time is a FakeClock: nothing here sleeps."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import replace
from datetime import timedelta

import pyarrow as pa
import pytest
from parquet_files import PARQUET

import lakehouse
from kvstore.clock import FakeClock
from lakehouse.cli.target import Target
from lakehouse.cli.verify import Progress, verify
from lakehouse.maintenance import DEFAULT_GRACE

SCHEMA = pa.schema([("id", pa.int64())])
NO_GRACE = timedelta(0)


class CommitHook:
    """The ``commit_hook`` option (a testing injection point): calls ``fn(intent,
    attempt)`` inside each commit attempt, before its kvstore commit, while set."""

    def __init__(self) -> None:
        self.fn = None

    def __call__(self, intent, attempt) -> None:
        if self.fn is not None:
            self.fn(intent, attempt)


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


def ids(t: pa.Table) -> list[int]:
    return sorted(t.column("id").to_pylist())


def files_of(h: lakehouse.Lakehouse | lakehouse.LakehouseView) -> set[str]:
    return {f.path for f in h.list_data_files("s.t")}


def on_disk(lh: lakehouse.Lakehouse) -> set[str]:
    return {n for n in lh.data_store.list("") if n.endswith(".parquet")}


def replace_rows(lh: lakehouse.Lakehouse, *new: int) -> None:
    with lh.begin() as txn:
        txn.overwrite("s.t", rows(*new))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def path(tmp_path, clock):
    """A lakehouse whose table s.t holds rows 1, 2 in one data file (version 1)."""
    p = str(tmp_path / "lh")
    with lakehouse.open(p, clock=clock) as lh, lh.begin() as txn:
        txn.create_namespace("s")
        txn.create_table("s.t", SCHEMA, PARQUET)  # expiry deletes files: Parquet ones
        txn.append("s.t", rows(1, 2))
    return p


# -- the grace --------------------------------------------------------------------------
def test_files_stay_for_the_grace_and_a_restart_keeps_the_queue(path, clock):
    lh = lakehouse.open(path, clock=clock)
    old = files_of(lh)
    replace_rows(lh, 3)
    assert lh.expire_versions(keep_last=1, grace=timedelta(minutes=10)) == 2
    assert old <= on_disk(lh)  # queued, not deleted
    queue = lh.pending_deletions()
    assert {q.path for q in queue} == old
    assert {q.grace_ms for q in queue} == {600_000}
    queued_at = {q.since_ms for q in queue}
    assert queued_at == {int(clock.time() * 1000)}
    clock.advance(9 * 60)
    lh.expire_versions(keep_last=1)  # nothing new to expire; the pass runs: not due yet
    assert old <= on_disk(lh)
    lh.close()
    lh = lakehouse.open(path, clock=clock)  # a restart: the queue and its times stay
    assert old <= on_disk(lh)
    assert {q.since_ms for q in lh.pending_deletions()} == queued_at
    lh.close()
    clock.advance(61)
    lh = lakehouse.open(path, clock=clock)  # the pass at open: the grace is over
    assert not old & on_disk(lh)
    assert lh.pending_deletions() == []
    assert ids(lh.read("s.t")) == [3]
    lh.close()


def test_default_grace_is_an_hour(path, clock):
    assert timedelta(hours=1) == DEFAULT_GRACE
    with lakehouse.open(path, clock=clock) as lh:
        old = files_of(lh)
        replace_rows(lh, 3)
        lh.expire_versions(keep_last=1)
        clock.advance(DEFAULT_GRACE.total_seconds() - 1)
        lh.expire_versions(keep_last=1)
        assert old <= on_disk(lh)
        clock.advance(1)
        lh.expire_versions(keep_last=1)
        assert not old & on_disk(lh)


def test_each_expiry_keeps_its_own_grace(path, clock):
    with lakehouse.open(path, clock=clock) as lh:
        first = files_of(lh)
        replace_rows(lh, 3)
        lh.expire_versions(keep_last=1, grace=timedelta(minutes=30))
        second = files_of(lh)
        replace_rows(lh, 4)
        lh.expire_versions(keep_last=1, grace=timedelta(minutes=5))
        clock.advance(6 * 60)
        lh.expire_versions(keep_last=1)
        assert first <= on_disk(lh) and not second & on_disk(lh)
        clock.advance(25 * 60)
        lh.expire_versions(keep_last=1)
        assert not first & on_disk(lh)


def test_grace_must_be_a_timedelta(path, clock):
    with lakehouse.open(path, clock=clock) as lh:
        with pytest.raises(TypeError, match="grace"):
            lh.expire_versions(keep_last=1, grace=60)
        with pytest.raises(ValueError, match="grace"):
            lh.expire_versions(keep_last=1, grace=timedelta(seconds=-1))


# -- pins in the writer's process ---------------------------------------------------------
def test_an_open_view_pins_its_files_whatever_the_grace(path, clock):
    lh = lakehouse.open(path, clock=clock)
    view = lh.at_version(1)
    old = files_of(view)
    replace_rows(lh, 3)
    lh.expire_versions(keep_last=1, grace=NO_GRACE)
    assert old <= on_disk(lh)  # due, but pinned
    assert ids(view.read("s.t")) == [1, 2]
    assert ids(view.scan_batches("s.t").read_all()) == [1, 2]
    view.close()
    lh.expire_versions(keep_last=1)  # the next pass deletes them
    assert not old & on_disk(lh)
    assert lh.pending_deletions() == []
    lh.close()


def test_a_stream_pins_its_files_after_its_view_closed(path, clock):
    lh = lakehouse.open(path, clock=clock)
    old = files_of(lh)
    stream = lh.scan_batches("s.t")  # the head view is closed at once
    replace_rows(lh, 3)
    lh.expire_versions(keep_last=1, grace=NO_GRACE)
    assert old <= on_disk(lh)
    assert ids(stream.read_all()) == [1, 2]
    lh.expire_versions(keep_last=1)
    assert not old & on_disk(lh)
    lh.close()


def test_a_dropped_view_stops_pinning(path, clock):
    import gc

    lh = lakehouse.open(path, clock=clock)
    view = lh.at_version(1)
    old = files_of(view)
    replace_rows(lh, 3)
    lh.expire_versions(keep_last=1, grace=NO_GRACE)
    assert old <= on_disk(lh)
    del view
    gc.collect()
    lh.expire_versions(keep_last=1)
    assert not old & on_disk(lh)
    lh.close()


def test_pinned_files_are_not_orphans(path, clock):
    lh = lakehouse.open(path, clock=clock)
    view = lh.at_version(1)
    old = files_of(view)
    replace_rows(lh, 3)
    lh.expire_versions(keep_last=1, grace=NO_GRACE)
    assert lh.remove_orphan_files(older_than=NO_GRACE) == []
    assert ids(view.read("s.t")) == [1, 2]
    view.close()
    assert lh.remove_orphan_files(older_than=NO_GRACE) == []  # expiry's, not orphans
    assert not old & on_disk(lh)  # but deleted by the pass it runs first
    lh.close()


# -- transactions whose base expired ------------------------------------------------------
def test_a_transaction_whose_base_expired_gets_retryable_conflict(path, clock):
    lh = lakehouse.open(path, clock=clock)
    txn = lh.begin()
    replace_rows(lh, 3)
    lh.expire_versions(keep_last=1, grace=NO_GRACE)
    assert ids(txn.read("s.t")) == [1, 2]  # pinned: its reads still answer
    txn.append("s.t", rows(9))
    with pytest.raises(lakehouse.RetryableConflict, match="base version 1 has expired"):
        txn.commit()
    assert txn.status == "rolled back"
    # a retry loop re-runs it on the latest version
    attempts = 0
    for attempt in range(3):
        attempts += 1
        try:
            with lh.begin() as t:
                t.append("s.t", rows(9))
                if attempt == 0:
                    replace_rows(lh, 4)
                    lh.expire_versions(keep_last=1, grace=NO_GRACE)
            break
        except lakehouse.RetryableConflict:
            continue
    assert attempts == 2 and ids(lh.read("s.t")) == [4, 9]
    lh.close()


def test_base_just_below_the_oldest_version_also_conflicts(path, clock):
    with lakehouse.open(path, clock=clock) as lh:
        txn = lh.begin()  # at version 1
        replace_rows(lh, 3)  # version 2
        assert lh.expire_versions(keep_last=1, grace=NO_GRACE) == 2
        txn.append("s.t", rows(9))
        with pytest.raises(lakehouse.RetryableConflict):
            txn.commit()  # it could be rebased over 2, but its base is gone


def test_a_transaction_read_of_a_gone_file_of_its_expired_base_is_retryable(path, clock):
    """Pins keep the files in this process; should one go anyway (deleted by hand
    here), the read says the base expired, not that data is corrupt."""
    lh = lakehouse.open(path, clock=clock)
    txn = lh.begin()
    old = files_of(lh)
    replace_rows(lh, 3)
    lh.expire_versions(keep_last=1, grace=NO_GRACE)
    for p in old:
        lh.data_store.delete(p)
    with pytest.raises(lakehouse.RetryableConflict, match="expired"):
        txn.read("s.t")
    with pytest.raises(lakehouse.RetryableConflict, match="expired"):
        txn.scan_batches("s.t").read_all()
    txn.rollback()
    lh.close()


# -- readers in other processes -----------------------------------------------------------
def test_reader_at_an_expired_version_gets_version_expired(path, clock):
    """The race: a reader opens at v, the writer expires v with no grace, the reader reads."""
    lh = lakehouse.open(path, clock=clock)
    r = lakehouse.open_reader(path)
    assert r.version == 1 and ids(r.read("s.t")) == [1, 2]
    view = r.at_version(1)
    stream = r.scan_batches("s.t")
    replace_rows(lh, 3)
    lh.expire_versions(keep_last=1, grace=NO_GRACE)
    with pytest.raises(lakehouse.VersionExpired, match="version 1 has expired"):
        view.read("s.t")
    with pytest.raises(lakehouse.VersionExpired, match="version 1"):
        view.scan_batches("s.t").read_all()
    with pytest.raises(lakehouse.VersionExpired, match="version 1"):
        stream.read_all()
    r2 = lakehouse.open_reader(path)  # a reader at the head it has not refreshed past
    r3 = lakehouse.open_reader(path)
    with pytest.raises(lakehouse.VersionExpired, match="version 2"):
        replace_rows(lh, 4)
        lh.expire_versions(keep_last=1, grace=NO_GRACE)
        r2.read("s.t")
    assert ids(r2.read("s.t")) == [4]  # it refreshed to learn the oldest version: now at 3
    assert r3.refresh() == 3 and ids(r3.read("s.t")) == [4]
    for h in (view, r, r2, r3, lh):
        h.close()


def test_reader_reads_on_during_the_grace(path, clock):
    lh = lakehouse.open(path, clock=clock)
    r = lakehouse.open_reader(path)
    view = r.at_version(1)
    replace_rows(lh, 3)
    lh.expire_versions(keep_last=1, grace=timedelta(minutes=5))
    assert ids(view.read("s.t")) == [1, 2]
    assert ids(r.read("s.t")) == [1, 2]  # its unrefreshed head, version 1
    clock.advance(5 * 60)
    lh.expire_versions(keep_last=1)
    with pytest.raises(lakehouse.VersionExpired):
        view.read("s.t")
    view.close()
    r.close()
    lh.close()


def test_a_missing_file_of_a_retained_version_stays_corruption(path, clock):
    lh = lakehouse.open(path, clock=clock)
    r = lakehouse.open_reader(path)
    for p in files_of(lh):
        lh.data_store.delete(p)
    for h in (lh, r):
        with pytest.raises(lakehouse.DataFileMissing) as info:
            h.read("s.t")
        assert not isinstance(info.value, lakehouse.VersionExpired)
    with lh.at_version(1) as v, pytest.raises(lakehouse.DataFileMissing):
        v.read("s.t")
    r.close()
    lh.close()


def test_reader_in_another_process_gets_version_expired(path, clock):
    """A real second process opens a reader at version 1, reads, waits; the writer
    expires version 1 with no grace; the reader reads again."""
    script = textwrap.dedent(
        f"""
        import sys
        import lakehouse
        r = lakehouse.open_reader({path!r})
        print(r.version, r.read("s.t").num_rows, flush=True)
        sys.stdin.readline()  # the writer has expired version 1
        try:
            r.read("s.t")
            print("read", flush=True)
        except Exception as exc:
            print(type(exc).__name__, exc, flush=True)
        """
    )
    lh = lakehouse.open(path, clock=clock)
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    assert child.stdout.readline().split() == ["1", "2"]
    replace_rows(lh, 3)
    lh.expire_versions(keep_last=1, grace=NO_GRACE)
    out, err = child.communicate("go\n", timeout=120)
    assert child.returncode == 0, err
    assert out.startswith("VersionExpired version 1 has expired"), out
    lh.close()


# -- orphans and verify ---------------------------------------------------------------------
def test_orphans_and_verify_agree_with_the_grace(path, clock):
    lh = lakehouse.open(path, clock=clock)
    old = files_of(lh)
    replace_rows(lh, 3)
    lh.expire_versions(keep_last=1, grace=timedelta(hours=2))
    orphan = "x/0000000000001-00000000000000ff.parquet"
    lh.data_store.put(orphan, b"left by a crashed writer")
    assert lh.remove_orphan_files(older_than=NO_GRACE) == [orphan]
    assert old <= on_disk(lh)  # in its grace: not an orphan

    report = verify(Target(path))
    assert report.ok, report.problems
    assert {p["path"] for p in report.pending_deletion} == old
    assert any("pending deletion" in n for n in report.notes)
    assert report.to_json()["pending_deletion"] == report.pending_deletion

    clock.advance(2 * 3600)
    assert lh.remove_orphan_files(older_than=NO_GRACE) == []  # expiry's files, not orphans
    assert not old & on_disk(lh)  # the pass it runs first deleted them
    report = verify(Target(path))
    assert report.ok and report.pending_deletion == []
    lh.close()


def test_verify_notes_files_expired_while_it_ran(path, clock):
    """A file the checked head referenced, deleted because the writer expired that
    head meanwhile, is a note; a file of a retained version gone is damage."""
    lh = lakehouse.open(path, clock=clock)
    old = files_of(lh)

    def expire_first(_total: int) -> Progress:  # on_plan runs between the tree walk and the reads:
        replace_rows(lh, 3)  # the writer moves on there
        lh.expire_versions(keep_last=1, grace=NO_GRACE)
        return lambda _n, _item: None

    report = verify(Target(path), on_plan=expire_first)
    assert report.ok, report.problems
    assert any(p in n and "expired meanwhile" in n for p in old for n in report.notes)
    for p in files_of(lh):
        lh.data_store.delete(p)
    report = verify(Target(path))
    assert [p.kind for p in report.problems] == ["missing"]
    lh.close()


def test_cli_expire_takes_a_grace(path, capsys):
    from lakehouse.cli.main import main

    with lakehouse.open(path) as lh:
        old = files_of(lh)
        replace_rows(lh, 3)
    assert main(["expire", path, "--keep-last", "1"]) == 0  # the default grace: kept
    with lakehouse.open(path) as lh:
        assert old <= on_disk(lh)
    assert main(["expire", path, "--keep-last", "1", "--grace", "0"]) == 0
    capsys.readouterr()
    with lakehouse.open(path) as lh:
        # the earlier expiry queued them with the default grace: still kept
        assert old <= on_disk(lh)
        replace_rows(lh, 4)
        newer = files_of(lh)
        replace_rows(lh, 5)
    assert main(["expire", path, "--keep-last", "1", "--grace", "0"]) == 0
    with lakehouse.open(path) as lh:
        assert not newer & on_disk(lh) and old <= on_disk(lh)


# -- files a version brings back (rollback, export) ------------------------------------------
def test_expiry_keeps_the_files_a_rollback_brought_back(path, clock):
    """Version 3 rolls back to 1, referencing 1's file again; expiring 1 must not
    delete it (the rollback's record once listed no files)."""
    with lakehouse.open(path, clock=clock) as lh:
        replace_rows(lh, 3)  # version 2: 1's file no longer referenced
        lh.rollback(1)  # version 3: referenced again
        assert lh.expire_versions(keep_last=2, grace=NO_GRACE) == 2
        assert ids(lh.read("s.t")) == [1, 2]
        assert lh.remove_orphan_files(older_than=NO_GRACE) == []
        assert ids(lh.read("s.t")) == [1, 2]
        assert verify(Target(path)).ok


def test_orphan_removal_keeps_the_files_of_an_exported_lakehouse(tmp_path, path, clock):
    dest = str(tmp_path / "copy")
    with lakehouse.open(path, clock=clock) as lh:
        lh.export(dest)
    with lakehouse.open(dest, clock=clock) as copy:
        clock.advance(2 * 3600)
        assert copy.remove_orphan_files(older_than=NO_GRACE) == []
        assert ids(copy.read("s.t")) == [1, 2]


def test_older_rollback_records_still_keep_their_files(path, clock):
    """A rollback recorded before versions listed the files they bring back
    (files_added empty) is read as bringing back its whole state."""
    from lakehouse import codec, keys

    with lakehouse.open(path, clock=clock) as lh:
        replace_rows(lh, 3)
        v = lh.rollback(1)
        rec = lh.version_info(v)
        assert rec.files_added  # recorded now
        lh.kvstore.put(keys.record_key(v), codec.encode_record(replace(rec, files_added=())))
    with lakehouse.open(path, clock=clock) as lh:
        assert lh.version_info(v).files_added == ()
        lh.expire_versions(keep_last=2, grace=NO_GRACE)
        assert ids(lh.read("s.t")) == [1, 2]
        assert lh.remove_orphan_files(older_than=NO_GRACE) == []
        assert ids(lh.read("s.t")) == [1, 2]


# -- the change feed over expired files ----------------------------------------------------
def test_changes_over_files_deleted_by_expiry_is_version_expired(path, clock, monkeypatch):
    """A change feed whose versions expire (and whose files go) while it reads
    raises VersionExpired, not DataFileMissing."""
    lh = lakehouse.open(path, clock=clock)
    replace_rows(lh, 3)  # version 2
    store = lh.data_store
    real_get = store.get
    moved_on: list[bool] = []

    def get(name: str) -> bytes:  # the writer expires 1 and 2 as the feed reads their files
        if name.endswith(".parquet") and not moved_on:
            moved_on.append(True)
            replace_rows(lh, 4)
            lh.expire_versions(keep_last=1, grace=NO_GRACE)
        return real_get(name)

    monkeypatch.setattr(store, "get", get)
    with pytest.raises(lakehouse.VersionExpired, match="expired while the change feed"):
        lh.changes("s.t", 1, 1)
    assert moved_on
    lh.close()


def test_a_missing_file_names_its_path_on_every_read_path(path, clock, monkeypatch):
    """Also where Arrow's dataset reader reads several files together."""
    with lakehouse.open(path, clock=clock) as lh:
        with lh.begin() as txn:
            txn.append("s.t", rows(5))  # two files: the dataset reader reads them together
        files = sorted(files_of(lh))
        lh.data_store.delete(files[0])
        for call in (lambda: lh.read("s.t"), lambda: lh.read("s.t", columns=["id"])):
            with pytest.raises(lakehouse.DataFileMissing) as info:
                call()
            assert files[0] in str(info.value) and info.value.path == files[0]


def test_a_queue_written_before_the_grace_is_due_at_once(path, clock):
    """L/gc in its older form (paths, no times): files left by an interrupted
    deletion pass; the next open deletes them."""
    from lakehouse import codec, keys

    with lakehouse.open(path, clock=clock) as lh:
        old = files_of(lh)
        replace_rows(lh, 3)
        lh.expire_versions(keep_last=1, grace=timedelta(days=1))
        lh.kvstore.put(keys.PENDING_GC, codec.encode_paths(sorted(old)))
        assert [q.due_ms for q in lh.pending_deletions()] == [0] * len(old)
        assert old <= on_disk(lh)
    with lakehouse.open(path, clock=clock) as lh:
        assert not old & on_disk(lh) and lh.pending_deletions() == []
        assert ids(lh.read("s.t")) == [3]


# -- transactions that re-add files of older versions -----------------------------------------
def test_a_restore_from_a_version_expired_before_commit_is_retryable(path, clock):
    """restore_table(t, 1) re-adds version 1's file; expiring 1 before the commit
    queues (and here deletes) that file, so the commit must not reference it."""
    lh = lakehouse.open(path, clock=clock)
    replace_rows(lh, 3)  # version 2
    txn = lh.begin()  # at the head: its base stays retained
    txn.restore_table("s.t", 1)
    assert lh.expire_versions(keep_last=1, grace=NO_GRACE) == 2
    with pytest.raises(lakehouse.RetryableConflict, match="version 1, which this transaction"):
        txn.commit()
    assert ids(lh.read("s.t")) == [3]
    lh.close()


def test_a_clone_whose_base_expires_during_its_commit_is_retryable(path, clock):
    """The expiry commits between the commit's read of the oldest version and its
    own kvstore commit: the commit sees it (and re-checks on its retry)."""
    hook = CommitHook()
    lh = lakehouse.open(path, clock=clock, commit_hook=hook)
    txn = lh.begin()  # at version 1
    txn.clone_table("s.t", "s.c")  # version 1's file, shared
    replace_rows(lh, 3)  # version 2: s.t no longer references it
    expired: list[int] = []

    def expire_now(intent, attempt):
        if intent.txn_id == txn.id and not expired:
            expired.append(lh.expire_versions(keep_last=1, grace=NO_GRACE))

    hook.fn = expire_now
    with pytest.raises(lakehouse.RetryableConflict, match="base version 1 has expired"):
        txn.commit()
    hook.fn = None
    assert expired == [2] and not lh.table_exists("s.c")
    lh.expire_versions(keep_last=1, grace=NO_GRACE)  # the next pass: nothing pins now
    assert lh.version_info(2).version == 2  # the oldest version still reads
    assert verify(Target(path)).ok
    lh.close()


def test_a_commit_racing_an_expiry_of_everything_but_its_base_retries(path, clock):
    """Expiring up to the head raises the retention watermark to the expiry's own
    seq; a commit that read before it must retry, or its version's record would
    point below the watermark and the version before it could not be read."""
    hook = CommitHook()
    lh = lakehouse.open(path, clock=clock, commit_hook=hook)
    replace_rows(lh, 3)  # version 2
    txn = lh.begin()  # at the head, 2
    txn.append("s.t", rows(9))
    expired: list[int] = []

    def expire_now(intent, attempt):
        if intent.txn_id == txn.id and not expired:
            expired.append(lh.expire_versions(keep_last=1, grace=NO_GRACE))

    hook.fn = expire_now
    assert txn.commit() == 3 and txn.attempts == 2
    hook.fn = None
    assert expired == [2]
    with lh.at_version(2) as v:
        assert ids(v.read("s.t")) == [3]
    assert lh.expire_versions(keep_last=1, grace=NO_GRACE) == 3
    assert ids(lh.read("s.t")) == [3, 9]
    lh.close()


def test_a_read_of_restored_files_gone_with_their_version_is_retryable(path, clock):
    lh = lakehouse.open(path, clock=clock)
    replace_rows(lh, 3)  # version 2
    txn = lh.begin()
    txn.restore_table("s.t", 1)
    lh.expire_versions(keep_last=1, grace=NO_GRACE)  # version 1's file goes
    with pytest.raises(lakehouse.RetryableConflict, match="version 1, whose data"):
        txn.read("s.t")
    txn.rollback()
    lh.close()


def test_an_export_keeps_its_files_while_it_copies(tmp_path, path, clock, monkeypatch):
    """An expiry with no grace in the middle of a full export of an old version does
    not delete the files the export is copying."""
    lh = lakehouse.open(path, clock=clock)
    with lh.begin() as txn:
        txn.append("s.t", rows(5))  # version 2: two files
    replace_rows(lh, 3)  # version 3
    store = lh.data_store
    real_get = store.get
    moved_on: list[bool] = []

    def get(name: str) -> bytes:
        if name.endswith(".parquet") and not moved_on:
            moved_on.append(True)
            lh.expire_versions(keep_last=1, grace=NO_GRACE)
        return real_get(name)

    monkeypatch.setattr(store, "get", get)
    lh.export(str(tmp_path / "copy"), version=2)
    assert moved_on and lh.oldest_version == 3
    with lakehouse.open(str(tmp_path / "copy"), clock=clock) as copy:
        assert ids(copy.read("s.t")) == [1, 2, 5]
    lh.expire_versions(keep_last=1, grace=NO_GRACE)  # now they go
    assert on_disk(lh) == files_of(lh)
    lh.close()


def test_a_rollback_to_a_version_expiring_during_its_commit_does_not_commit(path, clock):
    hook = CommitHook()
    lh = lakehouse.open(path, clock=clock, commit_hook=hook)
    replace_rows(lh, 3)  # version 2
    expired: list[int] = []

    def expire_now(intent, attempt):
        if not expired:
            expired.append(lh.expire_versions(keep_last=1, grace=NO_GRACE))

    hook.fn = expire_now
    with pytest.raises(lakehouse.VersionExpired):
        lh.rollback(1)  # its retry finds version 1 expired
    hook.fn = None
    assert expired == [2] and lh.version == 2
    assert ids(lh.read("s.t")) == [3]
    lh.close()


def test_the_deletion_pass_never_deletes_a_file_a_retained_version_references(path, clock):
    """A queue entry for a live file (written by code that missed a rollback's
    files) is dropped from the queue, and the file kept."""
    from lakehouse import codec, keys
    from lakehouse.codec import QueuedFile

    with lakehouse.open(path, clock=clock) as lh:
        live = sorted(files_of(lh))
        lh.kvstore.put(keys.PENDING_GC, codec.encode_gc_queue([QueuedFile(live[0], 0, 0)]))
        lh.expire_versions(keep_last=1)  # the pass
        assert set(live) <= on_disk(lh) and lh.pending_deletions() == []
        assert ids(lh.read("s.t")) == [1, 2]
