"""Compaction: which files to merge (a pure plan) and the merge itself.

Shape of the tree, newest data on the left::

    L0:    [sst] [sst] [sst] [sst]          one per memtable flush; key ranges overlap
    runs:  [run 0: sst sst sst] [run 1: sst sst ...] ...
                                            each run: disjoint, sorted SSTs

Size-tiered policy (as in SlateDB):

* when ``l0_compaction_trigger`` L0 SSTs have piled up, merge *all* of them
  into one new run, placed before every existing run;
* when ``min_merge_width`` neighbouring runs have sizes within
  ``size_ratio`` of each other, merge them into one run in their place.

Only neighbouring (contiguous) sources are ever merged. Point reads take the
first source, newest first, that has a version at or below the read seq;
that is only right if every source is newer, for every key, than the ones
after it, and merging a non-contiguous pair would break it::

    run0: k@30   run1: k@20   run2: k@10
    merge run0+run2 -> [k@30, k@10] placed first: a read at seq 25 finds k@10. Wrong.

What a merge may drop (the rule of :func:`kvstore.iterators.retain`): a
version only when no open snapshot or running transaction reads it; the
newest version of every key is always kept. A tombstone is dropped only when
the output is the bottom run (nothing older exists below it) and it is the
oldest version kept for its key::

    versions of k:  v@9   tomb@6   v@2      snapshot at 7, none at 2..5
    kept:           v@9   tomb@6            (the snapshot at 7 must read "deleted")
    at the bottom, with no snapshot at 7:   v@9 only

Outputs are split at ``sst_target_bytes``, but never inside the versions of
one key (a run finds a key's SST by key range).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import accumulate, compress, repeat
from operator import add, ne

from kvstore.entries import Columns, Entry
from kvstore.format.manifest import SstMeta
from kvstore.iterators import retain_batch


@dataclass(frozen=True)
class CompactionPolicy:
    l0_compaction_trigger: int = 4
    min_merge_width: int = 4
    max_merge_width: int = 8
    size_ratio: float = 4.0


@dataclass(frozen=True)
class Plan:
    """Merge these L0 SSTs (ids) and runs ``runs[first_run:last_run]`` into one run."""

    l0_ids: tuple[str, ...]
    first_run: int
    last_run: int  # exclusive; first_run == last_run means no run is an input
    bottom: bool  # the output will be the oldest run: tombstones may go
    rewrite: bool = False  # never a trivial move (a full compaction purges and splits)

    @property
    def run_count(self) -> int:
        return self.last_run - self.first_run


def run_bytes(run: tuple[SstMeta, ...] | list[SstMeta]) -> int:
    return sum(s.size for s in run)


def plan(
    l0: list[SstMeta] | tuple[SstMeta, ...],
    runs: list[tuple[SstMeta, ...]] | tuple[tuple[SstMeta, ...], ...],
    policy: CompactionPolicy,
) -> Plan | None:
    """The next compaction to run, or None. Pure: depends only on its arguments."""
    if len(l0) >= policy.l0_compaction_trigger:
        # all L0s into a new run before every run (runs stay untouched)
        return Plan(tuple(s.id for s in l0), 0, 0, bottom=not runs)
    sizes = [run_bytes(r) for r in runs]
    best: tuple[int, int] | None = None
    for i in range(len(runs)):
        j = i + 1
        while j < len(runs) and j - i < policy.max_merge_width:
            window = sizes[i : j + 1]
            if max(window) > policy.size_ratio * max(1, min(window)):
                break
            j += 1
        if j - i >= policy.min_merge_width and (best is None or j - i > best[1] - best[0]):
            best = (i, j)
    if best is None:
        return None
    return Plan((), best[0], best[1], bottom=best[1] == len(runs))


def plan_full(
    l0: list[SstMeta] | tuple[SstMeta, ...],
    runs: list[tuple[SstMeta, ...]] | tuple[tuple[SstMeta, ...], ...],
    *,
    purge_tombstones: bool = True,
) -> Plan | None:
    """Everything into one run (``db.compact()``); None when that is already so.

    A single run that still holds tombstones is rewritten once more when
    ``purge_tombstones`` (an open snapshot may legitimately keep some)."""
    if (not l0 and len(runs) <= 1) and (
        not runs or not purge_tombstones or not sum(s.tombstones for s in runs[0])
    ):
        return None
    return Plan(tuple(s.id for s in l0), 0, len(runs), bottom=True, rewrite=True)


def drop_bottom_tombstones(entries: Iterator[Entry]) -> Iterator[Entry]:
    """Drop each key's oldest kept version when it is a tombstone (bottom run only)."""
    pending: Entry | None = None
    for entry in entries:
        if pending is not None:
            if pending[0] != entry[0] and pending[2] is None:
                pending = entry
                continue
            yield pending
        pending = entry
    if pending is not None and pending[2] is not None:
        yield pending


