"""The read surface of an open lakehouse, shared by the writer and readers.

:class:`LakehouseReads` holds a :class:`~lakehouse.context.Context` and gives
every call that only reads: the latest version's tables and rows (through a
view of the head), time travel, history, the change feed, export (it only
reads its source). :class:`lakehouse.Lakehouse` adds transactions and
maintenance; :class:`lakehouse.LakehouseReader` adds ``refresh``. Neither is
the other with calls switched off.

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
replays or scans history (:mod:`lakehouse.context` does both).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import pyarrow as pa

import kvstore
from kvstore.objstore import ObjectStore
from lakehouse import codec, keys
from lakehouse.codec import QueuedFile
from lakehouse.context import Context
from lakehouse.data.scan import ScanFile
from lakehouse.errors import DataFileMissing, VersionExpired
from lakehouse.model import (
    DataFile,
    LakehouseDef,
    TableStats,
    VersionInfo,
    check_name,
    named_ops,
    to_epoch_ms,
)
from lakehouse.reads import ReadOps
from lakehouse.view import LakehouseView

T = TypeVar("T")


class LakehouseReads:
    """The calls every open lakehouse answers (writer or reader)."""

    _ctx: Context

    # -- state ---------------------------------------------------------------------
    @property
    def definition(self) -> LakehouseDef:
        """The lakehouse's own settings (id, isolation default, TTL, properties)."""
        return self._ctx.definition

    @property
    def version(self) -> int:
        """The latest committed version (0 for a new lakehouse)."""
        self._ctx.check_open()
        return self._ctx.head()

    @property
    def oldest_version(self) -> int:
        """The oldest version still readable (raised by ``expire_versions``)."""
        self._ctx.check_open()
        return self._ctx.oldest()

    @property
    def url(self) -> str:
        return self._ctx.layout.label

    def app_version(self, app_id: str) -> int | None:
        """The latest ``app_version`` recorded by idempotent writer ``app_id`` (or None)."""
        self._ctx.check_open()
        limit = self._ctx.name_limit  # as begin(app_id=...) checks it
        raw = self._ctx.db.get(keys.app_key(check_name(app_id, "app_id", limit)))
        return None if raw is None else codec.decode_app(raw)[0]

    # -- table data at the latest version ---------------------------------------------
    def read(self, table: str, *, columns: Any = None, where: Any = None) -> pa.Table:
        """The table's rows at the latest version (see :meth:`LakehouseView.read`)."""
        self._ctx.check_open()
        with self._ctx.head_view() as v:
            return v.read(table, columns=columns, where=where)

    def scan_batches(
        self, table: str, *, columns: Any = None, where: Any = None
    ) -> pa.RecordBatchReader:
        """The rows at the latest version, streamed one data file at a time."""
        self._ctx.check_open()
        v = self._ctx.head_view()
        try:
            reader = v.scan_batches(table, columns=columns, where=where)
        finally:
            v.close()  # the plan is fixed; files are immutable
        return reader

    def table_stats(self, table: str) -> TableStats:
        return self._at_head(lambda v: v.table_stats(table))

    def list_data_files(self, table: str) -> list[DataFile]:
        return self._at_head(lambda v: v.list_data_files(table))

    def scan_plan(self, table: str, *, where: Any = None) -> list[ScanFile]:
        return self._at_head(lambda v: v.scan_plan(table, where=where))

    def describe_table(self, table: str) -> Any:
        return self._at_head(lambda v: v.describe_table(table))

    def _at_head(self, call: Callable[[LakehouseView], T]) -> T:
        self._ctx.check_open()
        with self._ctx.head_view() as v:
            return call(v)

    @staticmethod
    def _head_call(name: str) -> Any:
        def call(self: LakehouseReads, *args: Any, **kwargs: Any) -> Any:
            return self._at_head(lambda v: getattr(v, name)(*args, **kwargs))

        # the view's own signature and documentation (the surfaces are one API)
        functools.update_wrapper(call, getattr(ReadOps, name))
        return call

    list_namespaces = _head_call("list_namespaces")
    list_tables = _head_call("list_tables")
    list_views = _head_call("list_views")
    describe_namespace = _head_call("describe_namespace")
    describe_view = _head_call("describe_view")
    namespace_exists = _head_call("namespace_exists")
    table_exists = _head_call("table_exists")
    view_exists = _head_call("view_exists")
    file_states = _head_call("file_states")

    @property
    def data_url(self) -> str | None:
        """The URL of the data directory (None when opened on a store instance)."""
        return self._ctx.layout.data_url

    @property
    def kvstore(self) -> kvstore.DB:
        """The key-value store holding the lakehouse's metadata (a ``kvstore.DB``; a
        ``kvstore.Reader`` for a reader): for its ``stats()``, ``flush()`` and
        ``compact()``. Writing lakehouse keys through it bypasses every check of
        the commit protocol; tools and tests that simulate old or damaged metadata
        do, nothing else should."""
        return self._ctx.db

    @property
    def data_store(self) -> ObjectStore:
        """The data directory's object store (data-file paths are relative to it)."""
        return self._ctx.data

    def retained_data_files(self) -> set[str]:
        """Paths (in the data directory) of every data file a retained version
        references (``lakehouse verify`` checks them)."""
        from lakehouse.maintenance import retained_paths

        self._ctx.check_open()
        return retained_paths(self._ctx)[1]

    def data_location(self) -> tuple[str, dict[str, Any]]:
        """Base URL of the data directory and the fsspec options to reach it."""
        if self._ctx.layout.data_url is None:
            raise TypeError("this lakehouse was opened on a store instance; its data has no URL")
        return self._ctx.layout.data_url, dict(self._ctx.options.storage_options)

    def changes(self, table: str, start_version: int, end_version: int | None = None) -> pa.Table:
        """Rows whose visible state versions ``start_version..end_version`` (inclusive)
        changed, with ``_change_type`` ("insert", "delete", "update_preimage",
        "update_postimage") and ``_version`` columns (docs/lakehouse.md, "The change feed")."""
        from lakehouse.data.changes import changes

        self._ctx.check_open()
        try:
            return changes(self._ctx, table, start_version, end_version)
        except DataFileMissing as exc:  # the feed reads files of versions start - 1 .. end
            oldest = self._ctx.oldest_now()
            if isinstance(start_version, int) and start_version - 1 < oldest:
                raise VersionExpired(
                    f"versions before {oldest} expired while the change feed from version "
                    f"{start_version} read them; data file {exc.path or '(unnamed)'} was deleted"
                ) from exc
            raise

    def pending_deletions(self) -> list[QueuedFile]:
        """The data files of expired versions queued for deletion, each with the time
        it was queued and its grace (``.path``, ``.since_ms``, ``.grace_ms``,
        ``.due_ms``): see ``expire_versions``."""
        from lakehouse.maintenance import deletion_queue

        self._ctx.check_open()
        return deletion_queue(self._ctx.db)

    # -- time travel and history ----------------------------------------------------------
    def at_version(self, version: int) -> LakehouseView:
        """Read-only view of the whole lakehouse at ``version`` (FOR SYSTEM_VERSION AS OF)."""
        self._ctx.check_open()
        return self._ctx.at_version(version)

    def at_time(self, ts: Any) -> LakehouseView:
        """View as of ``ts`` (aware ``datetime`` or epoch ms): the newest version
        created at or before it (FOR SYSTEM_TIME AS OF). Naive datetimes raise
        ValueError."""
        self._ctx.check_open()
        ms = to_epoch_ms(ts)
        ctx = self._ctx
        with ctx.pins.lock:
            snap = ctx.db.snapshot()
            try:
                version = ctx.version_at(snap, ms)
            except BaseException:
                snap.close()
                raise
            return ctx.view(snap, version)

    def version_at(self, ts: Any) -> int:
        """The newest version created at or before ``ts`` (see :meth:`at_time`)."""
        self._ctx.check_open()
        with self._ctx.db.snapshot() as snap:
            return self._ctx.version_at(snap, to_epoch_ms(ts))

    def version_info(self, version: int) -> VersionInfo:
        """The record of one retained version."""
        ctx = self._ctx
        ctx.check_open()
        if isinstance(version, bool) or not isinstance(version, int):
            raise TypeError(f"version must be an int, not {type(version).__name__}")
        return ctx.version_info(version)

    def history(self, *, limit: int | None = None) -> list[VersionInfo]:
        """Retained versions, newest first: what each changed, its isolation, rollback source."""
        ctx = self._ctx
        ctx.check_open()
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise TypeError("limit must be an int or None")
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        out: list[VersionInfo] = []
        with ctx.db.snapshot() as snap:
            for k, v in snap.scan_prefix(keys.RECORD_PREFIX, reverse=True):
                if limit is not None and len(out) >= limit:
                    break
                version = keys.parse_record_key(k)
                rec = ctx.records.peek(version)
                if rec is None:
                    rec = codec.decode_record(v)
                    ctx.remember(rec)
                out.append(named_ops(rec))
        return out

    def export(
        self, dest_url: Any, *, version: int | None = None, kind: str = "full"
    ) -> dict[str, Any]:
        """Write ``version`` (default: latest) as a new lakehouse at ``dest_url``.

        ``kind="full"`` copies every data file the version references;
        ``"minimal"`` copies only the metadata (data files are then referenced
        at their original location). Returns a summary dict.
        """
        from lakehouse.maintenance import export

        return export(
            self._ctx, dest_url, version=version, kind=kind, open_lakehouse=self._opener()
        )

    def _opener(self) -> Callable[..., Any]:
        """``lakehouse.open`` (export creates its destination with it; it lives above)."""
        raise NotImplementedError

    # -- lifetime ------------------------------------------------------------------------------
    def _kv_stats(self) -> dict[str, Any]:
        return dict(self._ctx.db.stats())

    def stats(self) -> dict[str, Any]:
        self._ctx.check_open()
        return {
            "version": self.version,
            "oldest_version": self.oldest_version,
            "kvstore": self._kv_stats(),
        }

    def close(self) -> None:
        if not self._ctx.closed:
            self._ctx.closed = True
            self._ctx.db.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._ctx.closed else f"version {self.version}"
        return f"<lakehouse.{type(self).__name__} {self.url} {state}>"
