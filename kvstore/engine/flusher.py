"""The flusher: frozen memtables to L0 SSTs, oldest first.

When the active memtable reaches ``memtable_bytes`` the commit path freezes
it and the WAL rotates with it, so each frozen memtable owns a contiguous
range of WAL ids. A flush writes the oldest as an L0 SST (keeping the
versions pinned seqs and the watermark need), then a manifest with the SST,
``last_flushed_seq`` and ``wal_replay_from`` (the first WAL id of the next
memtable), and then deletes the WAL the SST covers. With
``background_flush`` a thread does this; otherwise the writer that froze the
memtable does. While L0 is full and compaction can empty it, flushes (and
so writers) wait.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import replace

from kvstore.clock import Clock
from kvstore.engine.commit import CommitPath
from kvstore.engine.compactor import Compactor
from kvstore.engine.health import Health
from kvstore.engine.manifests import ManifestWriter
from kvstore.engine.retention import Retention
from kvstore.engine.sstfiles import SstFiles
from kvstore.errors import FencedError, KvError
from kvstore.options import Options

log = logging.getLogger("kvstore")


class Flusher:
    def __init__(
        self,
        options: Options,
        clock: Clock,
        health: Health,
        commit: CommitPath,
        manifests: ManifestWriter,
        files: SstFiles,
        retention: Retention,
        compactor: Compactor,
        counters: Counter[str],
    ) -> None:
        self._opts = options
        self._clock = clock
        self._health = health
        self._commit = commit
        self._manifests = manifests
        self._files = files
        self._retention = retention
        self._compactor = compactor
        self._counters = counters
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="kvstore-flush", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def flush_pending(self) -> None:
        """Flush every frozen memtable in the caller's thread."""
        while self.flush_oldest():
            pass

    def wait_flushed(self) -> None:
        """Return once no frozen memtable is left (flushing them here without a thread)."""
        if not self._opts.background_flush:
            self.flush_pending()
            return
        commit = self._commit
        with commit.cond:
            while commit.state.immutable:
                commit.check_writable()
                err = self._health.bg_error
                if err is not None:
                    raise KvError(f"flush failed: {err}") from err
                commit.cond.wait(0.5)

    def flush_oldest(self) -> bool:
        commit = self._commit
        with self._lock:
            st = commit.state
            if not st.immutable:
                return False
            mt = st.immutable[-1]
            self._wait_for_l0_room()
            snaps, watermark = self._retention.rewrite_args(mt.max_seq)
            handle = self._files.write_memtable(mt, snaps, watermark)
            with commit.lock:
                cur = commit.state
                nxt = cur.immutable[-2] if len(cur.immutable) > 1 else cur.active
                replay_from = nxt.wal_start
            retention = self._retention
            try:
                self._manifests.advance(
                    lambda m: m.evolve(
                        l0=(handle.meta, *m.l0),
                        last_flushed_seq=max(m.last_flushed_seq, mt.max_seq),
                        wal_replay_from=replay_from,
                        **retention.manifest_fields(m, watermark),
                    )
                )
            finally:  # named by the manifest now, or an orphan for GC (a retry writes anew)
                if self._health.broken is None:
                    self._files.inflight.discard(handle.meta.id)
            commit.mark_durable(mt.max_seq)
            with commit.cond:
                cur = commit.state
                assert cur.immutable[-1] is mt
                commit.state = replace(cur, immutable=cur.immutable[:-1], l0=(handle, *cur.l0))
                commit.cond.notify_all()
            self._counters["flushes"] += 1
            self._counters["flushed_bytes"] += handle.meta.size
            commit.wal.delete_before(replay_from)
            self._compactor.wake()
            return True

    def _wait_for_l0_room(self) -> None:
        """Backpressure: hold the flush while L0 is full and compaction can empty it.

        While compaction fails it retries, and flushes (and so writers) wait for
        it. They do not wait when nothing will ever make room (the compactor
        has stopped: fenced, or the process is going down) or when the store is
        closing: then L0 grows past its limit instead.
        """
        if not self._opts.background_compaction:
            return
        health = self._health
        commit = self._commit
        started = None
        while len(commit.state.l0) >= self._opts.l0_max_ssts and not health.stopping:
            if health.closing or not self._compactor.alive():
                break
            if started is None:
                started = self._clock.monotonic()
                self._counters["l0_stalls"] += 1
            self._compactor.wake()
            with commit.cond:
                commit.cond.wait(0.1)
        if started is not None:
            self._counters["l0_stall_ms"] += int((self._clock.monotonic() - started) * 1000)

    def _loop(self) -> None:
        commit = self._commit
        health = self._health
        backoff = 0.05
        while True:
            with commit.cond:
                while not commit.state.immutable and not health.stopping:
                    commit.cond.wait()
                if health.stopping and not commit.state.immutable:
                    return
            try:
                self.flush_oldest()
                backoff = 0.05
                health.bg_error = None
            except FencedError as exc:
                health.mark_fenced(exc)
                commit.wake_all()
                return
            except Exception as exc:  # retried; reported via stats and logging
                health.bg_error = exc
                self._counters["flush_errors"] += 1
                log.error("memtable flush failed (retrying in %.2fs): %s", backoff, exc)
                commit.wake_all()
                self._clock.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                if health.stopping:
                    return
            except BaseException as exc:  # the process is going down (or a simulated crash)
                health.bg_error = exc
                commit.wake_all()
                return
