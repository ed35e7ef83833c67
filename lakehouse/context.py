"""The open lakehouse's shared parts, as one object with public names.

A :class:`~lakehouse.Lakehouse` (or :class:`~lakehouse.LakehouseReader`) is a
facade over one :class:`Context`; its transactions, the commit protocol,
views, the data operations and maintenance are handed the context, never the
facade, and use only what is named here::

    Lakehouse / LakehouseReader (facades: argument checks, public calls)
        │ owns
        ▼
    Context ── db (kvstore DB or Reader), layout / data (object stores), options
            ── clock: now_ms, monotonic, sleep, backoff, rng_bits (one kvstore Clock)
            ── records (version-record cache), pins (what expiry keeps),
               inflight (files of open transactions), file names
            ── versions: head / oldest, views at a version (time travel)

It implements :class:`lakehouse.intent.CommitServices`. Nothing in it is user
API; it sits below the facades and above the formats.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any, cast

import kvstore
from kvstore.clock import as_clock
from kvstore.objstore import ObjectStore
from lakehouse import keys
from lakehouse.data import files as datafiles
from lakehouse.errors import ClosedError, CorruptionError, NotFound, VersionExpired
from lakehouse.layout import Layout
from lakehouse.model import LakehouseDef, VersionInfo, named_ops
from lakehouse.options import Options
from lakehouse.pins import Pins
from lakehouse.records import RecordCache
from lakehouse.view import LakehouseView

log = logging.getLogger("lakehouse")


class Context:
    """What every part of one open lakehouse shares (see the module docstring)."""

    def __init__(self, db: Any, layout: Layout, options: Options, *, read_only: bool) -> None:
        #: the kvstore: a ``kvstore.DB`` for a writer, a ``kvstore.Reader`` for a reader
        self.db: kvstore.DB = db
        self.layout = layout
        self.options = options
        self.read_only = read_only
        # one kvstore Clock gives time, sleeps and random bits (ids, jitter);
        # the older callable options still replace its wall clock and sleep
        self._clock = as_clock(options.clock, options.seed)
        self._wall: Callable[[], float] = self._clock.time
        self._sleep: Callable[[float], None] = options.sleep or self._clock.sleep
        #: decoded version records (immutable once committed)
        self.records = RecordCache()
        #: held while rollback / expiry / orphan removal run
        self.maintenance_lock = threading.Lock()
        #: data files written by transactions of this process that are still open
        self.inflight: set[str] = set()
        #: open views, transactions and streams: expiry keeps the files they read
        self.pins = Pins()
        self._file_seq = itertools.count(self.rng_bits(31))
        self.closed = False
        #: the lakehouse definition (set once the facade has loaded or created it)
        self.definition: LakehouseDef

    # -- configuration ---------------------------------------------------------------
    @property
    def data(self) -> ObjectStore:
        """The data directory's store (data files are relative paths in it)."""
        return self.layout.data

    @property
    def transaction_ttl(self) -> float:
        return self.definition.transaction_ttl

    @property
    def commit_retries(self) -> int:
        return self.options.commit_retries

    @property
    def durable(self) -> bool:
        return self.options.durable

    @property
    def name_limit(self) -> int:
        return self.definition.max_name_length

    def check_open(self) -> None:
        if self.closed:
            raise ClosedError("the lakehouse is closed")

    # -- time and entropy ------------------------------------------------------------------
    def now_ms(self) -> int:
        return int(self._wall() * 1000)

    def monotonic(self) -> float:
        return self._clock.monotonic()

    def sleep(self, seconds: float) -> None:
        self._sleep(seconds)

    def rng_bits(self, n: int) -> int:
        return self._clock.getrandbits(n)

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after losing commit race ``attempt`` (jittered, exponential)."""
        o = self.options
        jitter: float = self._clock.random()
        return min(
            o.retry_max_delay, o.retry_base_delay * cast(float, 2 ** min(attempt - 1, 16))
        ) * (0.5 + jitter)

    def new_file_name(self, table_id: str) -> tuple[str, str]:
        """A fresh (file id, relative path) for a new data file of table ``table_id``."""
        # high 32 bits: a per-process counter, so files written in the same
        # millisecond still sort (and read) in the order they were written
        bits = (next(self._file_seq) & 0xFFFFFFFF) << 32 | self.rng_bits(32)
        return datafiles.file_path(table_id, self.now_ms(), bits)

    # -- version records ----------------------------------------------------------------------
    def record(self, version: int, get: Callable[[bytes], bytes | None]) -> VersionInfo:
        """Version record ``version`` (immutable once committed, hence cached)."""
        return self.records.get(version, get)

    def remember(self, rec: VersionInfo) -> None:
        self.records.remember(rec)

    def forget_before(self, version: int) -> None:
        self.records.forget_before(version)

    # -- versions ------------------------------------------------------------------------------
    @staticmethod
    def u64(snap: Any, key: bytes, default: int | None = None) -> int:
        """An unsigned counter key (head, oldest) read through ``snap``."""
        raw = snap.get(key)
        if raw is None:
            if default is not None:
                return default
            raise CorruptionError(f"key {key!r} is missing")
        return keys.decode_u64(raw)

    def head(self) -> int:
        """The latest committed version the store shows now."""
        return self.u64(self.db, keys.HEAD)

    def oldest(self) -> int:
        """The oldest retained version the store shows now."""
        return self.u64(self.db, keys.OLDEST, 0)

    def oldest_now(self) -> int:
        """The oldest retained version as the store says now (a view that found a data
        file missing asks: was its version expired meanwhile?). A reader first loads
        what the writer has made durable since."""
        if self.read_only:
            self.db.refresh()  # type: ignore[attr-defined]  # a kvstore Reader
        return self.oldest()

    def make_view(self, snap: Any, version: int) -> LakehouseView:
        """A view of ``version`` over ``snap`` (consumed: the view closes it), pinned
        against expiry; the caller holds ``self.pins.lock`` since it took ``snap``."""
        return LakehouseView(
            snap,
            version,
            self.name_limit,
            self.check_open,
            self.data,
            self.layout.data_url,
            self.oldest_now,
            self.pins,
        )

    def head_view(self) -> LakehouseView:
        """A view of the latest version."""
        with self.pins.lock:
            snap = self.db.snapshot()
            return self.make_view(snap, self.u64(snap, keys.HEAD))

    def at_version(self, version: int) -> LakehouseView:
        """A view of ``version`` (NotFound past the head, VersionExpired before the oldest)."""
        if isinstance(version, bool) or not isinstance(version, int):
            raise TypeError(f"version must be an int, not {type(version).__name__}")
        if version < 0:
            raise ValueError(f"version must be >= 0, got {version}")
        with self.pins.lock:
            return self.view(self.db.snapshot(), version)

    def view(self, snap: kvstore.Snapshot, version: int) -> LakehouseView:
        """A view of ``version`` given a snapshot at the latest seq (consumed)."""
        try:
            head = self.u64(snap, keys.HEAD)
            oldest = self.u64(snap, keys.OLDEST, 0)
            if version > head:
                raise NotFound(f"version {version} does not exist; the latest is {head}")
            if version < oldest:
                raise VersionExpired(
                    f"version {version} has expired; the oldest retained version is {oldest}"
                )
            if version == head:
                return self.make_view(snap, version)
            seq = self.record(version + 1, snap.get).base_seq
        except BaseException:
            snap.close()
            raise
        snap.close()
        try:
            return self.make_view(self.db.snapshot(seq=seq), version)
        except kvstore.SnapshotTooOld:
            raise VersionExpired(f"version {version} has expired (kvstore seq {seq})") from None

    def version_info(self, version: int) -> VersionInfo:
        """The record of retained version ``version``, its data changes named by
        operation (NotFound past the head, VersionExpired before the oldest)."""
        with self.db.snapshot() as snap:
            oldest = self.u64(snap, keys.OLDEST, 0)
            head = self.u64(snap, keys.HEAD)
            if version > head:
                raise NotFound(f"version {version} does not exist; the latest is {head}")
            if version < oldest:
                raise VersionExpired(f"version {version} has expired")
            return named_ops(self.record(version, snap.get))

    def version_at(self, snap: kvstore.Snapshot, ms: int) -> int:
        """The newest version created at or before epoch ``ms``, through ``snap``."""
        head = self.u64(snap, keys.HEAD)
        oldest = self.u64(snap, keys.OLDEST, 0)
        if ms < self.definition.created_ms:
            raise NotFound("the lakehouse did not exist yet at that time")
        if self.record(oldest, snap.get).created_ms > ms:
            raise VersionExpired(
                f"the version current at that time has expired (the oldest retained "
                f"version, {oldest}, was created later)"
            )
        lo, hi = oldest, head  # invariant: created(lo) <= ms
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.record(mid, snap.get).created_ms <= ms:
                lo = mid
            else:
                hi = mid - 1
        return lo
