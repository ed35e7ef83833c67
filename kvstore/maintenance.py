"""Keeping a store healthy for months: compaction, retention, checkpoints, GC.

These are the :class:`~kvstore.db.DB` methods that rewrite or delete files.
What may be dropped, and when, follows one rule (the docstring of
:mod:`kvstore.compaction` has the timeline): a version goes only when no
open snapshot, no running transaction, no retention watermark and no
checkpoint can still read it.

* Snapshots and transactions pin their seq in memory; flush and compaction
  keep the versions those seqs read.
* The *retention watermark* ``W`` is persisted in the manifest: every read
  at a seq >= W stays exact, across flushes, compactions and reopen, so
  ``db.snapshot(seq=s)`` works for any ``s >= W``. Modes: none (default),
  keep everything (``retention="all"``), by age (``retention=<seconds>``),
  or moved explicitly with :meth:`set_retention_watermark`. W only rises.
* A *checkpoint* names a manifest. Its SSTs are pinned: compaction may
  replace them in the live tree, but GC keeps the files (and the manifest)
  until the checkpoint is deleted or expires, so
  ``kvstore.open_reader(url, checkpoint=name)`` keeps reading them.
* GC deletes files no live manifest or checkpoint references, only after
  ``gc_grace_seconds`` (a reader in another process may have loaded an older
  manifest and not opened its files yet). The grace counts from when a file
  became obsolete, which every manifest records (``Manifest.obsolete``; a
  manifest's own time is its successor's ``created_ms``), so a process that
  opens later does not start the clock again. Files nothing recorded (left by
  a crash) count from when a process first saw them. Deletion never races a flush or a
  compaction: only files that a written manifest has already replaced are
  candidates, and a crash leaves at worst unreferenced files, which the next
  open queues for GC.
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from kvstore import paths
from kvstore import readpath as rp
from kvstore.compaction import (
    CompactionPolicy,
    Plan,
    compaction_chunks,
    compaction_columns,
    plan,
    plan_full,
)
from kvstore.errors import CheckpointNotFound, ClosedError, FencedError, KvError
from kvstore.format.manifest import Manifest, SstMeta
from kvstore.format.sst import Columns, Entry
from kvstore.iterators import BlockColumns, merge_batches, merge_columns

if TYPE_CHECKING:
    from collections import Counter

    from kvstore.options import Options
    from kvstore.snapshot import SeqRegistry

log = logging.getLogger("kvstore")

_Batch = TypeVar("_Batch", list[Entry], Columns)

_MAX_SEQ_TIMES = 1024
_CHECKPOINT_NAME_MAX = 128


class CompactionStopped(Exception):
    """A running compaction was abandoned because the database is closing."""


def check_checkpoint_name(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"checkpoint name must be a str, not {type(name).__name__}")
    if not name or len(name) > _CHECKPOINT_NAME_MAX:
        raise ValueError(f"checkpoint name must be 1..{_CHECKPOINT_NAME_MAX} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise ValueError("checkpoint name must not contain control characters")
    return name


class MaintenanceMixin:
    """Compaction, retention, checkpoints and GC for :class:`kvstore.DB`."""

    # provided by DB
    _opts: Options
    _state: rp.State
    _manifest: Manifest
    _store: Any
    _snapshots: SeqRegistry
    _floor_seq: int
    _counters: Counter[str]
    _cond: threading.Condition
    _obsolete: list[tuple[float, str]]
    _inflight: set[str]
    _handles: dict[str, rp.SstHandle]
    _stopping: bool
    _fenced: FencedError | None
    _broken: KvError | None
    _clock: Callable[[], float]
    _mstore: Any

    if TYPE_CHECKING:  # implemented by DB

        def _advance_manifest(
            self,
            change: Callable[[Manifest], Manifest],
            *,
            retired: Iterable[str] = (),
            now: float | None = None,
        ) -> Manifest: ...
        def _write_entries(self, entries: list[Entry] | Columns) -> rp.SstHandle: ...
        def _check_writable(self) -> None: ...
        def _check_open(self) -> None: ...
        def _fence_check(self, *, sure: bool = False) -> None: ...
        def _raise_if_broken(self) -> None: ...
        def _mark_fenced(self, exc: FencedError) -> None: ...
        def flush(self) -> None: ...

    def _init_maintenance(self) -> None:
        self._compaction_lock = threading.Lock()
        self._compaction_wanted = threading.Event()
        self._compaction_error: BaseException | None = None
        self._gc_lock = threading.RLock()  # guards _obsolete and GC passes
        self._last_gc_listing = time.monotonic()
        self._seq_times: deque[tuple[int, int]] = deque(maxlen=_MAX_SEQ_TIMES)
        self._last_sample = 0.0
        self._pins: dict[str, frozenset[str]] = {}  # checkpoint name -> pinned SST ids
        self._pin_cache: dict[int, frozenset[str]] = {}  # checkpoint manifest id -> SST ids
        self._manifest_times: dict[int, float] = {}  # manifest id -> when it was superseded

    # ------------------------------------------------------------------
    # retention
    # ------------------------------------------------------------------
    @property
    def retention_watermark(self) -> int | None:
        """Reads at seqs at or above this stay exact; None when no watermark is kept."""
        w = self._watermark()
        if w is None:
            return None
        with self._snapshots.lock:
            return max(w, self._floor_seq)

    def set_retention_watermark(self, seq: int) -> int:
        """Raise the retention watermark to ``seq`` (it never goes down); returns it.

        Versions only readable below the watermark become garbage for
        compaction; ``db.snapshot(seq=s)`` keeps working for ``s >= watermark``.
        On a store without a watermark this starts keeping versions from
        ``max(seq, oldest readable seq)`` on.
        """
        self._check_writable()
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise TypeError(f"seq must be an int, not {type(seq).__name__}")
        if seq < 0:
            raise ValueError(f"seq must be >= 0, got {seq}")
        with self._snapshots.lock:
            floor = self._floor_seq
        current = self._manifest.retention_seq
        target = max(seq, floor, current or 0)
        if current != target:
            self._advance_manifest(
                lambda m: m.evolve(retention_seq=max(target, m.retention_seq or 0))
            )
        return target

    def _sample_seq_time(self, seq: int, now: float) -> None:
        if now - self._last_sample >= 1.0:
            self._last_sample = now
            samples = self._seq_times
            if len(samples) == samples.maxlen:
                # thin instead of forgetting: keep the whole span at half the detail
                kept = list(samples)[::2]
                samples.clear()
                samples.extend(kept)
            samples.append((seq, int(now * 1000)))

    def _watermark(self) -> int | None:
        """The watermark flushes and compactions must honour right now."""
        w = self._manifest.retention_seq
        age = self._opts.retention
        if isinstance(age, (int, float)) and not isinstance(age, bool):
            cutoff_ms = int((self._clock() - age) * 1000)
            times = list(self._seq_times)
            i = bisect_right([t for _, t in times], cutoff_ms)
            by_age = times[i - 1][0] if i else 0
            w = by_age if w is None else max(w, by_age)
        return w

    def _retention_args(self, max_input_seq: int) -> tuple[list[int], int | None]:
        """Pinned seqs and the watermark for a rewrite of data up to ``max_input_seq``.

        Also raises the floor: reads below it are no longer guaranteed exact.
        """
        w = self._watermark()
        with self._snapshots.lock:
            snaps = self._snapshots.seqs()
            bound = max_input_seq if w is None else min(w, max_input_seq)
            self._floor_seq = max(self._floor_seq, bound)
        return snaps, w

    def _retention_fields(self, m: Manifest, used: int | None) -> dict[str, Any]:
        """Manifest fields persisting the watermark a flush or compaction relied on.

        Never below the floor: versions under it may be gone already (written
        without a watermark, or with a higher one), and after a reopen the
        persisted watermark is all that tells which reads are exact."""
        fields: dict[str, Any] = {"seq_times": tuple(self._seq_times)}
        if used is not None:
            with self._snapshots.lock:
                floor = self._floor_seq
            fields["retention_seq"] = max(used, floor, m.retention_seq or 0)
        return fields

    # ------------------------------------------------------------------
    # compaction
    # ------------------------------------------------------------------
    def _policy(self) -> CompactionPolicy:
        return CompactionPolicy(l0_compaction_trigger=self._opts.l0_compaction_trigger)

    def _compact_once(self, p: Plan, tick: Callable[[int], None] | None = None) -> None:
        """Merge the plan's inputs into one sorted run and swap it in.

        ``tick(n)`` (if given) hears of every ``n`` input bytes read."""
        st = self._state
        l0_in = [h for h in st.l0 if h.meta.id in p.l0_ids]
        runs_in = st.runs[p.first_run : p.last_run]
        inputs = [*(h.meta for h in l0_in), *(h.meta for r in runs_in for h in r.ssts)]
        if not inputs:
            return
        snaps, watermark = self._retention_args(max(m.max_seq for m in inputs))
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
                sources += [r.iter(None, None, False, fill_cache=False) for r in runs_in]
                merged = merge_batches(sources)
                if tick is not None:
                    merged = _counted(merged, inputs, tick)
                chunks = compaction_chunks(merged, snaps, p.bottom, target, watermark)
            outputs = []
            try:
                for chunk in chunks:
                    if self._stopping:  # closing: abandon; the outputs are orphans for GC
                        raise CompactionStopped()
                    outputs.append(self._write_entries(chunk))
            except BaseException:
                # nothing references these outputs: let GC collect them
                self._inflight.difference_update(h.meta.id for h in outputs)
                raise
            moved = False
        input_ids = {m.id for m in inputs}
        out_run = tuple(h.meta for h in outputs)
        first, last = p.first_run, p.last_run
        expected = [h.meta.id for r in runs_in for h in r.ssts]

        def change(m: Manifest) -> Manifest:
            runs = list(m.runs)
            if [s.id for r in runs[first:last] for s in r] != expected:
                raise AssertionError("runs changed under a running compaction")
            runs[first:last] = [out_run] if out_run else []
            return m.evolve(
                l0=tuple(s for s in m.l0 if s.id not in input_ids),
                runs=tuple(runs),
                **self._retention_fields(m, watermark),
            )

        retired_at = self._clock()
        try:
            self._advance_manifest(change, retired=() if moved else input_ids, now=retired_at)
        finally:  # referenced now, or orphans GC may collect (unless nobody knows which)
            if self._broken is None:
                self._inflight.difference_update(h.meta.id for h in outputs)
        with self._cond:
            cur = self._state
            runs = list(cur.runs)
            runs[first:last] = [rp.SortedRun.of(tuple(outputs))] if outputs else []
            self._state = replace(
                cur, l0=tuple(h for h in cur.l0 if h.meta.id not in input_ids), runs=tuple(runs)
            )
            self._cond.notify_all()
        if not moved:
            with self._gc_lock:  # (a GC pass may have queued them from its listing)
                queued = {sst_id for _, sst_id in self._obsolete}
                self._obsolete.extend((retired_at, i) for i in input_ids if i not in queued)
        written = 0 if moved else sum(h.meta.size for h in outputs)
        self._counters["compactions"] += 1
        self._counters["trivial_moves"] += int(moved)
        self._counters["compaction_input_bytes"] += sum(m.size for m in inputs)
        self._counters["compaction_output_bytes"] += written
        log.info(
            "compaction%s: %d L0 + %d runs (%d bytes) -> %d SSTs (%d bytes written)",
            " (trivial move)" if moved else "",
            len(l0_in),
            len(runs_in),
            sum(m.size for m in inputs),
            len(outputs),
            written,
        )

    def compact(self, *, progress: Callable[[int, int], None] | None = None) -> None:
        """Flush, then compact until everything is one sorted run; then collect garbage.

        Runs in the caller's thread (the background compactor waits).
        ``progress(done, total)``, if given, is called as the merge reads its
        input, in bytes of input SSTs (``total`` is every SST in the tree
        when compaction starts; it grows if concurrent writes add more), and
        once more with ``done == total`` at the end.
        """
        if progress is not None and not callable(progress):
            raise TypeError("progress must be a callable (done, total) or None")
        self.flush()
        with self._compaction_lock:
            done = 0
            total = sum(s.size for s in self._manifest.all_ssts())
            tick: Callable[[int], None] | None = None
            if progress is not None:

                def tick(n: int) -> None:
                    nonlocal done, total
                    done += n
                    total = max(total, done)
                    progress(done, total)

            first = True
            while True:
                self._check_writable()
                m = self._manifest
                p = plan_full(m.l0, m.runs, purge_tombstones=first)
                if p is None:
                    break
                try:
                    self._compact_once(p, tick)
                except CompactionStopped:
                    raise ClosedError("the database was closed while compact() ran") from None
                first = False
        self.collect_garbage()
        if progress is not None:
            progress(total, total)

    def _wake_compactor(self) -> None:
        self._compaction_wanted.set()

    def _compaction_loop(self) -> None:
        backoff = 0.1
        while not self._stopping:
            self._compaction_wanted.wait(1.0)
            self._compaction_wanted.clear()
            if self._stopping:
                return
            try:
                with self._compaction_lock:
                    while not self._stopping:
                        m = self._manifest
                        p = plan(m.l0, m.runs, self._policy())
                        if p is None:
                            break
                        self._compact_once(p)
                if self._obsolete or time.monotonic() - self._last_gc_listing >= 300:
                    self.collect_garbage()  # idle stores do not list every second
                self._compaction_error = None
                backoff = 0.1
            except FencedError as exc:
                self._mark_fenced(exc)
                return
            except CompactionStopped:
                return
            except Exception as exc:  # retried; reported via stats and logging
                if self._stopping or self._broken is not None:
                    return
                self._counters["compaction_errors"] += 1
                self._compaction_error = exc
                log.error("compaction failed (retrying in %.1fs): %s", backoff, exc)
                time.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
                self._compaction_wanted.set()
            except BaseException as exc:  # the process is going down (or a simulated crash)
                self._compaction_error = exc
                return

    # ------------------------------------------------------------------
    # checkpoints
    # ------------------------------------------------------------------
    def create_checkpoint(self, name: str, *, expires_in: float | None = None) -> dict[str, Any]:
        """Persist a named, consistent view of the store; returns its description.

        Everything written before the call is flushed first; the checkpoint
        reads the store as of the returned ``seq``. Its files stay until
        :meth:`delete_checkpoint` or, with ``expires_in`` seconds, until it
        expires. Read it with ``kvstore.open_reader(url, checkpoint=name)``.
        """
        check_checkpoint_name(name)
        if expires_in is not None and (
            isinstance(expires_in, bool) or not isinstance(expires_in, (int, float))
        ):
            raise TypeError("expires_in must be a number of seconds or None")
        if expires_in is not None and not 0 < expires_in < float("inf"):
            raise ValueError(f"expires_in must be a positive, finite number, not {expires_in}")
        self.flush()
        now_ms = int(self._clock() * 1000)

        def change(m: Manifest) -> Manifest:
            if name in m.checkpoints:
                raise ValueError(f"checkpoint {name!r} already exists")
            cp = {
                "manifest_id": m.id + 1,
                "seq": m.last_flushed_seq,
                "created_ms": now_ms,
                "expires_ms": None if expires_in is None else now_ms + int(expires_in * 1000),
            }
            return m.evolve(checkpoints={**m.checkpoints, name: cp})

        with self._gc_lock:  # a GC pass sees the checkpoint with its pins, or neither
            m = self._advance_manifest(change)
            self._pin_cache[m.id] = self._pins[name] = frozenset(s.id for s in m.all_ssts())
        return {"name": name, **m.checkpoints[name]}

    def list_checkpoints(self) -> list[dict[str, Any]]:
        """Every checkpoint, oldest first, with its seq, manifest and expiry."""
        self._check_open()
        cps = self._manifest.checkpoints
        return sorted(({"name": n, **cp} for n, cp in cps.items()), key=lambda c: c["created_ms"])

    def delete_checkpoint(self, name: str) -> None:
        """Remove a checkpoint; its files become garbage once nothing else needs them."""
        check_checkpoint_name(name)
        self._check_writable()
        if name not in self._manifest.checkpoints:
            raise CheckpointNotFound(name)

        def change(m: Manifest) -> Manifest:
            return m.evolve(checkpoints={k: v for k, v in m.checkpoints.items() if k != name})

        try:
            pinned = self._pinned_by(name, self._manifest.checkpoints[name])
        except (OSError, KvError):  # a missing or damaged checkpoint can still be deleted
            pinned = frozenset()
        with self._gc_lock:  # no GC pass between unpinning and the fresh grace
            now = self._clock()
            self._advance_manifest(change, retired=pinned, now=now)
            self._release_pins({name: pinned}, now)

    def _pinned_by(self, name: str, cp: dict[str, Any]) -> frozenset[str]:
        """The SST ids checkpoint ``name`` pins (its manifest's SSTs).

        Cached by the checkpoint's manifest id, never by name: a name deleted
        and created again names another manifest."""
        manifest_id = int(cp["manifest_id"])
        pinned = self._pin_cache.get(manifest_id)
        if pinned is None:
            pinned = frozenset(s.id for s in self._mstore.load(manifest_id).all_ssts())
            self._pin_cache[manifest_id] = pinned
        return pinned

    def _release_pins(self, released: dict[str, frozenset[str]], now: float) -> None:
        """Forget deleted or expired checkpoints' pins; their files start a fresh grace
        period at ``now`` (a reader may still be reading the checkpoint)."""
        ids = frozenset().union(*released.values())
        with self._gc_lock:
            for name in released:
                self._pins.pop(name, None)
            self._obsolete = [(now if i in ids else when, i) for when, i in self._obsolete]

    def _load_pins(self, m: Manifest | None = None) -> None:
        """Pinned SST ids of every checkpoint of ``m`` (default: the current manifest)."""
        cps = (self._manifest if m is None else m).checkpoints
        self._pins = {name: self._pinned_by(name, cp) for name, cp in cps.items()}
        wanted = {int(cp["manifest_id"]) for cp in cps.values()}
        for manifest_id in [i for i in self._pin_cache if i not in wanted]:
            self._pin_cache.pop(manifest_id, None)

    def _expire_checkpoints(self) -> None:
        now_ms = int(self._clock() * 1000)
        expired = [
            n
            for n, cp in self._manifest.checkpoints.items()
            if cp.get("expires_ms") is not None and cp["expires_ms"] <= now_ms
        ]
        if expired:
            pinned = {n: self._pinned_by(n, self._manifest.checkpoints[n]) for n in expired}
            now = self._clock()
            self._advance_manifest(
                lambda m: m.evolve(
                    checkpoints={k: v for k, v in m.checkpoints.items() if k not in expired}
                ),
                retired=frozenset().union(*pinned.values()),
                now=now,
            )
            self._release_pins(pinned, now)
            log.info("checkpoints expired: %s", ", ".join(expired))

    # ------------------------------------------------------------------
    # garbage collection
    # ------------------------------------------------------------------
    def collect_garbage(self, *, grace_seconds: float | None = None) -> dict[str, int]:
        """Delete SSTs and manifests nothing references any more; returns counts.

        Files are deleted only once they have been unreferenced for
        ``grace_seconds`` (default: the ``gc_grace_seconds`` option), so
        readers in other processes can finish with an older manifest.
        Expired checkpoints are removed first. Files pinned by a checkpoint
        stay.
        """
        self._check_open()
        with self._gc_lock:
            return self._collect_garbage_locked(grace_seconds)

    def _collect_garbage_locked(self, grace_seconds: float | None) -> dict[str, int]:
        self._raise_if_broken()  # which files the store references is unknown
        grace = self._opts.gc_grace_seconds if grace_seconds is None else grace_seconds
        if self._fenced is None:
            self._expire_checkpoints()
        now = self._clock()
        # Reconcile with the listing (files of deleted checkpoints, or left by a crash).
        # Order matters: list, then copy the in-flight set, then read the live set and
        # the checkpoints' pins, both from that one manifest. A listed SST is then
        # either still in flight, or in the manifest read (live), or replaced by it:
        # then a checkpoint of that manifest pins it if any does. (Pins read before
        # the listing could miss a checkpoint created, and then compacted away from
        # the live tree, in between: GC would delete a live checkpoint's files.)
        listed = self._store.list(paths.SST_DIR)
        self._last_gc_listing = time.monotonic()
        inflight = set(self._inflight)
        m = self._manifest
        live = {s.id for s in m.all_ssts()}
        self._load_pins(m)
        pinned = frozenset().union(*self._pins.values()) if self._pins else frozenset()
        queued = {sst_id for _, sst_id in self._obsolete}
        for name in listed:
            sst_id = paths.parse_sst_name(name)
            if sst_id is None or sst_id in live or sst_id in queued or sst_id in inflight:
                continue
            if sst_id not in pinned:
                self._obsolete.append((now, sst_id))
        # A writer fenced without knowing it would see the new writer's SSTs as
        # garbage: make sure no newer writer exists. Its SSTs are all written after
        # its claim, so after this check and hence after the listing above. (One
        # listing of manifest/ per pass; _collect_manifests lists it anyway.)
        self._fence_check(sure=True)
        keep: list[tuple[float, str]] = []
        deleted_ssts = 0
        for when, sst_id in self._obsolete:
            if sst_id in live:
                continue
            if now - when < grace or sst_id in pinned:
                keep.append((when, sst_id))
                continue
            try:
                self._store.delete(paths.sst_name(sst_id))
                self._handles.pop(sst_id, None)
                deleted_ssts += 1
            except OSError as exc:
                log.warning("could not delete SST %s: %s", sst_id, exc)
                keep.append((when, sst_id))
        self._obsolete = keep
        deleted_manifests = self._collect_manifests(now, grace)
        self._counters["gc_deleted"] += deleted_ssts
        self._counters["gc_deleted_manifests"] += deleted_manifests
        return {"ssts": deleted_ssts, "manifests": deleted_manifests}

    def _collect_manifests(self, now: float, grace: float) -> int:
        current = self._manifest.id
        keep_ids = {int(cp["manifest_id"]) for cp in self._manifest.checkpoints.values()}
        keep_ids.update(self._manifest.claims)  # an old writer's fence probe finds them
        deleted = 0
        for name in self._store.list(paths.MANIFEST_DIR):
            mid = paths.parse_manifest_name(name)
            if mid is None or mid >= current or mid in keep_ids:
                continue
            since = self._manifest_times.get(mid)
            if since is None:
                since = self._manifest_times[mid] = self._superseded_at(mid, now)
            if now - since < grace:
                continue
            try:
                self._store.delete(name)
                self._manifest_times.pop(mid, None)
                deleted += 1
            except OSError as exc:
                log.warning("could not delete %s: %s", name, exc)
        return deleted

    def _superseded_at(self, manifest_id: int, now: float) -> float:
        """When manifest ``manifest_id`` stopped being the latest: its successor's
        ``created_ms`` (``now`` if that cannot be read, or lies in the future)."""
        try:
            created = self._mstore.load(manifest_id + 1).created_ms / 1000
        except (OSError, KvError):
            return now
        return min(created, now) if created > 0 else now


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
