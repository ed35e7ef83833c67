"""Which versions must survive a rewrite: pinned seqs, the watermark, the floor.

* :class:`SeqRegistry`: the seqs open snapshots and running transactions
  read at (a multiset); flushes and compactions keep the versions they see.
* The *retention watermark* ``W`` (persisted in the manifest as
  ``retention_seq``): reads at seqs >= W stay exact. By age
  (``retention=<seconds>``) it follows ``(seq, ms)`` samples taken at most
  once a second (:func:`watermark_at` is the pure rule).
* The *floor*: the oldest seq a new snapshot may read. A rewrite that kept
  only what pinned seqs and ``W`` need raises it (:meth:`Retention.rewrite_args`).
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections import deque
from typing import Any

from kvstore.clock import Clock
from kvstore.format.manifest import Manifest
from kvstore.options import Options

_MAX_SEQ_TIMES = 1024


class SeqRegistry:
    """Sequence numbers pinned by open snapshots (a multiset: seq -> count > 0)."""

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self.lock = threading.Lock()

    def add(self, seq: int) -> None:
        """Pin ``seq``; caller holds :attr:`lock`."""
        counts = self._counts
        counts[seq] = counts.get(seq, 0) + 1

    def remove(self, seq: int) -> None:
        counts = self._counts
        lock = self.lock
        lock.acquire()  # not `with`: this runs once per transaction (see CommitPath.commit)
        try:
            n = counts.get(seq, 0) - 1
            if n > 0:
                counts[seq] = n
            else:
                counts.pop(seq, None)
        finally:
            lock.release()

    def seqs(self) -> list[int]:
        return sorted(self._counts)

    def __len__(self) -> int:
        return sum(self._counts.values())


def watermark_at(
    retention_seq: int | None,
    age: Any,
    now: float,
    samples: list[tuple[int, int]],
) -> int | None:
    """The watermark a rewrite must honour at ``now`` (pure).

    ``retention_seq``: the persisted one; ``age``: the ``retention`` option
    (seconds keep versions by age through the ``(seq, ms)`` samples)."""
    w = retention_seq
    if isinstance(age, (int, float)) and not isinstance(age, bool):
        cutoff_ms = int((now - age) * 1000)
        i = bisect_right([t for _, t in samples], cutoff_ms)
        by_age = samples[i - 1][0] if i else 0
        w = by_age if w is None else max(w, by_age)
    return w


class Retention:
    def __init__(
        self, options: Options, clock: Clock, snapshots: SeqRegistry, manifest: Any
    ) -> None:
        """``manifest``: anything with a ``current`` manifest (the manifest writer)."""
        self._opts = options
        self._clock = clock
        self.snapshots = snapshots
        self._manifests = manifest
        self.floor_seq = 0  # reads at seqs below this may miss dropped versions
        self.seq_times: deque[tuple[int, int]] = deque(maxlen=_MAX_SEQ_TIMES)
        self._last_sample = 0.0
        self.by_age = isinstance(options.retention, (int, float)) and not isinstance(
            options.retention, bool
        )

    def sample(self, seq: int, now: float) -> None:
        """Remember when ``seq`` was written (at most once a second)."""
        if now - self._last_sample >= 1.0:
            self._last_sample = now
            samples = self.seq_times
            if len(samples) == samples.maxlen:
                # thin instead of forgetting: keep the whole span at half the detail
                kept = list(samples)[::2]
                samples.clear()
                samples.extend(kept)
            samples.append((seq, int(now * 1000)))

    def watermark(self) -> int | None:
        """The watermark flushes and compactions must honour right now."""
        return watermark_at(
            self._manifests.current.retention_seq,
            self._opts.retention,
            self._clock.time(),
            list(self.seq_times),
        )

    def public_watermark(self) -> int | None:
        """Reads at seqs at or above this stay exact; None when no watermark is kept."""
        w = self.watermark()
        if w is None:
            return None
        with self.snapshots.lock:
            return max(w, self.floor_seq)

    def floor(self) -> int:
        with self.snapshots.lock:
            return self.floor_seq

    def rewrite_args(self, max_input_seq: int) -> tuple[list[int], int | None]:
        """Pinned seqs and the watermark for a rewrite of data up to ``max_input_seq``.

        Also raises the floor: reads below it are no longer guaranteed exact.
        """
        w = self.watermark()
        with self.snapshots.lock:
            snaps = self.snapshots.seqs()
            bound = max_input_seq if w is None else min(w, max_input_seq)
            self.floor_seq = max(self.floor_seq, bound)
        return snaps, w

    def manifest_fields(self, m: Manifest, used: int | None) -> dict[str, Any]:
        """Manifest fields persisting the watermark a flush or compaction relied on.

        Never below the floor: versions under it may be gone already (written
        without a watermark, or with a higher one), and after a reopen the
        persisted watermark is all that tells which reads are exact."""
        fields: dict[str, Any] = {"seq_times": tuple(self.seq_times)}
        if used is not None:
            with self.snapshots.lock:
                floor = self.floor_seq
            fields["retention_seq"] = max(used, floor, m.retention_seq or 0)
        return fields
