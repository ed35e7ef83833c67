"""The compactor: merge L0 SSTs and sorted runs, and swap the result in.

Policy is pure (:mod:`kvstore.compaction`); this part runs it: in a
background thread when ``background_compaction`` is on (woken by flushes,
retried with backoff on errors, running GC when there is garbage), or in
the caller's thread for :meth:`kvstore.DB.compact`. Each merge keeps the
versions pinned seqs and the watermark need (:mod:`kvstore.engine.retention`);
when nothing is pinned it merges whole blocks as columns.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TypeVar

from kvstore import readpath as rp
from kvstore.clock import Clock
from kvstore.compaction import (
    CompactionPolicy,
    Plan,
    compaction_chunks,
    compaction_columns,
    plan,
    plan_full,
)
from kvstore.engine.commit import CommitPath
from kvstore.engine.gc import GarbageCollector
from kvstore.engine.health import Health
from kvstore.engine.manifests import ManifestWriter
from kvstore.engine.retention import Retention
from kvstore.engine.sstfiles import SstFiles
from kvstore.entries import Columns, Entry
from kvstore.errors import FencedError
from kvstore.format.manifest import Manifest, SstMeta
from kvstore.iterators import BlockColumns, merge_batches, merge_columns
from kvstore.options import Options

log = logging.getLogger("kvstore")

_Batch = TypeVar("_Batch", list[Entry], Columns)


class CompactionStopped(Exception):
    """A running compaction was abandoned because the database is closing."""


class Compactor:
    def __init__(
        self,
        options: Options,
        clock: Clock,
        health: Health,
        commit: CommitPath,
        manifests: ManifestWriter,
        files: SstFiles,
        retention: Retention,
        gc: GarbageCollector,
        counters: Counter[str],
    ) -> None:
        self._opts = options
        self._clock = clock
        self._health = health
        self._commit = commit
        self._manifests = manifests
        self._files = files
        self._retention = retention
        self._gc = gc
        self._counters = counters
        self.lock = threading.Lock()
        self.wanted = threading.Event()
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    # -- the background thread ---------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="kvstore-compact", daemon=True)
        self._thread.start()
        self.wake()

    def wake(self) -> None:
        self.wanted.set()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float) -> None:
        self.wanted.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def _loop(self) -> None:
        health = self._health
        backoff = 0.1
        while not health.stopping:
            self.wanted.wait(1.0)
            self.wanted.clear()
            if health.stopping:
                return
            try:
                with self.lock:
                    policy = CompactionPolicy(
                        l0_compaction_trigger=self._opts.l0_compaction_trigger
                    )
                    while not health.stopping:
                        m = self._manifests.current
                        p = plan(m.l0, m.runs, policy)
                        if p is None:
                            break
                        self.compact_once(p)
                idle = self._clock.monotonic() - self._gc.last_listing >= 300
                if self._files.obsolete or idle:
                    health.check_open()
                    self._gc.collect()  # idle stores do not list every second
                self.error = None
                backoff = 0.1
            except FencedError as exc:
                health.mark_fenced(exc)
                return
            except CompactionStopped:
                return
            except Exception as exc:  # retried; reported via stats and logging
                if health.stopping or health.broken is not None:
                    return
                self._counters["compaction_errors"] += 1
                self.error = exc
                log.error("compaction failed (retrying in %.1fs): %s", backoff, exc)
                self._clock.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
                self.wanted.set()
            except BaseException as exc:  # the process is going down (or a simulated crash)
                self.error = exc
                return

    # -- compacting ------------------------------------------------------------------
    def compact_all(self, tick: Callable[[int], None] | None) -> None:
        """Compact until everything is one sorted run (tombstones purged once)."""
        with self.lock:
            first = True
            while True:
                self._commit.check_writable()
                m = self._manifests.current
                p = plan_full(m.l0, m.runs, purge_tombstones=first)
                if p is None:
                    break
                self.compact_once(p, tick)
                first = False

    def compact_once(self, p: Plan, tick: Callable[[int], None] | None = None) -> None:
        """Merge the plan's inputs into one sorted run and swap it in.

        ``tick(n)`` (if given) hears of every ``n`` input bytes read."""
        commit = self._commit
        files = self._files
        st = commit.state
        l0_in = [h for h in st.l0 if h.meta.id in p.l0_ids]
        runs_in = st.runs[p.first_run : p.last_run]
        inputs = [*(h.meta for h in l0_in), *(h.meta for r in runs_in for h in r.ssts)]
        if not inputs:
            return
        snaps, watermark = self._retention.rewrite_args(max(m.max_seq for m in inputs))
        tombstones_to_drop = p.bottom and any(m.tombstones for m in inputs)
        if (
            not p.rewrite
            and not runs_in
            and not tombstones_to_drop
            and _disjoint([h.meta for h in l0_in])
        ):
            # trivial move: disjoint L0s already form a valid sorted run
            outputs = sorted(l0_in, key=lambda h: h.meta.first_key)
            moved = True
            if tick is not None:
                tick(sum(m.size for m in inputs))
        else:
            outputs = self._merge(p, l0_in, runs_in, inputs, snaps, watermark, tick)
            moved = False
        input_ids = {m.id for m in inputs}
        out_run = tuple(h.meta for h in outputs)
        first, last = p.first_run, p.last_run
        expected = [h.meta.id for r in runs_in for h in r.ssts]
        retention = self._retention

        def change(m: Manifest) -> Manifest:
            runs = list(m.runs)
            if [s.id for r in runs[first:last] for s in r] != expected:
                raise AssertionError("runs changed under a running compaction")
            runs[first:last] = [out_run] if out_run else []
            return m.evolve(
                l0=tuple(s for s in m.l0 if s.id not in input_ids),
                runs=tuple(runs),
                **retention.manifest_fields(m, watermark),
            )

        retired_at = self._clock.time()
        try:
            self._manifests.advance(change, retired=() if moved else input_ids, now=retired_at)
        finally:  # referenced now, or orphans GC may collect (unless nobody knows which)
            if self._health.broken is None:
                files.inflight.difference_update(h.meta.id for h in outputs)
        with commit.cond:
            cur = commit.state
            runs = list(cur.runs)
            runs[first:last] = [rp.SortedRun.of(tuple(outputs))] if outputs else []
            commit.state = replace(
                cur, l0=tuple(h for h in cur.l0 if h.meta.id not in input_ids), runs=tuple(runs)
            )
            commit.cond.notify_all()
        if not moved:
            files.retire(input_ids, retired_at)
        written = 0 if moved else sum(h.meta.size for h in outputs)
        c = self._counters
        c["compactions"] += 1
        c["trivial_moves"] += int(moved)
        c["compaction_input_bytes"] += sum(m.size for m in inputs)
        c["compaction_output_bytes"] += written
        log.info(
            "compaction%s: %d L0 + %d runs (%d bytes) -> %d SSTs (%d bytes written)",
            " (trivial move)" if moved else "",
            len(l0_in),
            len(runs_in),
            sum(m.size for m in inputs),
            len(outputs),
            written,
        )

    def _merge(
        self,
        p: Plan,
        l0_in: list[rp.SstHandle],
        runs_in: tuple[rp.SortedRun, ...],
        inputs: list[SstMeta],
        snaps: list[int],
        watermark: int | None,
        tick: Callable[[int], None] | None,
    ) -> list[rp.SstHandle]:
        """Write the merged output SSTs (in flight until the manifest names them)."""
        target = self._opts.sst_target_bytes
        chunks: Iterator[list[Entry]] | Iterator[Columns]
        if not snaps and watermark is None:  # only the newest versions survive: columns
            blocks = [h.reader.iter_block_columns() for h in l0_in]
            blocks += [_run_blocks(r) for r in runs_in]
            merged_columns = merge_columns(blocks)
            if tick is not None:
                merged_columns = _counted(merged_columns, inputs, tick)
            chunks = compaction_columns(merged_columns, p.bottom, target)
        else:
            sources: list[Iterator[Entry]] = [
                h.reader.iter_forward(None, None, fill_cache=False) for h in l0_in
            ]
            sources += [r.iter_forward(None, None, fill_cache=False) for r in runs_in]
            merged = merge_batches(sources)
            if tick is not None:
                merged = _counted(merged, inputs, tick)
            chunks = compaction_chunks(merged, snaps, p.bottom, target, watermark)
        outputs: list[rp.SstHandle] = []
        try:
            for chunk in chunks:
                if self._health.stopping:  # closing: abandon; the outputs are orphans for GC
                    raise CompactionStopped()
                outputs.append(self._files.write(chunk))
        except BaseException:
            # nothing references these outputs: let GC collect them
            self._files.inflight.difference_update(h.meta.id for h in outputs)
            raise
        return outputs


def _disjoint(metas: list[SstMeta]) -> bool:
    ordered = sorted(metas, key=lambda s: s.first_key)
    return all(a.last_key < b.first_key for a, b in zip(ordered, ordered[1:]))


def _counted(
    merged: Iterator[_Batch], inputs: list[SstMeta], tick: Callable[[int], None]
) -> Iterator[_Batch]:
    """The merge's output, telling ``tick`` how many input bytes each batch stands for.

    An entry stands for an equal share of the inputs' size (counted before
    compaction drops any version), so a whole merge tells exactly their size."""
    size = sum(m.size for m in inputs)
    count = max(sum(m.count for m in inputs), 1)
    seen = told = 0
    for batch in merged:
        seen += len(batch.keys) if isinstance(batch, Columns) else len(batch)
        now = size if seen >= count else size * seen // count
        if now > told:
            tick(now - told)
            told = now
        yield batch
    if size > told:
        tick(size - told)


def _run_blocks(run: rp.SortedRun) -> Iterator[BlockColumns]:
    """The blocks of a sorted run's SSTs in order, read past the cache."""
    for h in run.ssts:
        yield from h.reader.iter_block_columns()
