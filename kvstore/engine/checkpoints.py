"""Checkpoints: named manifests whose SSTs stay until the name goes.

A checkpoint records ``manifest_id`` (the manifest written with it) and
``seq``. Compaction may replace its SSTs in the live tree; GC keeps the
files (the *pins*) and the manifest until the checkpoint is deleted or
expires, then they start a fresh grace period (a reader may still be
reading the checkpoint). Pins are cached by manifest id, never by name: a
name deleted and created again names another manifest.
"""

from __future__ import annotations

import logging
from typing import Any

from kvstore.clock import Clock
from kvstore.engine.manifests import ManifestWriter
from kvstore.engine.sstfiles import SstFiles
from kvstore.errors import CheckpointNotFound, KvError
from kvstore.format.manifest import Manifest

log = logging.getLogger("kvstore")

_CHECKPOINT_NAME_MAX = 128


def check_checkpoint_name(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"checkpoint name must be a str, not {type(name).__name__}")
    if not name or len(name) > _CHECKPOINT_NAME_MAX:
        raise ValueError(f"checkpoint name must be 1..{_CHECKPOINT_NAME_MAX} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise ValueError("checkpoint name must not contain control characters")
    return name


def check_expiry(expires_in: Any) -> None:
    if expires_in is not None and (
        isinstance(expires_in, bool) or not isinstance(expires_in, (int, float))
    ):
        raise TypeError("expires_in must be a number of seconds or None")
    if expires_in is not None and not 0 < expires_in < float("inf"):
        raise ValueError(f"expires_in must be a positive, finite number, not {expires_in}")


class Checkpoints:
    def __init__(self, manifests: ManifestWriter, files: SstFiles, clock: Clock) -> None:
        self._manifests = manifests
        self._files = files
        self._clock = clock
        self.pins: dict[str, frozenset[str]] = {}  # checkpoint name -> pinned SST ids
        self._pin_cache: dict[int, frozenset[str]] = {}  # checkpoint manifest id -> SST ids

    def create(self, name: str, expires_in: float | None) -> dict[str, Any]:
        """Write the checkpoint (the caller flushed first); returns its description."""
        now_ms = int(self._clock.time() * 1000)

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

        with self._files.lock:  # a GC pass sees the checkpoint with its pins, or neither
            m = self._manifests.advance(change)
            self._pin_cache[m.id] = self.pins[name] = frozenset(s.id for s in m.all_ssts())
        return {"name": name, **m.checkpoints[name]}

    def list(self) -> list[dict[str, Any]]:
        cps = self._manifests.current.checkpoints
        return sorted(({"name": n, **cp} for n, cp in cps.items()), key=lambda c: c["created_ms"])

    def delete(self, name: str) -> None:
        cps = self._manifests.current.checkpoints
        if name not in cps:
            raise CheckpointNotFound(name)

        def change(m: Manifest) -> Manifest:
            return m.evolve(checkpoints={k: v for k, v in m.checkpoints.items() if k != name})

        try:
            pinned = self.pinned_by(cps[name])
        except (OSError, KvError):  # a missing or damaged checkpoint can still be deleted
            pinned = frozenset()
        with self._files.lock:  # no GC pass between unpinning and the fresh grace
            now = self._clock.time()
            self._manifests.advance(change, retired=pinned, now=now)
            self._release({name: pinned}, now)

    def pinned_by(self, cp: dict[str, Any]) -> frozenset[str]:
        """The SST ids a checkpoint pins (its manifest's SSTs)."""
        manifest_id = int(cp["manifest_id"])
        pinned = self._pin_cache.get(manifest_id)
        if pinned is None:
            pinned = frozenset(s.id for s in self._manifests.mstore.load(manifest_id).all_ssts())
            self._pin_cache[manifest_id] = pinned
        return pinned

    def _release(self, released: dict[str, frozenset[str]], now: float) -> None:
        """Forget deleted or expired checkpoints' pins; their files start a fresh grace
        period at ``now``."""
        ids = frozenset().union(*released.values())
        with self._files.lock:
            for name in released:
                self.pins.pop(name, None)
            self._files.restart_grace(ids, now)

    def load(self, m: Manifest | None = None) -> None:
        """Pinned SST ids of every checkpoint of ``m`` (default: the current manifest)."""
        cps = (self._manifests.current if m is None else m).checkpoints
        self.pins = {name: self.pinned_by(cp) for name, cp in cps.items()}
        wanted = {int(cp["manifest_id"]) for cp in cps.values()}
        for manifest_id in [i for i in self._pin_cache if i not in wanted]:
            self._pin_cache.pop(manifest_id, None)

    def pinned(self) -> frozenset[str]:
        return frozenset().union(*self.pins.values()) if self.pins else frozenset()

    def expire(self) -> None:
        now_ms = int(self._clock.time() * 1000)
        cps = self._manifests.current.checkpoints
        expired = [
            n
            for n, cp in cps.items()
            if cp.get("expires_ms") is not None and cp["expires_ms"] <= now_ms
        ]
        if expired:
            pinned = {n: self.pinned_by(cps[n]) for n in expired}
            now = self._clock.time()
            self._manifests.advance(
                lambda m: m.evolve(
                    checkpoints={k: v for k, v in m.checkpoints.items() if k not in expired}
                ),
                retired=frozenset().union(*pinned.values()),
                now=now,
            )
            self._release(pinned, now)
            log.info("checkpoints expired: %s", ", ".join(expired))
