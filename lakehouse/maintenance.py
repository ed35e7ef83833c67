"""Rollback, export and version expiration (TrinityLake's storage-level operations).

**Rollback rolls forward.** ``rollback(to)`` reads the whole state at ``to``
(every definition and table-state key) and the state at the head, and
commits a new version holding the difference (creates, alters, drops), with
``rollback_of = to`` in its record. History is never rewritten, so the
rollback itself can be rolled back. The commit is *exclusive*: any version
committed meanwhile makes it retry from scratch, because the result must
equal the old state exactly.

**Export** writes one version as a new lakehouse at another URL: version 0
is its empty root, version 1 holds the exported state and records where it
came from. ``full`` copies every data file the state references into the
destination's data directory; ``minimal`` copies only metadata and rewrites
relative data-file paths to absolute URLs of the source's files.

**Expiration** ``expire_versions(keep_last=N, older_than=t, grace=g)`` picks
the oldest version to keep (the last N; and/or the version that was current
at ``t``, so ``at_time(t)`` stays answerable; with both, whichever keeps
more) and then, in this order (a crash between steps leaves something
harmless):

1. one kvstore write: ``L/oldest`` = the new oldest version, delete the
   records of the expired versions, queue in ``L/gc`` the data files that
   only expired versions reference, each with the time it was queued and
   the grace ``g`` (default :data:`DEFAULT_GRACE`);
2. raise the kvstore retention watermark to the seq that reads the new
   oldest version: compaction may now drop every older key version; queue
   (``iceberg:<name>``, same grace) the Iceberg metadata objects no retained
   version can reach any more (:mod:`lakehouse.iceberg.gc`: a lakehouse that
   never wrote any pays one check);
3. the deletion pass: delete the queued files whose grace has passed and
   that no open view or transaction of this process reads
   (:mod:`lakehouse.pins`), and drop them from ``L/gc``. Files still in
   their grace stay queued, times and all, across restarts: the next
   ``expire_versions``, ``remove_orphan_files`` or open runs the pass again;
4. ``db.compact()`` (optional) to reclaim the space now.

A reader in another process at an expired version reads on during the
grace; once the files are gone its read raises ``VersionExpired``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import kvstore
from lakehouse import codec, keys
from lakehouse.codec import QueuedFile
from lakehouse.commit import CommitOptions
from lakehouse.data import files as datafiles
from lakehouse.data.scan import fetch
from lakehouse.errors import AlreadyExists, NotFound, RetryableConflict, VersionExpired
from lakehouse.model import Isolation, to_epoch_ms
from lakehouse.pins import StreamPin
from lakehouse.txn import Transaction

if TYPE_CHECKING:
    from lakehouse.context import Context

log = logging.getLogger("lakehouse")


#: opens (creating) a lakehouse at a URL with options: ``lakehouse.open``
Opener = Callable[..., Any]


def _state(scan: Any) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for prefix in keys.STATE_PREFIXES:
        out.update(scan(prefix))
    return out


# ---------------------------------------------------------------------------
# rollback
# ---------------------------------------------------------------------------
def rollback(ctx: Context, begin: Callable[..., Transaction], to_version: int) -> int:
    """See :meth:`lakehouse.Lakehouse.rollback`; ``begin`` begins a transaction of
    the lakehouse (``Lakehouse.begin``: passed in, being above this module)."""
    ctx.check_open()
    if isinstance(to_version, bool) or not isinstance(to_version, int):
        raise TypeError(f"to_version must be an int, not {type(to_version).__name__}")
    last: RetryableConflict | None = None
    for attempt in range(1, ctx.commit_retries + 1):
        with ctx.at_version(to_version) as old:
            target = _state(old.raw_items)
        txn = begin(Isolation.SNAPSHOT)
        # it brings back to_version's files: its commit fails if to_version expired
        txn.oldest_version_read = min(txn.oldest_version_read, to_version)
        try:
            txn.apply_state(target)  # from the transaction's own state
            txn.commit_options = CommitOptions(exclusive=True, force=True, rollback_of=to_version)
            version = txn.commit()
            log.info("rolled back to version %d as version %d", to_version, version)
            return version
        except RetryableConflict as exc:
            last = exc
            ctx.sleep(ctx.backoff(attempt))
        finally:
            txn.rollback()
    assert last is not None
    raise last


# ---------------------------------------------------------------------------
# export
# ---------------------------------------------------------------------------
def export(
    ctx: Context,
    dest_url: Any,
    *,
    version: int | None = None,
    kind: str = "full",
    open_lakehouse: Opener,
) -> dict[str, Any]:
    """See :meth:`lakehouse.Lakehouse.export`; ``open_lakehouse`` creates the
    destination (``lakehouse.open``: passed in, being above this module)."""
    ctx.check_open()
    if kind not in ("full", "minimal"):
        raise ValueError(f"kind must be 'full' or 'minimal', not {kind!r}")
    if version is None:
        version = ctx.head()
    d = ctx.definition
    _check_export_destination(ctx, dest_url)
    with ctx.at_version(version) as view:
        state = _state(view.raw_items)
        # its files stay pinned against expiry until they are copied
        pin = StreamPin(version, view.pinned_paths() or ())
        ctx.pins.add(pin)
    dest = open_lakehouse(
        dest_url,
        default_isolation=d.default_isolation,
        max_name_length=d.max_name_length,
        transaction_ttl=d.transaction_ttl,
        properties=d.properties,
        durable=ctx.durable,
        storage_options=ctx.options.storage_options,
    )
    copied = 0
    copied_bytes = 0
    try:
        if dest.version != 0:
            raise AlreadyExists(f"{dest.url} already holds a lakehouse at version {dest.version}")
        for key, value in list(state.items()):
            if not keys.is_data_file_key(key):
                continue
            f = codec.decode_data_file(value)
            if not f.is_stored:  # external, or inline: it rides in its record
                continue
            if kind == "full":
                data = fetch(ctx.data, f.path)
                datafiles.check_bytes(data, f)  # damage is refused, never copied as sound
                dest.data_store.put(f.path, data)
                copied += 1
                copied_bytes += len(data)
            else:
                if ctx.layout.data_url is None:
                    raise ValueError(
                        "a minimal export needs the source's data files at a URL; this "
                        "lakehouse was opened on a store instance"
                    )
                external = replace(f, path=f"{ctx.layout.data_url}/{f.path}")
                state[key] = codec.encode_data_file(external)
        txn = dest.begin(Isolation.SNAPSHOT)
        txn.apply_state(state, current={})
        txn.commit_options = CommitOptions(
            force=True,
            source={"lakehouse": d.id, "version": version, "kind": kind, "url": ctx.layout.label},
        )
        dest_version = txn.commit()
    finally:
        dest.close()
        pin.release()
    log.info("exported version %d to %s (%s, %d files)", version, dest_url, kind, copied)
    return {
        "source_version": version,
        "dest_version": dest_version,
        "kind": kind,
        "objects": sum(1 for k in state if k[:2] in keys.KIND_PREFIX.values()),
        "files_copied": copied,
        "bytes_copied": copied_bytes,
    }


def _check_export_destination(ctx: Context, dest_url: Any) -> None:
    """An export goes to an empty place that is not this lakehouse, and touches
    nothing (no writer is fenced) when it is refused."""
    import os

    from kvstore.objstore import ObjectStore, local_path, open_store

    if isinstance(dest_url, os.PathLike):
        dest_url = os.fspath(dest_url)
    if not isinstance(dest_url, (str, ObjectStore)):
        raise TypeError(
            f"dest_url must be a str, os.PathLike or ObjectStore, not {type(dest_url).__name__}"
        )
    if isinstance(dest_url, str):
        if not dest_url:
            raise ValueError("dest_url must not be empty")
        local_path(dest_url)  # refuses a mistyped URL (memory:/x) before anything is made
    if not isinstance(dest_url, str):
        if dest_url.list(""):
            raise AlreadyExists(f"{dest_url.describe()} is not empty; export into an empty place")
        return
    own = ctx.layout.label
    norm: Callable[[str], str] = lambda u: u.rstrip("/") if "://" in u else os.path.abspath(u)  # noqa: E731
    if isinstance(own, str) and norm(dest_url.removeprefix("file://")) == norm(
        own.removeprefix("file://")
    ):
        raise AlreadyExists(f"cannot export {own} onto itself")
    local = "://" not in dest_url or dest_url.startswith("file://")
    if local:
        path = dest_url.removeprefix("file://")
        if os.path.isfile(path):
            raise AlreadyExists(f"{path} is a file; export into an empty directory")
        if os.path.isdir(path) and os.listdir(path):
            raise AlreadyExists(f"{path} is not empty; export into an empty directory")
    elif not dest_url.startswith("memory://") and open_store(
        dest_url, ctx.options.storage_options
    ).list(""):
        raise AlreadyExists(f"{dest_url} is not empty; export into an empty location")


# ---------------------------------------------------------------------------
# expiration
# ---------------------------------------------------------------------------
def _files_at(ctx: Context, version: int) -> set[str]:
    with ctx.at_version(version) as view:
        return view.pinned_paths() or set()


#: how long the data files only expired versions reference stay by default: as
#: long as the default transaction TTL, so a reader in another process (a Spark
#: job, ``open_reader``) that opened an expired version can read it for that long
DEFAULT_GRACE = timedelta(hours=1)


def _grace_ms(grace: Any) -> int:
    if grace is None:
        grace = DEFAULT_GRACE
    if not isinstance(grace, timedelta):
        raise TypeError(f"grace must be a datetime.timedelta, not {type(grace).__name__}")
    if grace < timedelta(0):
        raise ValueError(f"grace must not be negative, got {grace}")
    return grace // timedelta(milliseconds=1)


def expire_versions(
    ctx: Context,
    *,
    keep_last: int | None = None,
    older_than: Any = None,
    grace: Any = None,
    compact: bool = True,
) -> int:
    """Expire old versions; returns the oldest retained version.

    ``keep_last=N`` keeps the newest N versions. ``older_than=t`` (aware
    datetime, epoch ms, or a ``timedelta`` meaning "that long ago") expires
    versions no longer needed to read the lakehouse as of ``t`` or later.
    With both, a version survives if either rule keeps it. The head is
    always kept. The data files only expired versions reference are deleted
    once ``grace`` (a ``timedelta``, default :data:`DEFAULT_GRACE`) has
    passed, by this call or a later one (see the module docstring).
    """
    ctx.check_open()
    if keep_last is None and older_than is None:
        raise ValueError("give keep_last, older_than, or both")
    if keep_last is not None:
        if isinstance(keep_last, bool) or not isinstance(keep_last, int):
            raise TypeError(f"keep_last must be an int, not {type(keep_last).__name__}")
        if keep_last < 1:
            raise ValueError(f"keep_last must be >= 1 (the latest version stays), got {keep_last}")
    grace_ms = _grace_ms(grace)
    cutoff_ms: int | None = None
    if isinstance(older_than, timedelta):
        cutoff_ms = ctx.now_ms() - older_than // timedelta(milliseconds=1)
    elif older_than is not None:
        cutoff_ms = to_epoch_ms(older_than, "older_than")
    db = ctx.db
    found: Any = None  # the Iceberg garbage this pass computed, for its deletion pass
    with ctx.maintenance_lock:
        for _ in range(ctx.commit_retries):
            done = _expire_once(ctx, keep_last, cutoff_ms, grace_ms)
            if done is not None:
                new_oldest, seq_keep, oldest, queued = done
                break
        else:
            raise RetryableConflict("expire_versions kept losing the race with commits; retry")
        if new_oldest > oldest:
            db.set_retention_watermark(seq_keep)
            ctx.forget_before(new_oldest)
            log.info(
                "expired versions %d..%d (oldest retained: %d, watermark seq %d); "
                "%d data files queued for deletion after a grace of %d ms",
                oldest,
                new_oldest - 1,
                new_oldest,
                seq_keep,
                queued,
                grace_ms,
            )
            from lakehouse.iceberg import gc as iceberg_gc

            found = iceberg_gc.queue_unreachable(ctx, grace_ms)
        _delete_due(ctx, found)
        if new_oldest > oldest and compact:
            db.compact()
        return new_oldest


def _expire_once(
    ctx: Context, keep_last: int | None, cutoff_ms: int | None, grace_ms: int
) -> tuple[int, int, int, int] | None:
    """Step 1; returns (new oldest, watermark seq, previous oldest, files queued),
    None if a commit raced."""
    db = ctx.db
    with db.snapshot() as snap:
        head = ctx.u64(snap, keys.HEAD)
        oldest = ctx.u64(snap, keys.OLDEST, 0)
        rules: list[int] = []
        if keep_last is not None:
            rules.append(head - keep_last + 1)
        if cutoff_ms is not None:
            try:
                rules.append(ctx.version_at(snap, cutoff_ms))
            except (NotFound, VersionExpired):  # nothing that old is retained
                rules.append(oldest)
        new_oldest = min(max(min(rules), oldest), head)
        if new_oldest <= oldest:
            return oldest, 0, oldest, 0
        seq_keep = snap.seq
        if new_oldest < head:
            seq_keep = ctx.record(new_oldest + 1, snap.get).base_seq
        expired_files = _files_at(ctx, oldest)
        retained_files = _files_at(ctx, new_oldest)
        for u in range(oldest + 1, head + 1):
            _add_files_of(ctx, u, snap, expired_files if u < new_oldest else retained_files)
    doomed = expired_files - retained_files
    ktx = db.transaction(kvstore.Isolation.SNAPSHOT)
    try:
        if ktx.get_for_update(keys.HEAD) != keys.encode_u64(head):
            return None  # a commit landed since the snapshot: recompute
        # from now on only expired versions reference them
        queue, new = codec.enqueue_gc(ktx.get(keys.PENDING_GC), doomed, ctx.now_ms(), grace_ms)
        ktx.put(keys.OLDEST, keys.encode_u64(new_oldest))
        for u in range(oldest, new_oldest):
            ktx.delete(keys.record_key(u))
        ktx.put(keys.PENDING_GC, codec.encode_gc_queue(queue + new))
        seq = ktx.commit()
    except kvstore.TransactionConflict:
        return None
    finally:
        ktx.rollback()
    if new_oldest == head:
        # no commit came between the snapshot and this write, so the head is still
        # what seq reads: a watermark there also lets compaction drop the records
        # deleted just now
        assert seq is not None
        seq_keep = seq
    return new_oldest, seq_keep, oldest, len(new)


def deletion_queue(db: Any) -> list[QueuedFile]:
    """The data files queued for deletion (``L/gc``) as ``db`` (a kvstore DB,
    reader or snapshot) sees them: ``lakehouse verify`` reports them."""
    return codec.gc_queue(db.get(keys.PENDING_GC))


def _delete_due(ctx: Context, found: Any = None) -> int:
    """Step 3: delete the queued files whose grace has passed and that no open
    view or transaction of this process reads; the caller holds the maintenance lock.
    ``found``: the Iceberg garbage this pass's ``queue_unreachable`` returned (None:
    computed here when an Iceberg object is due)."""
    queue = deletion_queue(ctx.db)
    now = ctx.now_ms()
    due = [q for q in queue if q.due_ms <= now]
    if not due:
        return 0
    from lakehouse.iceberg import gc as iceberg_gc

    gone, kept, due = iceberg_gc.delete_queued(ctx, due, found)  # the Iceberg objects among them
    pinned: set[str] = set()
    if due:
        # after the new oldest version was committed (see lakehouse.pins)
        pinned = ctx.pins.paths(below=ctx.oldest_now())
        # a safety net: a file a retained version references is never deleted (a queue
        # written by a version of this code that missed files a rollback brought back)
        _, live = retained_paths(ctx)
        kept |= {q.path for q in due if q.path in live}  # off the queue, not deleted
    for q in due:
        if q.path in kept:
            log.warning("data file %s is queued for deletion but referenced: kept", q.path)
            continue
        if q.path in pinned:
            continue
        try:
            ctx.data.delete(q.path)  # a file deleted before a crash: deleting again is fine
            gone.add(q.path)
        except OSError as exc:  # left queued for the next pass
            log.warning("could not delete data file %s: %s", q.path, exc)
    if gone or kept:
        rest = [q for q in queue if q.path not in gone and q.path not in kept]
        ctx.db.put(keys.PENDING_GC, codec.encode_gc_queue(rest))
        log.info(
            "deleted %d queued files of expired versions (%d queued, %d pinned by open readers)",
            len(gone),
            len(rest),
            len(pinned & {q.path for q in due}),
        )
    return len(gone)


def retry_pending_deletes(ctx: Context) -> None:
    """The deletion pass at open: files whose grace passed while no process ran
    (or whose deletion a previous process did not finish) go now."""
    try:
        with ctx.maintenance_lock:
            _delete_due(ctx)
    except kvstore.KvError as exc:  # a read-only situation should not block opening
        log.warning("could not finish queued data-file deletions: %s", exc)


# ---------------------------------------------------------------------------
# orphan data files
# ---------------------------------------------------------------------------
def _add_files_of(ctx: Context, u: int, snap: kvstore.Snapshot, out: set[str]) -> None:
    """Add to ``out`` the data files version ``u`` references that ``u - 1`` did not:
    those its record lists; a rollback or export recorded before records listed the
    files they bring back lists none, so its whole state is read instead."""
    rec = ctx.record(u, snap.get)
    out.update(rec.files_added)
    if not rec.files_added and rec.restores_state:
        out.update(_files_at(ctx, u))


def retained_paths(ctx: Context) -> tuple[int, set[str]]:
    """The oldest retained version and the paths of every data file (in the data
    directory) a retained version references. ``ctx`` may be a reader's (``verify``)."""
    with ctx.db.snapshot() as snap:
        head = ctx.u64(snap, keys.HEAD)
        oldest = ctx.u64(snap, keys.OLDEST, 0)
        refs = _files_at(ctx, oldest)
        for u in range(oldest + 1, head + 1):
            _add_files_of(ctx, u, snap, refs)
    return oldest, refs


