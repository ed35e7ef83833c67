"""Reads over an engine state: the one place that composes sources.

A :class:`State` is frozen and replaced whole under the commit lock; readers
take a reference and never lock. Point reads stop at the first source (newest
first) holding a version at or below the read seq; scans merge every source
and apply visibility (see :mod:`kvstore.iterators`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass

from kvstore.entries import Entry
from kvstore.format.manifest import SstMeta
from kvstore.format.sst_reader import SstReader
from kvstore.iterators import EntrySource, OwnWrites, merge, visible, visible_slices
from kvstore.memtable import ABSENT, Memtable


@dataclass(frozen=True, slots=True)
class SstHandle:
    meta: SstMeta
    reader: SstReader


@dataclass(frozen=True, slots=True)
class SortedRun:
    ssts: tuple[SstHandle, ...]
    last_keys: tuple[bytes, ...]  # for bisecting to the one SST that may hold a key

    @classmethod
    def of(cls, ssts: tuple[SstHandle, ...]) -> SortedRun:
        return cls(ssts, tuple(h.meta.last_key for h in ssts))

    def find(self, key: bytes) -> SstHandle | None:
        i = bisect_left(self.last_keys, key)
        if i < len(self.ssts) and self.ssts[i].meta.first_key <= key:
            return self.ssts[i]
        return None

    def iter_forward(
        self, start: bytes | None, end: bytes | None, *, fill_cache: bool = True
    ) -> Iterator[Entry]:
        for h in self.ssts:
            if end is not None and h.meta.first_key >= end:
                return
            if start is not None and h.meta.last_key < start:
                continue
            yield from h.reader.iter_forward(start, end, fill_cache=fill_cache)

    def iter_reverse(self, start: bytes | None, end: bytes | None) -> Iterator[Entry]:
        for h in reversed(self.ssts):
            if start is not None and h.meta.last_key < start:
                return
            if end is not None and h.meta.first_key >= end:
                continue
            yield from h.reader.iter_reverse(start, end)


@dataclass(frozen=True, slots=True)
class State:
    active: Memtable
    immutable: tuple[Memtable, ...]  # newest first
    l0: tuple[SstHandle, ...]  # newest first
    runs: tuple[SortedRun, ...]  # newest first


def get(state: State, key: bytes, read_seq: int) -> bytes | None:
    v = state.active.value(key, read_seq)
    if v is not ABSENT:
        return v
    for mt in state.immutable:
        v = mt.value(key, read_seq)
        if v is not ABSENT:
            return v
    for h in state.l0:
        e = h.reader.get(key, read_seq)
        if e is not None:
            return e[2]
    for run in state.runs:
        found = run.find(key)
        if found is not None:
            e = found.reader.get(key, read_seq)
            if e is not None:
                return e[2]
    return None


def _overlaps(meta: SstMeta, start: bytes | None, end: bytes | None) -> bool:
    return (start is None or meta.last_key >= start) and (end is None or meta.first_key < end)


def sources(
    state: State, start: bytes | None, end: bytes | None, first: EntrySource | None = None
) -> list[EntrySource]:
    """The sources that may hold keys in [start, end), newest first."""
    found: list[EntrySource] = [] if first is None else [first]
    found += [mt for mt in (state.active, *state.immutable) if len(mt)]
    found += [h.reader for h in state.l0 if _overlaps(h.meta, start, end)]
    found += state.runs
    return found


def entries(
    state: State,
    start: bytes | None,
    end: bytes | None,
    reverse: bool,
    first: EntrySource | None = None,
) -> Iterator[Entry]:
    """Every version in [start, end), merged across sources (``first`` wins ties)."""
    srcs = sources(state, start, end, first)
    if reverse:
        return merge([s.iter_reverse(start, end) for s in srcs], reverse=True)
    return merge([s.iter_forward(start, end) for s in srcs])


def scan(
    state: State,
    start: bytes | None,
    end: bytes | None,
    reverse: bool,
    read_seq: int,
    own: OwnWrites | None = None,
) -> Iterator[tuple[bytes, bytes]]:
    """The visible ``(key, value)`` pairs at ``read_seq``; ``own``: a transaction's
    writes, shown over the committed state."""
    if start is not None and end is not None and start >= end:
        return iter(())
    if own is not None and own.any_in(start, end):
        return visible(entries(state, start, end, reverse, own), read_seq)
    if not reverse:
        single = _single_sorted_source(state, start, end)
        if single is not None:  # nothing to merge: decide visibility block by block
            return visible_slices(single, read_seq)
    return visible(entries(state, start, end, reverse), read_seq)


def _single_sorted_source(
    state: State, start: bytes | None, end: bytes | None
) -> Iterator[tuple[list[bytes], tuple[int, ...], list[bytes | None]]] | None:
    """Block slices when exactly one SST or run holds data in range and memtables are empty."""
    if len(state.active) or any(len(m) for m in state.immutable):
        return None
    l0 = [h for h in state.l0 if _overlaps(h.meta, start, end)]
    runs = [r for r in state.runs if any(_overlaps(h.meta, start, end) for h in r.ssts)]
    if len(l0) + len(runs) != 1:
        return None
    ssts = l0 or [h for h in runs[0].ssts if _overlaps(h.meta, start, end)]
    return (sl for h in ssts for sl in h.reader.iter_block_slices(start, end))
