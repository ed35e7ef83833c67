"""The :class:`Lakehouse`: open, begin, time travel, history.

Time travel, exactly and in constant time::

    kvstore seq ─────────s3──────────s4──────────s5─────────▶
    lakehouse       v3 visible │ v4 visible │ v5 visible ...
                               │            │
                R/4.base_seq ──┘ (commit of v4 read v3 here)

Version ``v`` is the state visible at any seq in ``[commit seq of v, commit
seq of v+1)``, and the commit of ``v+1`` read ``v`` at ``R/<v+1>.base_seq``,
inside that interval. So ``at_version(v)`` is: read ``H`` and the oldest
retained version, read one record, open a kvstore snapshot at that seq. The
head version is served by the latest snapshot. ``at_time(t)`` binary-searches
the records between the oldest retained version and the head by
``created_at`` (monotone by construction), then does the same. Neither
replays or scans history; reads through the view then cost what kvstore reads
at that seq cost.

Rollback, export and expiration live in :mod:`lakehouse.maintenance`.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import pyarrow as pa

import kvstore
from kvstore.clock import as_clock
from lakehouse import codec, commit, keys
from lakehouse.codec import QueuedFile
from lakehouse.commit import CommitOptions
from lakehouse.data.scan import ScanFile
from lakehouse.errors import (
    AlreadyExists,
    ClosedError,
    CorruptionError,
    DataFileMissing,
    FencedError,
    NotFound,
    ReadOnlyError,
    VersionExpired,
    WriterActive,
    one_hierarchy,
    storage_errors_name_url,
    translated,
)
from lakehouse.layout import Layout, refuse_foreign
from lakehouse.model import (
    DataFile,
    Isolation,
    LakehouseDef,
    MergeResult,
    TableStats,
    VersionInfo,
    check_name,
    named_ops,
    to_epoch_ms,
)
from lakehouse.options import Options
from lakehouse.pins import Pins
from lakehouse.records import RecordCache
from lakehouse.txn import Transaction
from lakehouse.view import LakehouseView

log = logging.getLogger("lakehouse")


@one_hierarchy
class Lakehouse:
    """An open lakehouse. Use :func:`lakehouse.open`."""

    def __init__(
        self, db: kvstore.DB, layout: Layout, options: Options, *, read_only: bool = False
    ) -> None:
        self._db = db
        self._read_only = read_only
        self._layout = layout
        self._data = layout.data
        self._options = options
        # one kvstore Clock gives time, sleeps and random bits (ids, jitter);
        # the older callable options still replace its wall clock and sleep
        self._kclock = as_clock(options.clock, options.seed)
        self._clock: Callable[[], float] = self._kclock.time
        self._sleep: Callable[[float], None] = options.sleep or self._kclock.sleep
        self._monotonic: Callable[[], float] = self._kclock.monotonic
        self._records = RecordCache()
        self._maintenance_lock = threading.Lock()
        #: data files written by transactions of this process that are still open
        self._inflight: set[str] = set()
        #: open views, transactions and streams: expiry keeps the files they read
        self._pins = Pins()
        self._file_seq = itertools.count(self._rng_bits(31))
        self._closed = False
        self._fence_logged = False
        #: test hook: called inside each commit attempt just before the kvstore commit
        self._before_kv_commit: Callable[[Transaction, int], None] | None = None
        self.definition = self._load_or_create()
        if not read_only:
            from lakehouse.maintenance import retry_pending_deletes

            retry_pending_deletes(self)

    # -- creation ---------------------------------------------------------------------
    def _load_or_create(self) -> LakehouseDef:
        db = self._db
        if db.get(keys.HEAD) is None:
            if self._read_only:
                raise NotFound(f"no lakehouse at {self._layout.label}")
            if next(iter(db.scan()), None) is not None:
                raise AlreadyExists(
                    f"{self._layout.label} holds a key-value store that is not a lakehouse; "
                    "refusing to write lakehouse keys beside its keys"
                )
            if not self._options.create:
                raise NotFound(f"no lakehouse at {self._layout.label}")
            o = self._options
            iso = o.default_isolation
            assert isinstance(iso, Isolation)
            now = self._now_ms()
            d = LakehouseDef(
                id=f"{self._rng_bits(128):032x}",
                max_name_length=o.max_name_length,
                default_isolation=iso,
                transaction_ttl=float(o.transaction_ttl),
                properties=dict(o.properties or {}),
                created_ms=now,
            )
            with db.transaction() as ktx:
                if ktx.get_for_update(keys.HEAD) is None:
                    ktx.put(keys.LAKEHOUSE_DEF, codec.encode_lakehouse(d))
                    root = VersionInfo(0, now, None, iso, "init", (), base_seq=ktx.read_seq)
                    ktx.put(keys.record_key(0), codec.encode_record(root))
                    ktx.put(keys.OLDEST, keys.encode_u64(0))
                    ktx.put(keys.HEAD, keys.encode_u64(0))
            log.info("created lakehouse %s at %s", d.id, self._layout.label)
        raw = db.get(keys.LAKEHOUSE_DEF)
        if raw is None:
            raise CorruptionError("the lakehouse has a head version but no definition")
        return codec.decode_lakehouse(raw)

    # -- small services for the other modules -----------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the lakehouse is closed")

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _oldest_now(self) -> int:
        """The oldest retained version as the store says now (a view that found a
        data file missing asks: was its version expired meanwhile?)."""
        raw = self._db.get(keys.OLDEST)
        return 0 if raw is None else keys.decode_u64(raw)

    def _rng_bits(self, n: int) -> int:
        return self._kclock.getrandbits(n)

    def _backoff(self, attempt: int) -> float:
        o = self._options
        jitter: float = self._kclock.random()
        return min(
            o.retry_max_delay, o.retry_base_delay * cast(float, 2 ** min(attempt - 1, 16))
        ) * (0.5 + jitter)

    def _record(self, version: int, get: Callable[[bytes], bytes | None]) -> VersionInfo:
        """Version record ``version`` (immutable once committed, hence cached)."""
        return self._records.get(version, get)

    def _remember(self, rec: VersionInfo) -> None:
        self._records.remember(rec)

    def _forget_before(self, version: int) -> None:
        self._records.forget_before(version)

    @staticmethod
    def _u64(snap: kvstore.Snapshot, key: bytes, default: int | None = None) -> int:
        raw = snap.get(key)
        if raw is None:
            if default is not None:
                return default
            raise CorruptionError(f"key {key!r} is missing")
        return keys.decode_u64(raw)

    # -- public API ----------------------------------------------------------------------------
    @property
    def version(self) -> int:
        """The latest committed version (0 for a new lakehouse)."""
        self._check_open()
        raw = self._db.get(keys.HEAD)
        assert raw is not None
        return keys.decode_u64(raw)

    @property
    def oldest_version(self) -> int:
        """The oldest version still readable (raised by :meth:`expire_versions`)."""
        self._check_open()
        raw = self._db.get(keys.OLDEST)
        return 0 if raw is None else keys.decode_u64(raw)

    @property
    def url(self) -> str:
        return self._layout.label

    def begin(
        self,
        isolation: Isolation | None = None,
        *,
        app_id: str | None = None,
        app_version: int | None = None,
    ) -> Transaction:
        """Begin a transaction at the latest version (default isolation: the lakehouse's).

        ``app_id``/``app_version`` make the commit idempotent: if ``app_id``
        already recorded an ``app_version`` at least this one, the commit
        writes nothing and returns the version that recorded it.
        """
        self._check_open()
        if isolation is None:
            isolation = self.definition.default_isolation
        elif not isinstance(isolation, Isolation):
            raise TypeError(
                f"isolation must be a lakehouse.Isolation, not {type(isolation).__name__}"
            )
        if (app_id is None) != (app_version is None):
            raise TypeError("give app_id and app_version together")
        if app_id is not None:
            check_name(app_id, "app_id", self.definition.max_name_length)
            if isinstance(app_version, bool) or not isinstance(app_version, int):
                raise TypeError("app_version must be an int")
            if app_version < 0:
                raise ValueError(f"app_version must be >= 0, got {app_version}")
        txn_id = f"{self._rng_bits(64):016x}"
        with self._pins.lock:  # snapshot and pin together (see lakehouse.pins)
            snap = self._db.snapshot()
            version = self._u64(snap, keys.HEAD)
            txn = Transaction(
                self, snap, version, isolation, txn_id, app_id, app_version or 0, pins=self._pins
            )
        return txn

    def _commit(self, txn: Transaction, options: CommitOptions) -> int:
        """Run the commit protocol for ``txn`` (see :mod:`lakehouse.commit`)."""
        try:
            return commit.run(self, txn, options)
        except kvstore.FencedError as exc:
            raise self._fenced(exc) from exc

    def _fenced(self, exc: kvstore.FencedError) -> FencedError:
        """What a fenced commit means for the data, said plainly (logged once per handle)."""
        try:
            kept = f"Versions up to {self.version} are kept (the other writer has them)"
        except Exception:  # the store cannot even be read: say only what is certain
            kept = "Every version committed before the takeover is kept"
        msg = (
            f"lakehouse {self._layout.label}: another writer took over, so this handle is "
            f"fenced. {kept}; this transaction was not committed and nothing of it is "
            "visible. This handle can no longer commit: close it and open the lakehouse "
            f"again to write (that fences the other writer in turn). ({exc})"
        )
        if not self._fence_logged:
            self._fence_logged = True
            log.warning("%s", msg)
        return FencedError(msg)

    # -- one-call writes: each is one transaction, begun and committed here ---------------
    def append(self, table: str, data: Any) -> int:
        """``txn.append`` in a transaction of its own, committed; returns rows added."""
        with self.begin() as txn:
            return txn.append(table, data)

    def overwrite(self, table: str, data: Any, *, where: Any = None) -> int:
        """``txn.overwrite`` in a transaction of its own, committed; returns rows written."""
        with self.begin() as txn:
            return txn.overwrite(table, data, where=where)

    def delete(self, table: str, where: Any) -> int:
        """``txn.delete`` in a transaction of its own, committed; returns rows deleted."""
        with self.begin() as txn:
            return txn.delete(table, where)

    def update(self, table: str, where: Any, values: Mapping[str, Any]) -> int:
        """``txn.update`` in a transaction of its own, committed; returns rows updated."""
        with self.begin() as txn:
            return txn.update(table, where, values)

    def merge(self, table: str, data: Any, on: Sequence[str] | str, **kw: Any) -> MergeResult:
        """``txn.merge`` (``when_matched=``, ``when_not_matched=``) in a transaction of its
        own, committed; returns its :class:`MergeResult`."""
        with self.begin() as txn:
            return txn.merge(table, data, on, **kw)

    def app_version(self, app_id: str) -> int | None:
        """The latest ``app_version`` recorded by idempotent writer ``app_id`` (or None)."""
        self._check_open()
        limit = self.definition.max_name_length  # as begin(app_id=...) checks it
        raw = self._db.get(keys.app_key(check_name(app_id, "app_id", limit)))
        return None if raw is None else codec.decode_app(raw)[0]

    # -- table data at the latest version ---------------------------------------------------
    def _head_view(self) -> LakehouseView:
        with self._pins.lock:
            snap = self._db.snapshot()
            return self._make_view(snap, self._u64(snap, keys.HEAD))

    def _make_view(self, snap: Any, version: int) -> LakehouseView:
        """A view of ``version`` over ``snap`` (consumed: the view closes it), pinned
        against expiry; the caller holds ``self._pins.lock`` since it took ``snap``."""
        view = LakehouseView(
            snap,
            version,
            self.definition.max_name_length,
            self._check_open,
            self._data,
            self._layout.data_url,
            self._oldest_now,
            self._pins,
        )
        return view

    def read(self, table: str, *, columns: Any = None, where: Any = None) -> pa.Table:
        """The table's rows at the latest version (see :meth:`LakehouseView.read`)."""
        self._check_open()
        with self._head_view() as v:
            return v.read(table, columns=columns, where=where)

    def scan_batches(
        self, table: str, *, columns: Any = None, where: Any = None
    ) -> pa.RecordBatchReader:
        """The rows at the latest version, streamed one data file at a time."""
        self._check_open()
        v = self._head_view()
        try:
            reader = v.scan_batches(table, columns=columns, where=where)
        finally:
            v.close()  # the plan is fixed; files are immutable
        return reader

    def table_stats(self, table: str) -> TableStats:
        self._check_open()
        with self._head_view() as v:
            return v.table_stats(table)

    def list_data_files(self, table: str) -> list[DataFile]:
        self._check_open()
        with self._head_view() as v:
            return v.list_data_files(table)

    def scan_plan(self, table: str) -> list[ScanFile]:
        self._check_open()
        with self._head_view() as v:
            return v.scan_plan(table)

    def describe_table(self, table: str) -> Any:
        self._check_open()
        with self._head_view() as v:
            return v.describe_table(table)

    def _at_head(name: str) -> Any:  # type: ignore[misc]
        def call(self: Lakehouse, *args: Any, **kwargs: Any) -> Any:
            self._check_open()
            with self._head_view() as v:
                return getattr(v, name)(*args, **kwargs)

        call.__name__ = name
        call.__doc__ = f"``{name}`` at the latest version (see :class:`LakehouseView`)."
        return call

    list_namespaces = _at_head("list_namespaces")
    list_tables = _at_head("list_tables")
    list_views = _at_head("list_views")
    describe_namespace = _at_head("describe_namespace")
    describe_view = _at_head("describe_view")
    namespace_exists = _at_head("namespace_exists")
    table_exists = _at_head("table_exists")
    view_exists = _at_head("view_exists")
    del _at_head

    def data_location(self) -> tuple[str, dict[str, Any]]:
        """Base URL of the data directory and the fsspec options to reach it."""
        if self._layout.data_url is None:
            raise TypeError("this lakehouse was opened on a store instance; its data has no URL")
        return self._layout.data_url, dict(self._options.storage_options)

    def changes(self, table: str, start_version: int, end_version: int | None = None) -> pa.Table:
        """Rows whose visible state versions ``start_version..end_version`` (inclusive)
        changed, with ``_change_type`` ("insert", "delete", "update_preimage",
        "update_postimage") and ``_version`` columns (docs/lakehouse.md, "The change feed")."""
        from lakehouse.data.changes import changes

        try:
            return changes(self, table, start_version, end_version)
        except DataFileMissing as exc:  # the feed reads files of versions start - 1 .. end
            oldest = self._oldest_now()
            if isinstance(start_version, int) and start_version - 1 < oldest:
                raise VersionExpired(
                    f"versions before {oldest} expired while the change feed from version "
                    f"{start_version} read them; data file {exc.path or '(unnamed)'} was deleted"
                ) from exc
            raise

    def remove_orphan_files(self, *, older_than: Any = None) -> list[str]:
        """Delete data files no retained version references, older than ``older_than``
        (a ``timedelta``, default 1 hour); returns their paths. Files of expired
        versions still in their grace period are not orphans (see expire_versions)."""
        from lakehouse.maintenance import remove_orphan_files

        return remove_orphan_files(self, older_than=older_than)

    def pending_deletions(self) -> list[QueuedFile]:
        """The data files of expired versions queued for deletion, each with the time
        it was queued and its grace (``.path``, ``.since_ms``, ``.grace_ms``,
        ``.due_ms``): see :meth:`expire_versions`."""
        from lakehouse.maintenance import deletion_queue

        self._check_open()
        return deletion_queue(self._db)

    def at_version(self, version: int) -> LakehouseView:
        """Read-only view of the whole lakehouse at ``version`` (FOR SYSTEM_VERSION AS OF)."""
        self._check_open()
        if isinstance(version, bool) or not isinstance(version, int):
            raise TypeError(f"version must be an int, not {type(version).__name__}")
        if version < 0:
            raise ValueError(f"version must be >= 0, got {version}")
        with self._pins.lock:
            return self._view(self._db.snapshot(), version)

    def _view(self, snap: kvstore.Snapshot, version: int) -> LakehouseView:
        """A view of ``version`` given a snapshot at the latest seq (consumed)."""
        try:
            head = self._u64(snap, keys.HEAD)
            oldest = self._u64(snap, keys.OLDEST, 0)
            if version > head:
                raise NotFound(f"version {version} does not exist; the latest is {head}")
            if version < oldest:
                raise VersionExpired(
                    f"version {version} has expired; the oldest retained version is {oldest}"
                )
            if version == head:
                return self._make_view(snap, version)
            seq = self._record(version + 1, snap.get).base_seq
        except BaseException:
            snap.close()
            raise
        snap.close()
        try:
            return self._make_view(self._db.snapshot(seq=seq), version)
        except kvstore.SnapshotTooOld:
            raise VersionExpired(f"version {version} has expired (kvstore seq {seq})") from None

    def at_time(self, ts: Any) -> LakehouseView:
        """View as of ``ts`` (aware ``datetime`` or epoch ms): the newest version
        created at or before it (FOR SYSTEM_TIME AS OF). Naive datetimes raise
        ValueError."""
        self._check_open()
        ms = to_epoch_ms(ts)
        with self._pins.lock:
            snap = self._db.snapshot()
            try:
                version = self._version_at(snap, ms)
            except BaseException:
                snap.close()
                raise
            return self._view(snap, version)

    def version_at(self, ts: Any) -> int:
        """The newest version created at or before ``ts`` (see :meth:`at_time`)."""
        self._check_open()
        with self._db.snapshot() as snap:
            return self._version_at(snap, to_epoch_ms(ts))

    def _version_at(self, snap: kvstore.Snapshot, ms: int) -> int:
        head = self._u64(snap, keys.HEAD)
        oldest = self._u64(snap, keys.OLDEST, 0)
        if ms < self.definition.created_ms:
            raise NotFound("the lakehouse did not exist yet at that time")
        if self._record(oldest, snap.get).created_ms > ms:
            raise VersionExpired(
                f"the version current at that time has expired (the oldest retained "
                f"version, {oldest}, was created later)"
            )
        lo, hi = oldest, head  # invariant: created(lo) <= ms
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._record(mid, snap.get).created_ms <= ms:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def version_info(self, version: int) -> VersionInfo:
        """The record of one retained version."""
        self._check_open()
        if isinstance(version, bool) or not isinstance(version, int):
            raise TypeError(f"version must be an int, not {type(version).__name__}")
        with self._db.snapshot() as snap:
            oldest = self._u64(snap, keys.OLDEST, 0)
            head = self._u64(snap, keys.HEAD)
            if version > head:
                raise NotFound(f"version {version} does not exist; the latest is {head}")
            if version < oldest:
                raise VersionExpired(f"version {version} has expired")
            return named_ops(self._record(version, snap.get))

    def history(self, *, limit: int | None = None) -> list[VersionInfo]:
        """Retained versions, newest first: what each changed, its isolation, rollback source."""
        self._check_open()
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise TypeError("limit must be an int or None")
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        out: list[VersionInfo] = []
        with self._db.snapshot() as snap:
            for k, v in snap.scan_prefix(keys.RECORD_PREFIX, reverse=True):
                if limit is not None and len(out) >= limit:
                    break
                version = keys.parse_record_key(k)
                rec = self._records.peek(version)
                if rec is None:
                    rec = codec.decode_record(v)
                    self._remember(rec)
                out.append(named_ops(rec))
        return out

    def rollback(self, to_version: int) -> int:
        """Roll forward: commit a new version whose state equals ``to_version``."""
        from lakehouse.maintenance import rollback

        return rollback(self, to_version)

    def export(
        self, dest_url: Any, *, version: int | None = None, kind: str = "full"
    ) -> dict[str, Any]:
        """Write ``version`` (default: latest) as a new lakehouse at ``dest_url``.

        ``kind="full"`` copies every data file the version references;
        ``"minimal"`` copies only the metadata (data files are then referenced
        at their original location). Returns a summary dict.
        """
        from lakehouse.maintenance import export

        return export(self, dest_url, version=version, kind=kind, open_lakehouse=open)

    def expire_versions(
        self,
        *,
        keep_last: int | None = None,
        older_than: Any = None,
        grace: Any = None,
        compact: bool = True,
    ) -> int:
        """Drop old versions; the data files only they reference are deleted once
        ``grace`` (a ``timedelta``, default 1 hour) has passed. Returns the oldest
        retained version. See :func:`lakehouse.maintenance.expire_versions`."""
        from lakehouse.maintenance import expire_versions

        return expire_versions(
            self, keep_last=keep_last, older_than=older_than, grace=grace, compact=compact
        )

    def stats(self) -> dict[str, Any]:
        self._check_open()
        return {
            "version": self.version,
            "oldest_version": self.oldest_version,
            "kvstore": self._db.stats(),
        }

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._db.close()

    def __enter__(self) -> Lakehouse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"version {self.version}"
        return f"<lakehouse.Lakehouse {self._layout.label} {state}>"


@storage_errors_name_url
def open(url: Any, **options: Any) -> Lakehouse:
    """Open (creating if missing) the lakehouse at ``url``.

    ``url``: a local directory, ``file:///abs/dir``, ``memory://name``,
    ``s3://bucket/prefix`` (with ``storage_options=``) or a kvstore
    ``ObjectStore`` instance. Options are those of
    :class:`lakehouse.options.Options`; unknown names raise TypeError.
    """
    from lakehouse.layout import exists, resolve

    opts = Options.from_kwargs(options)
    refuse_foreign(url, opts.storage_options)
    if not opts.create and not exists(url, opts.storage_options):
        raise NotFound(f"no lakehouse at {url}")
    layout = resolve(url, opts.storage_options, opts.data_store)
    kv = dict(opts.kv_options)
    if opts.storage_options and "storage_options" not in kv:
        kv["storage_options"] = opts.storage_options
    if opts.takeover:
        kv["takeover"] = True
    if isinstance(opts.clock, kvstore.Clock) and "clock" not in kv:
        kv["clock"] = opts.clock  # one clock for the whole run
    try:
        db = kvstore.open(layout.meta, retention="all", **kv)
    except kvstore.WriterActive as exc:
        msg = str(exc).replace("kvstore.open_reader", "lakehouse.open_reader")
        msg = msg.replace(str(layout.meta), str(layout.label))
        raise WriterActive(msg.replace("(CLI: --takeover)", "(lakehouse CLI: --takeover)")) from exc
    except kvstore.KvError as exc:
        raise translated(exc) from exc
    try:
        return Lakehouse(db, layout, opts)
    except BaseException:
        try:
            db.close()
        except Exception:
            pass
        raise


@storage_errors_name_url
def open_reader(url: Any, **options: Any) -> LakehouseReader:
    """Open a read-only view of the lakehouse at ``url`` that another process may be
    writing. It never fences that writer; :meth:`LakehouseReader.refresh` moves it to
    the latest durable version. Options: ``storage_options``, ``data_store``,
    ``refresh_interval`` (seconds: refresh by itself when older), ``kv_options``."""
    from lakehouse.layout import exists, resolve

    interval = options.pop("refresh_interval", None)
    opts = Options.from_kwargs(options)
    refuse_foreign(url, opts.storage_options)
    if not exists(url, opts.storage_options):
        raise NotFound(f"no lakehouse at {url}")
    layout = resolve(url, opts.storage_options, opts.data_store, create=False)
    kv = dict(opts.kv_options)
    if opts.storage_options and "storage_options" not in kv:
        kv["storage_options"] = opts.storage_options
    try:
        reader = kvstore.open_reader(layout.meta, refresh_interval=interval, **kv)
    except kvstore.KvError as exc:
        raise translated(exc) from exc
    return LakehouseReader(reader, layout, opts)


@one_hierarchy
class LakehouseReader(Lakehouse):
    """A read-only lakehouse (see :func:`open_reader`): the read calls, ``version``,
    ``history``, ``at_version``/``at_time``, ``refresh`` and ``close``."""

    def __init__(self, reader: Any, layout: Layout, options: Options) -> None:
        super().__init__(reader, layout, options, read_only=True)

    def refresh(self) -> int:
        """Load what the writer has made durable since; returns the latest version."""
        self._check_open()
        self._db.refresh()  # type: ignore[attr-defined]  # a kvstore Reader
        if self._layout.data_missing:  # opened before the writer made data/: look again
            from lakehouse.layout import resolve

            layout = resolve(self._layout.label, self._options.storage_options, create=False)
            if not layout.data_missing:
                self._layout, self._data = layout, layout.data
        return self.version

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise ReadOnlyError(
            "this is a read-only lakehouse reader; open the lakehouse with lakehouse.open to write"
        )

    begin = rollback = expire_versions = remove_orphan_files = _refuse
    append = overwrite = delete = update = merge = _refuse

    def _oldest_now(self) -> int:
        self._db.refresh()  # type: ignore[attr-defined]  # the writer may have expired more
        return super()._oldest_now()

    def stats(self) -> dict[str, Any]:
        self._check_open()
        return {
            "version": self.version,
            "oldest_version": self.oldest_version,
            "kvstore": {"last_seq": self._db.last_seq, "read_only": True},
        }

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"version {self.version}"
        return f"<lakehouse.LakehouseReader {self._layout.label} {state}>"
