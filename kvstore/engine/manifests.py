"""The manifest writer: the current manifest, advancing it, and fencing.

A manifest is created with ``put_if_absent`` at ``id + 1`` (see
:mod:`kvstore.manifest_store`); flush, compaction, checkpoints and retention
all advance it through :meth:`ManifestWriter.advance`, which computes the
change under the manifest lock. A create whose outcome is unclear is
resolved by reading the bytes back; when nothing can tell, the handle stops
(:meth:`kvstore.engine.health.Health.stop`).

Fencing: a new writer claims manifest ``id + 1`` with a higher writer epoch
and then raises the *epoch cell* (a memory-mapped counter beside a local
WAL). :meth:`ManifestWriter.fence_check` reads the cell where there is one
(a value at or below our epoch proves no newer writer has read our WAL),
else probes for manifest ``id + 1`` (GC keeps claims, so one probe is
enough), and confirms with the latest manifest before raising
:class:`~kvstore.errors.FencedError`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from kvstore import paths
from kvstore.clock import Clock
from kvstore.engine.health import Health
from kvstore.engine.sstfiles import SstFiles
from kvstore.errors import CorruptionError, FencedError
from kvstore.format.manifest import Manifest
from kvstore.manifest_store import ManifestStore
from kvstore.objstore import DurabilityUnknown, ObjectStore

log = logging.getLogger("kvstore")


class ManifestWriter:
    def __init__(
        self,
        store: ObjectStore,
        health: Health,
        files: SstFiles,
        clock: Clock,
        *,
        epoch_cell: Any = None,
        fence_interval: float = 0.0,
    ) -> None:
        self.store = store
        self.mstore = ManifestStore(store)
        self._health = health
        self._files = files
        self._clock = clock
        self.lock = threading.RLock()
        self.current = Manifest(id=0, writer_epoch=0)  # set by recovery
        self.epoch = 0
        self.epoch_cell = epoch_cell
        self._cell_checked = -1  # an epoch cell value found high without any fencing
        self._fence_interval = fence_interval
        self._last_fence_check = 0.0

    def now_ms(self) -> int:
        return int(self._clock.time() * 1000)

    def latest_epoch(self) -> int:
        m = self.mstore.load_latest()
        return 0 if m is None else m.writer_epoch

    def claimed(self, m: Manifest) -> None:
        """Recovery wrote the claim ``m``: this writer's epoch from now on."""
        self.current = m
        self.epoch = m.writer_epoch

    # -- fencing -------------------------------------------------------------
    def fence_check(self, *, sure: bool = False) -> None:
        """Raise FencedError if a writer with a higher epoch has claimed the store.

        ``sure``: read the latest manifest whatever the cheap signals say (GC
        does, before deleting anything).
        """
        health = self._health
        health.raise_if_fenced()
        cell = self.epoch_cell
        if sure:
            newer = True
        elif cell is not None:
            value = cell.read()
            if value <= self.epoch:
                # A new writer raises the cell right after claiming the manifest and
                # before reading the WAL, so a cell at or below our epoch means no
                # newer writer has read (or can miss) what we synced.
                return
            if value == self._cell_checked:
                # Left high by something else (a restored store, an old WAL dir):
                # the cell cannot tell us anything, so probe as stores without one do.
                newer = self.mstore.newer_exists(self.current.id)
            else:
                newer = True  # confirmed below by listing, whatever GC deleted since
        else:
            # Manifest id+1 is the claim of the writer that fenced us, if any: GC
            # keeps claims (Manifest.claims), so this one probe is enough.
            newer = self.mstore.newer_exists(self.current.id)
        if newer:
            checked = cell.read() if cell is not None else 0
            latest = self.mstore.load_latest()
            if latest is not None and latest.writer_epoch > self.epoch:
                health.mark_fenced(
                    FencedError(
                        f"{self.store.describe()}: writer epoch {self.epoch} was fenced by "
                        f"epoch {latest.writer_epoch}; open the store again to write"
                    )
                )
                health.raise_if_fenced()
            if cell is not None:
                self._cell_checked = checked  # not fenced at that value: stale

    def quick_fence_check(self) -> None:
        """The check a non-durable write makes: every time where it is cheap (an
        epoch cell, memory://), else at most every ``fence_check_interval`` s."""
        cell = self.epoch_cell
        if cell is not None:
            if cell.read() > self.epoch:
                self.fence_check()
        else:
            now = self._clock.monotonic()
            if now - self._last_fence_check >= self._fence_interval:
                self._last_fence_check = now
                self.fence_check()

    # -- writing -------------------------------------------------------------
    def advance(
        self,
        change: Callable[[Manifest], Manifest],
        *,
        retired: Iterable[str] = (),
        now: float | None = None,
    ) -> Manifest:
        """Write ``change(current)`` as the next manifest; flush and compaction both
        advance it, so the change is computed under the manifest lock.

        ``retired``: SSTs this change makes obsolete as of ``now`` (the manifest
        records when, so GC's grace counts from then in any later process)."""
        with self.lock:
            m = self.current
            new = change(m)
            at = None
            if retired:
                at = self._clock.time() if now is None else now
            new = new.evolve(
                id=m.id + 1,
                created_ms=self.now_ms(),
                obsolete=self._files.obsolete_record(new, retired, at),
            )
            self.write(new)
            return new

    def write(self, m: Manifest) -> None:
        """Create manifest ``m.id``, resolving ambiguous outcomes by reading it back.

        A create that raised may still have happened (an error after the
        write), and a retried create can find its own object: in both cases
        the bytes at ``m.id`` decide.
        """
        data = m.encode()
        with self.lock:
            self._health.raise_if_broken()
            try:
                self.mstore.write(m, data)
            except FileExistsError:
                if not self.mstore.holds(m.id, data):
                    self.fence_check(sure=True)  # whoever wrote it: a newer writer?
                    raise CorruptionError(
                        f"manifest {m.id} exists but no newer writer holds the store",
                        object_name=paths.manifest_name(m.id),
                    ) from None
            except DurabilityUnknown as exc:
                # There, but maybe not after a power loss: nothing may rely on it
                # (a flush would delete the WAL it replaces). Reopening decides.
                self._health.stop(f"manifest {m.id} was written but not made durable ({exc})")
                raise
            except OSError as exc:
                if not self._landed(m.id, data, exc):
                    raise
                log.warning("manifest %d write reported an error but landed; continuing", m.id)
            self.current = m

    def _landed(self, manifest_id: int, data: bytes, error: OSError) -> bool:
        """After a failed create: did manifest ``manifest_id`` land anyway?

        Reads it back, a few times if reading fails too. If no read answers,
        nobody can tell whether the store now references what this write
        references, so the handle stops: every later call raises KvError,
        and nothing it wrote is handed to GC. Reopening reads the truth.
        """
        delay = 0.05
        for attempt in range(4):
            try:
                return bool(self.mstore.holds(manifest_id, data))
            except OSError as exc:
                log.warning("reading back manifest %d failed: %s", manifest_id, exc)
                if attempt < 3:
                    self._clock.sleep(delay)
                    delay *= 4
        self._health.stop(
            f"writing manifest {manifest_id} failed ({error}) and reading it back failed "
            "too, so whether it landed is unknown"
        )
        return False

    def record_clean_close(self, last_seq: int) -> None:
        """Everything is in SSTs: say so in the manifest, so the next writer may use
        another WAL location (or none of this one's files) without losing anything."""
        m = self.current
        health = self._health
        if health.fenced is not None or health.broken is not None or m.wal_clean:
            return
        if last_seq != m.last_flushed_seq:
            return
        # If this fails, close() says so; the next open then checks the WAL instead.
        self.write(
            m.evolve(
                id=m.id + 1,
                created_ms=self.now_ms(),
                wal_clean=True,
                obsolete=self._files.obsolete_record(m),
            )
        )

    def close(self) -> None:
        if self.epoch_cell is not None:
            self.epoch_cell.close()