def compaction_chunks(
    batches: Iterator[list[Entry]],
    snapshot_seqs: list[int],
    bottom: bool,
    target_bytes: int,
    watermark: int | None = None,
) -> Iterator[list[Entry]]:
    """Turn merged batches (whole key groups) into output SST contents.

    Applies :func:`~kvstore.iterators.retain` and, for a bottom run,
    :func:`drop_bottom_tombstones`; cuts between batches (so between keys)
    once ``target_bytes`` is reached.
    """

    def kept_batches() -> Iterator[list[Entry]]:
        for batch in batches:
            kept = retain_batch(batch, snapshot_seqs, watermark)
            if bottom:
                if snapshot_seqs or watermark is not None:
                    kept = list(drop_bottom_tombstones(iter(kept)))
                else:  # one version per key left: drop the tombstones
                    kept = [e for e in kept if e[2] is not None]
            if kept:
                yield kept

    chunk: list[Entry] = []
    size = 0
    for kept in kept_batches():
        sizes = [len(e[0]) + 16 + (len(e[2]) if e[2] is not None else 0) for e in kept]
        if size + sum(sizes) < target_bytes:
            chunk.extend(kept)
            size += sum(sizes)
            continue
        # the target falls inside this batch: cut there, on a key boundary
        for entry, esize in zip(kept, sizes):
            if size >= target_bytes and entry[0] != chunk[-1][0]:
                yield chunk
                chunk = []
                size = 0
            chunk.append(entry)
            size += esize
    if chunk:
        yield chunk


def compaction_columns(
    batches: Iterator[Columns], bottom: bool, target_bytes: int
) -> Iterator[Columns]:
    """:func:`compaction_chunks` on columns, for when no snapshot, transaction,
    checkpoint or watermark needs an older version: keep each key's newest
    version and, in the bottom run, drop it if it is a tombstone. Keys are
    then unique, so a cut between any two entries is a cut between keys."""
    chunk: list[Columns] = []
    size = 0
    for keys, seqs, values in batches:
        newest = list(map(ne, keys, [None, *keys[:-1]]))
        if not all(newest):
            keys, seqs, values = _select(keys, seqs, values, newest)
        if bottom and None in values:
            keys, seqs, values = _select(keys, seqs, values, [v is not None for v in values])
        n = len(keys)
        if not n:
            continue
        vlens: Iterable[int] = (
            map(len, values) if None not in values else (len(v or b"") for v in values)  # type: ignore[arg-type]
        )
        # cum[i]: bytes of entries [0, i), each charged 16 + key + value as in compaction_chunks
        cum = list(accumulate(map(add, map(add, map(len, keys), vlens), repeat(16)), initial=0))
        start = 0
        while start < n:
            end = bisect_left(cum, target_bytes - size + cum[start], start + 1)
            if end > n:  # the rest stays below the target
                chunk.append(Columns(keys[start:], seqs[start:], values[start:]))
                size += cum[n] - cum[start]
                break
            chunk.append(Columns(keys[start:end], seqs[start:end], values[start:end]))
            yield Columns.concat(chunk)
            chunk = []
            size = 0
            start = end
    if chunk:
        yield Columns.concat(chunk)


def _select(
    keys: list[bytes], seqs: list[int], values: list[bytes | None], keep: list[bool]
) -> Columns:
    return Columns(
        list(compress(keys, keep)), list(compress(seqs, keep)), list(compress(values, keep))
    )


def simulate(
    flush_bytes: int, flushes: int, policy: CompactionPolicy, *, overwrite_fraction: float = 0.0
) -> dict[str, float]:
    """Write and space amplification of the policy for a simple workload, without I/O.

    Each flush stores ``flush_bytes``, of which a share ``overwrite_fraction``
    overwrites data written before, so it adds only ``flush_bytes * (1 - f)``
    of unique data. Every source carries its stored bytes and its unique
    bytes; a merge writes exactly the unique bytes of its inputs (the
    overwritten versions are dropped), so repeated merges never shrink data
    below what is live.
    """
    counter = [0]
    unique: dict[str, float] = {}

    def sst(size: int, live: float) -> SstMeta:
        counter[0] += 1
        meta = SstMeta(f"s{counter[0]}", size, 1, 0, 0, 0, b"a", b"b")
        unique[meta.id] = live
        return meta

    f = overwrite_fraction
    l0: list[SstMeta] = []
    runs: list[tuple[SstMeta, ...]] = []
    written = 0
    for _ in range(flushes):
        l0.insert(0, sst(flush_bytes, flush_bytes * (1 - f)))
        written += flush_bytes
        while (p := plan(l0, runs, policy)) is not None:
            inputs = [s for s in l0 if s.id in p.l0_ids]
            inputs += [s for r in runs[p.first_run : p.last_run] for s in r]
            live = sum(unique[s.id] for s in inputs)
            out = round(live)
            written += out
            l0 = [s for s in l0 if s.id not in p.l0_ids]
            runs = [*runs[: p.first_run], (sst(out, live),), *runs[p.last_run :]]
    stored = sum(s.size for s in l0) + sum(run_bytes(r) for r in runs)
    user = flush_bytes * flushes
    return {
        "write_amplification": written / user,
        "space_amplification": stored / max(1.0, user * (1 - f)),
        "l0_ssts": len(l0),
        "sorted_runs": len(runs),
    }
