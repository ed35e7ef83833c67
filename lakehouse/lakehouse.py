"""The :class:`Lakehouse`: the writer. Open, begin, commit, maintenance.

A facade over one :class:`~lakehouse.context.Context`: the read calls come
from :class:`~lakehouse.surface.LakehouseReads` (shared with
:class:`~lakehouse.LakehouseReader`); this module adds transactions, the
one-call writes and maintenance. Rollback, export and expiration live in
:mod:`lakehouse.maintenance`; the commit protocol in :mod:`lakehouse.commit`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import kvstore
from lakehouse import codec, commit, keys
from lakehouse.autocompact import AutoCompactor
from lakehouse.context import Context
from lakehouse.errors import (
    AlreadyExists,
    CorruptionError,
    FencedError,
    NotFound,
    WriterActive,
    one_hierarchy,
    storage_errors_name_url,
    translated,
)
from lakehouse.intent import CommitOptions, CommitOutcome, TxnIntent
from lakehouse.layout import Layout, refuse_foreign
from lakehouse.model import (
    Isolation,
    LakehouseDef,
    MergeResult,
    VersionInfo,
    check_name,
)
from lakehouse.options import Options
from lakehouse.surface import LakehouseReads
from lakehouse.txn import Transaction

log = logging.getLogger("lakehouse")


@one_hierarchy
class Lakehouse(LakehouseReads):
    """An open lakehouse. Use :func:`lakehouse.open`."""

    def __init__(self, db: kvstore.DB, layout: Layout, options: Options) -> None:
        self._ctx = ctx = Context(db, layout, options, read_only=False)
        self._fence_logged = False
        #: compacts partitions with many small files after commits (lakehouse.autocompact)
        self._auto = AutoCompactor(self.begin)
        ctx.definition = self._load_or_create()
        from lakehouse.maintenance import retry_pending_deletes

        retry_pending_deletes(ctx)

    # -- creation ---------------------------------------------------------------------
    def _load_or_create(self) -> LakehouseDef:
        ctx = self._ctx
        db = ctx.db
        if db.get(keys.HEAD) is None:
            if next(iter(db.scan()), None) is not None:
                raise AlreadyExists(
                    f"{ctx.layout.label} holds a key-value store that is not a lakehouse; "
                    "refusing to write lakehouse keys beside its keys"
                )
            if not ctx.options.create:
                raise NotFound(f"no lakehouse at {ctx.layout.label}")
            o = ctx.options
            iso = o.default_isolation
            assert isinstance(iso, Isolation)
            now = ctx.now_ms()
            d = LakehouseDef(
                id=f"{ctx.rng_bits(128):032x}",
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
            log.info("created lakehouse %s at %s", d.id, ctx.layout.label)
        raw = db.get(keys.LAKEHOUSE_DEF)
        if raw is None:
            raise CorruptionError("the lakehouse has a head version but no definition")
        return codec.decode_lakehouse(raw)

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
        ctx = self._ctx
        ctx.check_open()
        if isolation is None:
            isolation = ctx.definition.default_isolation
        elif not isinstance(isolation, Isolation):
            raise TypeError(
                f"isolation must be a lakehouse.Isolation, not {type(isolation).__name__}"
            )
        if (app_id is None) != (app_version is None):
            raise TypeError("give app_id and app_version together")
        if app_id is not None:
            check_name(app_id, "app_id", ctx.name_limit)
            if isinstance(app_version, bool) or not isinstance(app_version, int):
                raise TypeError("app_version must be an int")
            if app_version < 0:
                raise ValueError(f"app_version must be >= 0, got {app_version}")
        txn_id = f"{ctx.rng_bits(64):016x}"
        with ctx.pins.lock:  # snapshot and pin together (see lakehouse.pins)
            snap = ctx.db.snapshot()
            version = ctx.u64(snap, keys.HEAD)
            txn = Transaction(
                ctx,
                snap,
                version,
                isolation,
                txn_id,
                app_id,
                app_version or 0,
                pins=ctx.pins,
                commit=self._commit,
            )
        return txn

    def _commit(self, intent: TxnIntent, options: CommitOptions) -> CommitOutcome:
        """Run the commit protocol for a transaction's intent (see :mod:`lakehouse.commit`),
        with the testing injection point of :attr:`Options.commit_hook`; a fenced commit's
        error says what it means for the data."""
        hook = self._ctx.options.commit_hook
        if hook is not None:
            options = dataclasses.replace(options, hook=hook)
        outcome = commit.run(self._ctx, intent, options)
        if outcome.created and outcome.error is None and intent.table_writes:
            self._auto.note(intent)
        exc = outcome.error
        if isinstance(exc, kvstore.FencedError):
            fenced = self._fenced(exc)
            fenced.__cause__ = exc  # as ``raise fenced from exc``
            fenced.__suppress_context__ = True
            return dataclasses.replace(outcome, error=fenced)
        return outcome

    def _fenced(self, exc: kvstore.FencedError) -> FencedError:
        """What a fenced commit means for the data, said plainly (logged once per handle)."""
        try:
            kept = f"Versions up to {self.version} are kept (the other writer has them)"
        except Exception:  # the store cannot even be read: say only what is certain
            kept = "Every version committed before the takeover is kept"
        msg = (
            f"lakehouse {self.url}: another writer took over, so this handle is "
            f"fenced. {kept}; this transaction was not committed and nothing of it is "
            "visible. This handle can no longer commit: close it and open the lakehouse "
            f"again to write (that fences the other writer in turn). ({exc})"
        )
        if not self._fence_logged:
            self._fence_logged = True
            log.warning("%s", msg)
        return FencedError(msg)

    # -- automatic compaction -------------------------------------------------------------
    def wait_for_compaction(self, timeout: float | None = None) -> bool:
        """Block until no automatic compaction is queued or running; False if
        ``timeout`` (seconds) passed first. A testing aid: it makes the table's
        files after a series of commits deterministic (see
        :mod:`lakehouse.autocompact`)."""
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float))
        ):
            raise TypeError("timeout must be a number of seconds or None")
        return self._auto.wait(timeout)

    def close(self) -> None:
        """Stop automatic compaction (a compaction in progress is abandoned and rolled
        back), then close the lakehouse."""
        self._auto.close()
        super().close()

    # -- one-call writes: each is one transaction, begun and committed here ---------------
    def append(self, table: str, data: Any) -> int:
        """``txn.append`` in a transaction of its own, committed; returns rows added."""
        with self.begin() as txn:
            return txn.append(table, data)

    def overwrite(self, table: str, data: Any, *, where: Any = None) -> int:
        """``txn.overwrite`` in a transaction of its own, committed; returns rows written."""
        with self.begin() as txn:
            return txn.overwrite(table, data, where=where)

    def replace_partitions(self, table: str, data: Any) -> int:
        """``txn.replace_partitions`` in a transaction of its own, committed; returns
        rows written."""
        with self.begin() as txn:
            return txn.replace_partitions(table, data)

    def delete(self, table: str, where: Any) -> int:
        """``txn.delete`` in a transaction of its own, committed; returns rows deleted."""
        with self.begin() as txn:
            return txn.delete(table, where)

    def update(self, table: str, where: Any, values: Mapping[str, Any]) -> int:
        """``txn.update`` in a transaction of its own, committed; returns rows updated."""
        with self.begin() as txn:
            return txn.update(table, where, values)

    def merge(
        self, table: str, data: Any, on: Sequence[str] | str | None = None, **kw: Any
    ) -> MergeResult:
        """``txn.merge`` (``when_matched=``, ``when_not_matched=``) in a transaction of its
        own, committed; returns its :class:`MergeResult`."""
        with self.begin() as txn:
            return txn.merge(table, data, on, **kw)

    def remove_orphan_files(self, *, older_than: Any = None) -> list[str]:
        """Delete data files no retained version references, older than ``older_than``
        (a ``timedelta``, default 1 hour); returns their paths. Files of expired
        versions still in their grace period are not orphans (see expire_versions)."""
        from lakehouse.maintenance import remove_orphan_files

        return remove_orphan_files(self._ctx, older_than=older_than)

    def rollback(self, to_version: int) -> int:
        """Roll forward: commit a new version whose state equals ``to_version``."""
        from lakehouse.maintenance import rollback

        return rollback(self._ctx, self.begin, to_version)

    def _opener(self) -> Callable[..., Any]:
        return open

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
            self._ctx, keep_last=keep_last, older_than=older_than, grace=grace, compact=compact
        )


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
