"""Garbage collection: delete SSTs and manifests nothing references any more.

Files are deleted only once unreferenced for the grace period (readers in
other processes may still read an older manifest), counted from when they
became obsolete (recorded in every manifest). Checkpoints' pins stay.
Deletion never races a flush or a compaction: only files a written manifest
already replaced are candidates, and in-flight SSTs are skipped.
"""

from __future__ import annotations

import logging
from collections import Counter

from kvstore import paths
from kvstore.clock import Clock
from kvstore.engine.checkpoints import Checkpoints
from kvstore.engine.health import Health
from kvstore.engine.manifests import ManifestWriter
from kvstore.engine.sstfiles import SstFiles
from kvstore.errors import KvError
from kvstore.options import Options

log = logging.getLogger("kvstore")


class GarbageCollector:
    def __init__(
        self,
        options: Options,
        clock: Clock,
        health: Health,
        manifests: ManifestWriter,
        files: SstFiles,
        checkpoints: Checkpoints,
        counters: Counter[str],
    ) -> None:
        self._opts = options
        self._clock = clock
        self._health = health
        self._manifests = manifests
        self._files = files
        self._checkpoints = checkpoints
        self._counters = counters
        self.last_listing = clock.monotonic()
        self._manifest_times: dict[int, float] = {}  # manifest id -> when superseded

    def collect(self, grace_seconds: float | None = None) -> dict[str, int]:
        with self._files.lock:
            return self._collect_locked(grace_seconds)

    def _collect_locked(self, grace_seconds: float | None) -> dict[str, int]:
        health = self._health
        health.raise_if_broken()  # which files the store references is unknown
        grace = self._opts.gc_grace_seconds if grace_seconds is None else grace_seconds
        if health.fenced is None:
            self._checkpoints.expire()
        now = self._clock.time()
        files = self._files
        store = files.store
        # Reconcile with the listing (files of deleted checkpoints, or left by a crash).
        # Order matters: list, then copy the in-flight set, then read the live set and
        # the checkpoints' pins, both from that one manifest. A listed SST is then
        # either still in flight, or in the manifest read (live), or replaced by it:
        # then a checkpoint of that manifest pins it if any does. (Pins read before
        # the listing could miss a checkpoint created, and then compacted away from
        # the live tree, in between: GC would delete a live checkpoint's files.)
        listed = store.list(paths.SST_DIR)
        self.last_listing = self._clock.monotonic()
        inflight = set(files.inflight)
        m = self._manifests.current
        live = {s.id for s in m.all_ssts()}
        self._checkpoints.load(m)
        pinned = self._checkpoints.pinned()
        queued = {sst_id for _, sst_id in files.obsolete}
        for name in listed:
            sst_id = paths.parse_sst_name(name)
            if sst_id is None or sst_id in live or sst_id in queued or sst_id in inflight:
                continue
            if sst_id not in pinned:
                files.obsolete.append((now, sst_id))
        # A writer fenced without knowing it would see the new writer's SSTs as
        # garbage: make sure no newer writer exists. Its SSTs are all written after
        # its claim, so after this check and hence after the listing above. (One
        # listing of manifest/ per pass; _collect_manifests lists it anyway.)
        self._manifests.fence_check(sure=True)
        keep: list[tuple[float, str]] = []
        deleted_ssts = 0
        for when, sst_id in files.obsolete:
            if sst_id in live:
                continue
            if now - when < grace or sst_id in pinned:
                keep.append((when, sst_id))
                continue
            try:
                store.delete(paths.sst_name(sst_id))
                files.handles.pop(sst_id, None)
                deleted_ssts += 1
            except OSError as exc:
                log.warning("could not delete SST %s: %s", sst_id, exc)
                keep.append((when, sst_id))
        files.obsolete = keep
        deleted_manifests = self._collect_manifests(now, grace)
        self._counters["gc_deleted"] += deleted_ssts
        self._counters["gc_deleted_manifests"] += deleted_manifests
        return {"ssts": deleted_ssts, "manifests": deleted_manifests}

    def _collect_manifests(self, now: float, grace: float) -> int:
        m = self._manifests.current
        current = m.id
        keep_ids = {int(cp["manifest_id"]) for cp in m.checkpoints.values()}
        keep_ids.update(m.claims)  # an old writer's fence probe finds them
        store = self._files.store
        deleted = 0
        for name in store.list(paths.MANIFEST_DIR):
            mid = paths.parse_manifest_name(name)
            if mid is None or mid >= current or mid in keep_ids:
                continue
            since = self._manifest_times.get(mid)
            if since is None:
                since = self._manifest_times[mid] = self._superseded_at(mid, now)
            if now - since < grace:
                continue
            try:
                store.delete(name)
                self._manifest_times.pop(mid, None)
                deleted += 1
            except OSError as exc:
                log.warning("could not delete %s: %s", name, exc)
        return deleted

    def _superseded_at(self, manifest_id: int, now: float) -> float:
        """When manifest ``manifest_id`` stopped being the latest: its successor's
        ``created_ms`` (``now`` if that cannot be read, or lies in the future)."""
        try:
            created = self._manifests.mstore.load(manifest_id + 1).created_ms / 1000
        except (OSError, KvError):
            return now
        return min(created, now) if created > 0 else now