def _referenced(ctx: Context) -> set[str]:
    """Paths of every data file a retained version references, or the deletion
    queue (files in their grace period), or an open view or transaction."""
    oldest, refs = retained_paths(ctx)
    refs.update(q.path for q in deletion_queue(ctx.db))
    refs.update(ctx.pins.paths(below=oldest))
    return refs


def remove_orphan_files(ctx: Context, *, older_than: Any = None) -> list[str]:
    """Delete data files that no retained version references and that were
    created more than ``older_than`` ago (a ``timedelta``; default: the
    lakehouse's transaction TTL, so files of transactions still running are
    never touched). Crashed writers leave such files behind; so does a
    failed delete of an aborted transaction. Files of expired versions are
    not orphans: the deletion pass (run first) deletes those whose grace has
    passed, the others stay. Iceberg objects no retained version can reach
    are queued and deleted once ``older_than`` has passed since a pass first
    found them so (:mod:`lakehouse.iceberg.gc`). Returns the deleted orphan
    data files' paths."""
    from lakehouse.data.files import SUFFIX, created_ms

    ctx.check_open()
    if older_than is None:
        older_than = timedelta(seconds=ctx.transaction_ttl)
    if not isinstance(older_than, timedelta):
        raise TypeError(f"older_than must be a datetime.timedelta, not {type(older_than).__name__}")
    if older_than < timedelta(0):
        raise ValueError("older_than must not be negative")
    cutoff = ctx.now_ms() - older_than // timedelta(milliseconds=1)
    deleted: list[str] = []
    with ctx.maintenance_lock:
        # unreachable Iceberg objects are queued, due once older_than passed (their names
        # carry versions, not times: see lakehouse.iceberg.gc), then this pass deletes them
        from lakehouse.iceberg import gc as iceberg_gc

        found = iceberg_gc.queue_unreachable(ctx, older_than // timedelta(milliseconds=1))
        _delete_due(ctx, found)
        candidates = []
        for name in ctx.data.list(""):
            ms = created_ms(name)
            if name.endswith(SUFFIX) and ms is not None and ms <= cutoff:
                candidates.append(name)
        if not candidates:
            return deleted
        referenced = _referenced(ctx)  # after listing: a file committed meanwhile is in here
        for name in candidates:
            if name in referenced or name in ctx.inflight:
                continue
            try:
                ctx.data.delete(name)
                deleted.append(name)
            except OSError as exc:
                log.warning("could not delete orphan data file %s: %s", name, exc)
    log.info("removed %d orphan data files", len(deleted))
    return deleted
