"""Compaction: the pure planner, the merge helpers, the simulator, and the real thing.

Pure parts (no I/O) are checked against tables of cases and, where a brute
force is easy, against a hypothesis property:

* :func:`plan` / :func:`plan_full` (L0 trigger, windows of similar run sizes,
  min/max merge width, contiguity, ``bottom``, tombstone purge);
* :func:`drop_bottom_tombstones`, :func:`retain` (snapshots and watermark),
  :func:`compaction_chunks`;
* :func:`merge_batches` equals a heap merge (any batch size, 1 included);
* :func:`simulate` gives sane amplification numbers and prints nothing.

End to end, on real databases: background compaction under a write burst,
``db.compact()``, snapshots across a compaction, trivial moves, space after
overwrites, and backpressure when compaction keeps failing.
"""

from __future__ import annotations

import heapq
import logging
import random
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvstore
from kvstore.clock import Clock
from kvstore.compaction import (
    CompactionPolicy,
    Plan,
    compaction_chunks,
    drop_bottom_tombstones,
    plan,
    plan_full,
    simulate,
)
from kvstore.format.manifest import SstMeta
from kvstore.iterators import merge_batches, retain, visible
from kvstore.objstore import FaultyStore, MemoryStore

FAST: dict[str, Any] = {"fsync": False}


@pytest.fixture(autouse=True)
def _quiet_kvstore_logs():
    # injected compaction failures log an error per retry; keep the output readable
    logger = logging.getLogger("kvstore")
    old = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(old)


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
_ids = iter(range(10**9))


def sst(size: int = 100, *, tombstones: int = 0) -> SstMeta:
    n = next(_ids)
    return SstMeta(f"s{n:06d}", size, 10, tombstones, 1, 10, b"a", b"z")


def l0s(n: int) -> list[SstMeta]:
    return [sst() for _ in range(n)]


def runs_of(*sizes: int | list[int]) -> list[tuple[SstMeta, ...]]:
    """A run per argument: an int is a one-SST run of that size, a list a run of SSTs."""
    out = []
    for s in sizes:
        parts = s if isinstance(s, list) else [s]
        out.append(tuple(sst(p) for p in parts))
    return out


def as_tuple(p: Plan | None, l0: list[SstMeta]) -> tuple | None:
    """(number of L0 inputs, first_run, last_run, bottom); L0 inputs must be all of L0."""
    if p is None:
        return None
    if p.l0_ids:
        assert p.l0_ids == tuple(s.id for s in l0), "an L0 merge takes every L0, in order"
    return (len(p.l0_ids), p.first_run, p.last_run, p.bottom)


DEFAULT = CompactionPolicy()  # trigger 4, widths 4..8, ratio 4


# ---------------------------------------------------------------------------
# plan: tables
# ---------------------------------------------------------------------------
PLAN_CASES = [
    # (id, L0 count, run sizes, policy, expected (l0 inputs, first, last, bottom) or None)
    ("empty", 0, [], DEFAULT, None),
    ("l0-below-trigger", 3, [], DEFAULT, None),
    ("l0-at-trigger-no-runs", 4, [], DEFAULT, (4, 0, 0, True)),
    ("l0-above-trigger", 5, [], DEFAULT, (5, 0, 0, True)),
    ("l0-at-trigger-with-runs", 4, [100], DEFAULT, (4, 0, 0, False)),
    ("l0-trigger-2-below", 1, [], CompactionPolicy(l0_compaction_trigger=2), None),
    ("l0-trigger-2-at", 2, [100, 100], CompactionPolicy(l0_compaction_trigger=2), (2, 0, 0, False)),
    ("l0-wins-over-runs", 4, [10, 10, 10, 10], DEFAULT, (4, 0, 0, False)),
    ("l0-below-trigger-runs-merge", 3, [10, 10, 10, 10], DEFAULT, (0, 0, 4, True)),
    ("three-similar-runs", 0, [10, 10, 10], DEFAULT, None),
    ("four-similar-runs", 0, [10, 10, 10, 10], DEFAULT, (0, 0, 4, True)),
    ("five-similar-runs", 0, [10] * 5, DEFAULT, (0, 0, 5, True)),
    ("eight-similar-runs", 0, [10] * 8, DEFAULT, (0, 0, 8, True)),
    # more runs than max width: the newest window of 8; the oldest run is left out
    ("nine-similar-runs", 0, [10] * 9, DEFAULT, (0, 0, 8, False)),
    ("ten-similar-runs", 0, [10] * 10, DEFAULT, (0, 0, 8, False)),
    # a small new run in front of four similar ones: those four, at the bottom
    ("small-then-four", 0, [1, 100, 100, 100, 100], DEFAULT, (0, 1, 5, True)),
    ("four-then-small", 0, [100, 100, 100, 100, 1], DEFAULT, (0, 0, 4, False)),
    ("four-then-huge", 0, [100, 100, 100, 100, 10_000], DEFAULT, (0, 0, 4, False)),
    ("huge-in-the-middle", 0, [10, 10, 10, 10_000, 10, 10, 10], DEFAULT, None),
    ("huge-in-the-middle-2", 0, [10, 10, 10, 10_000, 10, 10, 10, 10], DEFAULT, (0, 4, 8, True)),
    ("within-ratio-edge", 0, [10, 40, 40, 40], DEFAULT, (0, 0, 4, True)),  # 40 <= 4 * 10
    ("just-over-ratio", 0, [10, 41, 41, 41], DEFAULT, None),
    ("doubling-sizes", 0, [1, 2, 4, 8, 16, 32], DEFAULT, None),
    (
        "doubling-sizes-ratio-8",
        0,
        [1, 2, 4, 8, 16, 32],
        CompactionPolicy(size_ratio=8.0),
        (0, 0, 4, False),
    ),
    ("zero-sized-runs", 0, [0, 0, 0, 0], DEFAULT, (0, 0, 4, True)),
    ("zero-and-small", 0, [0, 4, 4, 4], DEFAULT, (0, 0, 4, True)),  # max(1, min) = 1
    ("zero-and-five", 0, [0, 5, 5, 5], DEFAULT, None),
    # min width 2: the widest window wins; among equally wide ones the newest
    (
        "widest-window-wins",
        0,
        [10, 10, 1000, 1000, 1000],
        CompactionPolicy(min_merge_width=2),
        (0, 2, 5, True),
    ),
    (
        "tie-newest-wins",
        0,
        [10, 10, 1000, 1000],
        CompactionPolicy(min_merge_width=2),
        (0, 0, 2, False),
    ),
    (
        "max-width-3",
        0,
        [10] * 7,
        CompactionPolicy(min_merge_width=2, max_merge_width=3),
        (0, 0, 3, False),
    ),
    (
        "min-equals-max",
        0,
        [10, 10],
        CompactionPolicy(min_merge_width=2, max_merge_width=2),
        (0, 0, 2, True),
    ),
    ("single-run", 0, [100], CompactionPolicy(min_merge_width=2), None),
    # run sizes are the sum of their SSTs
    ("multi-sst-runs", 0, [[5, 5], 10, [2, 3, 5], 10], DEFAULT, (0, 0, 4, True)),
    ("multi-sst-runs-big", 0, [[50, 50], 10, 10, 10], DEFAULT, None),  # 100 > 4 * 10
]


@pytest.mark.parametrize(
    "n_l0, sizes, policy, want", [c[1:] for c in PLAN_CASES], ids=[c[0] for c in PLAN_CASES]
)
def test_plan_table(n_l0, sizes, policy, want):
    l0 = l0s(n_l0)
    runs = runs_of(*sizes)
    p = plan(l0, runs, policy)
    assert as_tuple(p, l0) == want
    # pure: same answer again, with tuples instead of lists
    assert as_tuple(plan(tuple(l0), tuple(runs), policy), l0) == want


def _valid(sizes: list[int], ratio: float) -> bool:
    return max(sizes) <= ratio * max(1, min(sizes))


@settings(max_examples=400, deadline=None, database=None)
@given(
    n_l0=st.integers(0, 6),
    sizes=st.lists(st.sampled_from([0, 1, 3, 10, 12, 30, 40, 100, 400, 1000]), max_size=12),
    trigger=st.integers(2, 5),
    min_w=st.integers(2, 5),
    extra_w=st.integers(0, 5),
    ratio=st.sampled_from([1.0, 1.5, 2.0, 4.0, 10.0]),
)
def test_plan_property(n_l0, sizes, trigger, min_w, extra_w, ratio):
    """Against a brute force: the widest valid window of neighbouring runs, newest first."""
    policy = CompactionPolicy(
        l0_compaction_trigger=trigger,
        min_merge_width=min_w,
        max_merge_width=min_w + extra_w,
        size_ratio=ratio,
    )
    l0 = l0s(n_l0)
    runs = runs_of(*sizes)
    p = plan(l0, runs, policy)
    if n_l0 >= trigger:
        assert p is not None and p.l0_ids == tuple(s.id for s in l0)
        assert (p.first_run, p.last_run) == (0, 0)  # a new run in front; runs untouched
        assert p.bottom == (not runs)
        return
    windows = [
        (i, j)
        for i in range(len(sizes))
        for j in range(i + min_w, min(len(sizes), i + policy.max_merge_width) + 1)
        if _valid(sizes[i:j], ratio)
    ]
    if not windows:
        assert p is None
        return
    widest = max(j - i for i, j in windows)
    first = min(i for i, j in windows if j - i == widest)
    assert p is not None
    assert p.l0_ids == ()
    # neighbouring runs only: a slice [first_run, last_run) of the runs
    assert 0 <= p.first_run < p.last_run <= len(runs)
    assert (p.first_run, p.last_run) == (first, first + widest)
    assert min_w <= p.run_count <= policy.max_merge_width
    assert _valid(sizes[p.first_run : p.last_run], ratio)
    # bottom exactly when the oldest run is an input
    assert p.bottom == (p.last_run == len(runs))


# ---------------------------------------------------------------------------
# plan_full
# ---------------------------------------------------------------------------
PLAN_FULL_CASES = [
    # (id, L0 count, runs as lists of (size, tombstones), purge, expected)
    ("nothing", 0, [], True, None),
    ("nothing-no-purge", 0, [], False, None),
    ("one-clean-run", 0, [[(100, 0)]], True, None),
    ("one-clean-run-multi-sst", 0, [[(100, 0), (50, 0)]], True, None),
    ("one-run-with-tombstones", 0, [[(100, 0), (50, 3)]], True, (0, 0, 1, True)),
    ("one-run-with-tombstones-no-purge", 0, [[(100, 3)]], False, None),
    ("l0-only", 3, [], True, (3, 0, 0, True)),
    ("one-l0", 1, [], False, (1, 0, 0, True)),
    ("l0-and-run", 2, [[(100, 0)]], False, (2, 0, 1, True)),
    ("two-runs", 0, [[(100, 0)], [(10, 0)]], False, (0, 0, 2, True)),
    ("l0-and-runs", 5, [[(1, 0)], [(10, 0)], [(100, 1)]], True, (5, 0, 3, True)),
]


@pytest.mark.parametrize(
    "n_l0, run_specs, purge, want",
    [c[1:] for c in PLAN_FULL_CASES],
    ids=[c[0] for c in PLAN_FULL_CASES],
)
def test_plan_full_table(n_l0, run_specs, purge, want):
    l0 = l0s(n_l0)
    runs = [tuple(sst(size, tombstones=t) for size, t in run) for run in run_specs]
    assert as_tuple(plan_full(l0, runs, purge_tombstones=purge), l0) == want


def test_plan_full_default_purges_tombstones():
    runs = [(sst(10, tombstones=1),)]
    assert as_tuple(plan_full([], runs), []) == (0, 0, 1, True)


# ---------------------------------------------------------------------------
# drop_bottom_tombstones, retain, compaction_chunks
# ---------------------------------------------------------------------------
DROP_CASES = [
    ("empty", [], []),
    ("lone-tombstone", [(b"a", 5, None)], []),
    ("lone-value", [(b"a", 5, b"x")], [(b"a", 5, b"x")]),
    ("value-over-tombstone", [(b"a", 9, b"x"), (b"a", 6, None)], [(b"a", 9, b"x")]),
    (
        "tombstone-over-value",
        [(b"a", 9, None), (b"a", 6, b"x")],
        [(b"a", 9, None), (b"a", 6, b"x")],
    ),
    ("two-tombstones", [(b"a", 9, None), (b"a", 6, None)], [(b"a", 9, None)]),
    (
        "tombstone-in-the-middle",
        [(b"a", 9, b"x"), (b"a", 6, None), (b"a", 2, b"y")],
        [(b"a", 9, b"x"), (b"a", 6, None), (b"a", 2, b"y")],
    ),
    (
        "several-keys",
        [(b"a", 3, None), (b"b", 2, b"v"), (b"c", 1, None)],
        [(b"b", 2, b"v")],
    ),
    (
        "mixed",
        [(b"a", 9, b"x"), (b"a", 6, None), (b"b", 4, None), (b"b", 2, b"v"), (b"c", 1, None)],
        [(b"a", 9, b"x"), (b"b", 4, None), (b"b", 2, b"v")],
    ),
    ("empty-value-is-not-a-tombstone", [(b"a", 3, b"")], [(b"a", 3, b"")]),
    ("last-key-tombstone", [(b"a", 3, b"x"), (b"b", 2, None)], [(b"a", 3, b"x")]),
]


@pytest.mark.parametrize(
    "entries, want", [c[1:] for c in DROP_CASES], ids=[c[0] for c in DROP_CASES]
)
def test_drop_bottom_tombstones_table(entries, want):
    assert list(drop_bottom_tombstones(iter(entries))) == want


K9, K6, K2 = (b"k", 9, b"v9"), (b"k", 6, b"v6"), (b"k", 2, b"v2")
T6 = (b"k", 6, None)
RETAIN_CASES = [
    # (id, entries, snapshot seqs, watermark, expected)
    ("newest-only", [K9, K6, K2], [], None, [K9]),
    ("docstring", [K9, K6, K2], [1, 7], None, [K9, K6]),
    ("docstring-watermark-4", [K9, K6, K2], [1, 7], 4, [K9, K6, K2]),
    ("snapshot-at-version-seq", [K9, K6, K2], [6], None, [K9, K6]),
    ("snapshot-at-newest-seq", [K9, K6, K2], [9], None, [K9]),
    ("snapshot-at-oldest-only", [K9, K6, K2], [2], None, [K9, K2]),
    ("snapshot-below-all", [K9, K6, K2], [1], None, [K9]),
    ("snapshot-above-all", [K9, K6, K2], [100], None, [K9]),
    ("snapshot-just-below-newer", [K9, K6, K2], [5], None, [K9, K2]),
    ("watermark-0-keeps-all", [K9, K6, K2], [], 0, [K9, K6, K2]),
    ("watermark-5", [K9, K6, K2], [], 5, [K9, K6, K2]),
    ("watermark-6", [K9, K6, K2], [], 6, [K9, K6]),
    ("watermark-8", [K9, K6, K2], [], 8, [K9, K6]),
    ("watermark-9", [K9, K6, K2], [], 9, [K9]),
    ("watermark-high", [K9, K6, K2], [], 100, [K9]),
    ("watermark-9-plus-snapshot", [K9, K6, K2], [3], 9, [K9, K2]),
    ("tombstone-newest-kept", [(b"k", 9, None), K6], [], None, [(b"k", 9, None)]),
    ("tombstone-read-by-snapshot", [K9, T6, K2], [7], None, [K9, T6]),
    (
        "two-keys",
        [(b"a", 8, b"a8"), (b"a", 3, b"a3"), (b"b", 7, b"b7"), (b"b", 1, b"b1")],
        [4],
        None,
        [(b"a", 8, b"a8"), (b"a", 3, b"a3"), (b"b", 7, b"b7"), (b"b", 1, b"b1")],
    ),
    (
        "two-keys-watermark",
        [(b"a", 8, b"a8"), (b"a", 3, b"a3"), (b"b", 7, b"b7"), (b"b", 1, b"b1")],
        [],
        7,
        [(b"a", 8, b"a8"), (b"a", 3, b"a3"), (b"b", 7, b"b7")],
    ),
]


@pytest.mark.parametrize(
    "entries, snaps, watermark, want",
    [c[1:] for c in RETAIN_CASES],
    ids=[c[0] for c in RETAIN_CASES],
)
def test_retain_table(entries, snaps, watermark, want):
    assert list(retain(iter(entries), snaps, watermark)) == want


@st.composite
def version_lists(draw):
    """Internal-order entries (key asc, seq desc) with unique seqs."""
    keys = sorted(draw(st.sets(st.sampled_from([b"a", b"b", b"c", b"d"]), max_size=4)))
    counts = draw(st.lists(st.integers(1, 4), min_size=len(keys), max_size=len(keys)))
    seqs = draw(st.permutations(list(range(1, sum(counts) + 1))))
    out = []
    pos = 0
    for key, c in zip(keys, counts):
        mine = sorted(seqs[pos : pos + c], reverse=True)
        pos += c
        for s in mine:
            out.append((key, s, draw(st.one_of(st.none(), st.just(b"v%d" % s)))))
    return out


@settings(max_examples=200, deadline=None, database=None)
@given(
    entries=version_lists(),
    snaps=st.lists(st.integers(0, 20), max_size=4, unique=True).map(sorted),
    watermark=st.one_of(st.none(), st.integers(0, 20)),
    bottom=st.booleans(),
)
def test_retain_keeps_every_protected_read_exact(entries, snaps, watermark, bottom):
    """Reads at snapshot seqs, at seqs >= the watermark and at the latest seq see
    exactly what they saw before (also after the bottom-run tombstone drop)."""
    kept = list(retain(iter(entries), snaps, watermark))
    if bottom:
        kept = list(drop_bottom_tombstones(iter(kept)))
    assert set(kept) <= set(entries)
    top = max((e[1] for e in entries), default=0)
    reads = set(snaps) | {top, top + 1}
    if watermark is not None:
        reads |= set(range(watermark, top + 2))
    for r in reads:
        assert list(visible(kept, r)) == list(visible(entries, r)), r
    if not bottom:  # the newest version of every key is kept, tombstone or not
        newest = {}
        for e in entries:
            newest.setdefault(e[0], e)
        assert set(newest.values()) <= set(kept)


def test_compaction_chunks_split_between_keys_and_drop_bottom_tombstones():
    batches = [
        [(b"a", 9, b"x" * 50), (b"a", 3, b"old")],
        [(b"b", 8, None), (b"b", 2, b"y" * 50)],
        [(b"c", 7, b"z" * 50)],
        [(b"d", 6, None)],
    ]
    # no snapshots, bottom: newest per key, tombstones gone, one chunk per ~60 bytes
    chunks = list(compaction_chunks(iter(batches), [], True, 60))
    assert chunks == [[(b"a", 9, b"x" * 50)], [(b"c", 7, b"z" * 50)]]
    # not bottom: tombstones stay (older data may sit below)
    chunks = list(compaction_chunks(iter(batches), [], False, 10_000))
    assert chunks == [
        [(b"a", 9, b"x" * 50), (b"b", 8, None), (b"c", 7, b"z" * 50), (b"d", 6, None)]
    ]
    # a snapshot at 2 keeps b@2 and a@3 (its readers see them); bottom keeps the b tombstone
    chunks = list(compaction_chunks(iter(batches), [2, 3], True, 10_000))
    assert chunks == [
        [
            (b"a", 9, b"x" * 50),
            (b"a", 3, b"old"),
            (b"b", 8, None),
            (b"b", 2, b"y" * 50),
            (b"c", 7, b"z" * 50),
        ]
    ]
    # a watermark of 0 keeps everything but the bottom tombstone of d
    flat = [e for c in compaction_chunks(iter(batches), [], True, 1, watermark=0) for e in c]
    assert flat == [e for b in batches for e in b if e != (b"d", 6, None)]


# ---------------------------------------------------------------------------
# merge_batches == heap merge
# ---------------------------------------------------------------------------
@st.composite
def recency_ordered_sources(draw):
    """Sources newest first: every version in source i is newer than any in source j > i."""
    n = draw(st.integers(0, 5))
    alphabet = [bytes([c]) for c in b"abcdefgh"] + [b"a\x00", b"\xff", b"ab"]
    raw = []
    for _ in range(n):
        versions = draw(st.lists(st.sampled_from(alphabet), max_size=25))
        raw.append(versions)
    total = sum(len(v) for v in raw)
    seq = total
    sources = []
    for versions in raw:
        # this source's seqs: the next block of descending numbers
        block = list(range(seq, seq - len(versions), -1))
        seq -= len(versions)
        random_order = draw(st.permutations(block)) if block else []
        entries = [
            (k, s, None if s % 5 == 0 else b"v%d" % s) for k, s in zip(versions, random_order)
        ]
        entries.sort(key=lambda e: (e[0], -e[1]))
        sources.append(entries)
    return sources


@settings(
    max_examples=250,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(sources=recency_ordered_sources(), batch=st.sampled_from([1, 2, 3, 4, 7, 8192]))
def test_merge_batches_equals_heap_merge(sources, batch):
    want = list(heapq.merge(*sources, key=lambda e: (e[0], -e[1])))
    batches = list(merge_batches([iter(s) for s in sources], batch))
    got = [e for b in batches for e in b]
    assert got == want
    assert all(batches), "an empty batch was yielded"
    # every batch holds whole key groups: a key never continues into the next batch
    for prev, nxt in zip(batches, batches[1:]):
        assert prev[-1][0] < nxt[0][0]


def test_merge_batches_batch_size_one_with_long_key_groups():
    a = [(b"k", s, b"a") for s in range(30, 20, -1)] + [(b"z", 20, b"a")]
    b = [(b"k", s, b"b") for s in range(10, 0, -1)] + [(b"m", 0, b"b")]
    want = list(heapq.merge(a, b, key=lambda e: (e[0], -e[1])))
    batches = list(merge_batches([iter(a), iter(b)], 1))
    assert [e for x in batches for e in x] == want
    assert [e[0] for e in batches[0]] == [b"k"] * 20  # the whole key group at once


# ---------------------------------------------------------------------------
# simulate
# ---------------------------------------------------------------------------
def test_simulate_write_amplification_grows_slowly_and_prints_nothing(capsys):
    policy = CompactionPolicy()
    flushes = [4, 16, 64, 256, 1024, 4096]
    results = [simulate(1000, f, policy) for f in flushes]
    assert capsys.readouterr() == ("", "")
    was = [r["write_amplification"] for r in results]
    assert all(w >= 1.0 for w in was)
    assert was == sorted(was), was  # more data, more rewriting...
    assert was[-1] < 10, was  # ...but only logarithmically more (1000x data, < 10x)
    assert was[-1] - was[0] < 6
    for r in results:
        assert r["space_amplification"] == pytest.approx(1.0)  # no overwrites: no waste
        assert r["l0_ssts"] < policy.l0_compaction_trigger
        assert 1 <= r["sorted_runs"] <= 4 * policy.max_merge_width
    # one flush: only the flush itself was written
    one = simulate(1000, 1, policy)
    assert one["write_amplification"] == 1.0
    assert one["l0_ssts"] == 1 and one["sorted_runs"] == 0


def test_simulate_eager_policy_writes_more():
    lazy = simulate(1000, 256, CompactionPolicy())
    eager = simulate(
        1000,
        256,
        CompactionPolicy(l0_compaction_trigger=2, min_merge_width=2, max_merge_width=2),
    )
    assert eager["write_amplification"] > lazy["write_amplification"]
    assert eager["sorted_runs"] <= lazy["sorted_runs"] + 8


@pytest.mark.parametrize("flushes", [4, 16, 64, 256])
@pytest.mark.parametrize("overwrite", [0.1, 0.3])
def test_simulate_overwrites_reduce_write_amplification(flushes, overwrite):
    plain = simulate(1000, flushes, CompactionPolicy())
    over = simulate(1000, flushes, CompactionPolicy(), overwrite_fraction=overwrite)
    assert 1.0 <= over["write_amplification"] <= plain["write_amplification"]


def test_simulate_space_amplification_one_merge_with_overwrites():
    # 4 flushes, one L0 merge: the run holds exactly the live data
    r = simulate(1000, 4, CompactionPolicy(), overwrite_fraction=0.3)
    assert r["space_amplification"] == pytest.approx(1.0)
    assert r["write_amplification"] == pytest.approx(1.7)


@pytest.mark.parametrize("flushes", [16, 256])
def test_simulate_space_amplification_is_never_below_one(flushes):
    """Stored bytes can never be fewer than the live (unique) data: space
    amplification is >= 1, and modest overwrites keep it near 1.

    (Regression: simulate() used to shrink every merge output by
    ``overwrite_fraction`` again, so data merged k times shrank by (1 - f)**k
    while the denominator assumed one (1 - f): f=0.3 with 256 flushes gave
    ~0.30, a store holding less than its live data.)
    """
    r = simulate(1000, flushes, CompactionPolicy(), overwrite_fraction=0.3)
    assert 0.99 <= r["space_amplification"] <= 2.0, r


# ---------------------------------------------------------------------------
# end to end
# ---------------------------------------------------------------------------
def live_sst_bytes(db: kvstore.DB) -> int:
    s = db.stats()
    return s["l0_bytes"] + s["sorted_run_bytes"]


def tombstones_in_tree(db: kvstore.DB) -> int:
    return sum(m.tombstones for m in db.manifest.all_ssts())


def test_background_compaction_keeps_l0_bounded_under_a_write_burst():
    opts = dict(
        FAST,
        memtable_bytes=8 << 10,
        l0_compaction_trigger=2,
        l0_slowdown_ssts=4,
        l0_max_ssts=6,
        background_compaction=True,
    )
    db = kvstore.open(MemoryStore("burst"), **opts)
    seen: list[int] = []
    stop = threading.Event()

    def monitor():
        while not stop.is_set():
            seen.append(len(db.parts.commit.state.l0))
            time.sleep(0.0005)

    t = threading.Thread(target=monitor, daemon=True)
    t.start()
    rng = random.Random(7)
    model = {}
    try:
        for i in range(6000):
            k = b"key%05d" % rng.randrange(3000)
            v = rng.randbytes(rng.choice([10, 60, 200]))
            db.put(k, v, durable=False)
            model[k] = v
            if i % 500 == 0:
                seen.append(db.stats()["l0_ssts"])
        db.flush()
    finally:
        stop.set()
        t.join()
    try:
        stats = db.stats()
        assert stats["flushes"] >= 20
        assert stats["compactions"] >= 5
        assert max(seen) <= opts["l0_max_ssts"], max(seen)
        deadline = time.monotonic() + 60
        while db.stats()["l0_ssts"] >= opts["l0_compaction_trigger"]:
            assert time.monotonic() < deadline, "compaction did not catch up"
            time.sleep(0.02)
        assert dict(db.scan()) == model
        for k in rng.sample(sorted(model), 200):
            assert db.get(k) == model[k]
    finally:
        db.close()


def test_compact_leaves_one_run_and_drops_tombstones():
    db = kvstore.open(
        MemoryStore("compact"),
        **FAST,
        memtable_bytes=4096,
        l0_compaction_trigger=3,
        background_compaction=False,  # it could drop the tombstones counted before compact()
    )
    try:
        model = {}
        for i in range(800):
            k = b"k%04d" % (i % 300)
            if i % 7 == 3:
                db.delete(k, durable=False)
                model.pop(k, None)
            else:
                db.put(k, b"v%d" % i * 5, durable=False)
                model[k] = b"v%d" % i * 5
        for i in range(0, 300, 3):  # more deletes, some of keys that are gone already
            db.delete(b"k%04d" % i, durable=False)
            model.pop(b"k%04d" % i, None)
        db.flush()
        assert tombstones_in_tree(db) > 0
        db.compact()
        s = db.stats()
        assert (s["l0_ssts"], s["sorted_runs"]) == (0, 1)
        assert tombstones_in_tree(db) == 0
        assert dict(db.scan()) == model
        assert all(db.get(b"k%04d" % i) is None for i in range(0, 300, 3))
        # only live keys, one version each
        assert sum(m.count for m in db.manifest.all_ssts()) == len(model)
        # compact() again: nothing to do
        before = db.stats()["compactions"]
        db.compact()
        assert db.stats()["compactions"] == before
        # everything deleted: the tree ends up empty
        for k in list(model):
            db.delete(k, durable=False)
        db.compact()
        assert db.stats()["sorted_runs"] == 0 and db.stats()["l0_ssts"] == 0
        assert list(db.scan()) == []
    finally:
        db.close()


def test_snapshot_taken_before_compact_keeps_its_view(tmp_path):
    db = kvstore.open(str(tmp_path / "db"), **FAST, memtable_bytes=4096)
    try:
        for i in range(400):
            db.put(b"k%03d" % i, b"old%d" % i, durable=False)
        db.flush()
        old_view = dict(db.scan())
        snap = db.snapshot()
        for i in range(0, 400, 2):
            db.put(b"k%03d" % i, b"new%d" % i, durable=False)
        for i in range(1, 400, 4):
            db.delete(b"k%03d" % i, durable=False)
        new_view = dict(db.scan())
        db.compact()
        assert dict(snap.scan()) == old_view
        assert snap.get(b"k001") == b"old1" and db.get(b"k001") is None
        assert snap.get(b"k000") == b"old0" and db.get(b"k000") == b"new0"
        assert list(snap.scan(b"k100", b"k104", reverse=True)) == [
            (b"k%03d" % i, b"old%d" % i) for i in (103, 102, 101, 100)
        ]
        assert dict(db.scan()) == new_view
        assert db.stats()["sorted_runs"] == 1
        assert tombstones_in_tree(db) > 0  # the snapshot still needs "was there, now deleted"
        snap.close()
        db.compact()  # one run with tombstones: rewritten once more, now without them
        assert tombstones_in_tree(db) == 0
        assert dict(db.scan()) == new_view
    finally:
        db.close()
    with kvstore.open(str(tmp_path / "db"), **FAST) as db:
        assert dict(db.scan()) == new_view


@pytest.mark.parametrize("backend", ["memory", "local"])
def test_trivial_moves_for_sequential_loads(backend, tmp_path):
    store: Any = MemoryStore("seq") if backend == "memory" else str(tmp_path / "db")
    db = kvstore.open(store, **FAST, memtable_bytes=8 << 10, l0_compaction_trigger=2)
    model = {}
    try:
        for i in range(4000):
            k = b"seq%06d" % i
            model[k] = b"value-%d" % i * 3
            db.put(k, model[k], durable=False)
        db.flush()
        deadline = time.monotonic() + 60
        while db.stats()["l0_ssts"] >= 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        s = db.stats()
        assert s["trivial_moves"] > 0, s
        assert dict(db.scan()) == model
        assert db.get(b"seq000000") == model[b"seq000000"]
        assert db.get(b"seq003999") == model[b"seq003999"]
        assert db.get(b"seq004000") is None
        # overwrite a slice and delete another, then compact: still right
        for i in range(1000, 1100):
            model[b"seq%06d" % i] = b"again"
            db.put(b"seq%06d" % i, b"again", durable=False)
        for i in range(2000, 2050):
            del model[b"seq%06d" % i]
            db.delete(b"seq%06d" % i, durable=False)
        db.compact()
        assert dict(db.scan()) == model
        assert list(db.scan(b"seq001998", b"seq002052")) == [
            (b"seq001998", model[b"seq001998"]),
            (b"seq001999", model[b"seq001999"]),
            (b"seq002050", model[b"seq002050"]),
            (b"seq002051", model[b"seq002051"]),
        ]
    finally:
        db.close()
    with kvstore.open(store, **FAST) as db:
        assert dict(db.scan()) == model


def test_space_after_many_overwrites_then_compact():
    """100k overwrites of 10k keys (incompressible 48-byte values), then compact():
    the SSTs hold little more than the live data (per-entry format overhead only)."""
    db = kvstore.open(MemoryStore("space"), **FAST, memtable_bytes=256 << 10)
    rng = random.Random(3)
    keys = [b"key%05d" % i for i in range(10_000)]
    live: dict[bytes, bytes] = {}
    try:
        for _ in range(200):  # in batches of 500
            blob = rng.randbytes(48 * 500)  # incompressible: the bytes are really there
            batch = kvstore.WriteBatch()
            for j, i in enumerate(rng.choices(range(len(keys)), k=500)):
                v = blob[48 * j : 48 * j + 48]
                batch.put(keys[i], v)
                live[keys[i]] = v
            db.write(batch, durable=False)
        assert db.stats()["compactions"] > 0  # background compaction ran meanwhile
        db.compact()
        live_bytes = sum(len(k) + len(v) for k, v in live.items())
        stored = live_sst_bytes(db)
        assert stored <= 1.5 * live_bytes, (stored, live_bytes)
        s = db.stats()
        assert s["space_amplification"] == pytest.approx(1.0)
        assert s["sorted_runs"] == 1 and s["l0_ssts"] == 0
        assert sum(m.count for m in db.manifest.all_ssts()) == len(live)  # one version each
        sample = rng.sample(sorted(live), 500)
        assert all(db.get(k) == live[k] for k in sample)
        assert dict(db.scan()) == live
    finally:
        db.close()


class CompactionSstFailures(FaultyStore):
    """SST uploads from the background compaction thread fail while ``failing`` is set."""

    failing = True
    refused = 0

    def put_if_absent(self, name: str, data: bytes) -> None:
        if (
            self.failing
            and name.startswith("sst/")
            and threading.current_thread().name == "kvstore-compact"
        ):
            self.refused += 1
            raise OSError("injected: compaction SST upload refused")
        super().put_if_absent(name, data)


def _running(thread: threading.Thread, function: str) -> bool:
    """Whether ``thread`` is inside a call of ``function`` right now."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


def test_failing_compaction_stalls_writers_then_recovers():
    memtable = 8 << 10
    opts = dict(
        FAST,
        memtable_bytes=memtable,
        max_immutable_memtables=2,
        l0_compaction_trigger=2,
        l0_slowdown_ssts=3,
        l0_max_ssts=4,
    )
    store = CompactionSstFailures(MemoryStore("backpressure"))
    db = kvstore.open(store, **opts)
    rng = random.Random(11)
    model: dict[bytes, bytes] = {}
    written = [0]
    errors: list[BaseException] = []
    total = 3000  # ~30 memtables: far more than L0 + frozen memtables can hold

    def writer():
        try:
            for i in range(total):
                k = b"k%05d" % rng.randrange(5000)  # random keys: no trivial moves
                v = b"%06d" % i + bytes(94)
                db.put(k, v, durable=False)
                model[k] = v
                written[0] += 1
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        # wait until the writer blocks in the commit path's stall (its stack shows it)
        # with L0 and the frozen memtables full; the deadline only bounds a hang
        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline, ("the writer never stalled", db.stats())
            assert t.is_alive(), f"writer finished or died while compaction fails: {errors}"
            s = db.stats()
            if _running(t, "_stall") and (s["l0_ssts"], s["immutable_memtables"]) == (
                opts["l0_max_ssts"],
                opts["max_immutable_memtables"],
            ):
                break
            time.sleep(0.02)
        last = written[0]  # stable while it stays in the stall
        s = db.stats()
        assert written[0] < total
        assert s["compaction_errors"] >= 1, s
        assert s["compaction_error"] is not None and "injected" in s["compaction_error"]
        assert store.refused >= 1
        # bounded: L0 is full, the frozen memtables wait, the active one is full
        assert s["l0_ssts"] == opts["l0_max_ssts"], s["levels"]
        assert s["immutable_memtables"] == opts["max_immutable_memtables"]
        assert s["l0_stalls"] >= 1 and s["write_stalls"] >= 1
        in_memory = s["memtable_bytes"] + s["immutable_bytes"]
        assert in_memory <= (opts["max_immutable_memtables"] + 1) * (memtable + 1024)
        # no progress at all while stalled (it does not keep buffering): a compaction
        # retry fails again, and the writer is still in the stall, nothing written
        refused = store.refused
        deadline = time.monotonic() + 60
        while store.refused == refused:
            assert time.monotonic() < deadline, "compaction never retried"
            time.sleep(0.01)
        assert _running(t, "_stall") and written[0] == last
        # reads still work during the stall
        some = next(iter(dict(model)))
        assert db.get(some) is not None
        # the fault clears: compaction retries (with backoff), the writer finishes
        store.failing = False
        t.join(30)
        assert not t.is_alive(), "writers stayed stalled after the fault cleared"
        assert not errors, errors
        assert written[0] == total
        db.flush()
        deadline = time.monotonic() + 15
        while db.stats()["compaction_error"] is not None or db.stats()["l0_ssts"] >= 2:
            assert time.monotonic() < deadline, db.stats()
            time.sleep(0.05)
        assert dict(db.scan()) == model
        db.compact()
        assert dict(db.scan()) == model
    finally:
        store.failing = False
        db.close()
    with kvstore.open(store.inner, **FAST) as db:
        assert dict(db.scan()) == model


def test_close_does_not_wait_for_a_compaction_that_keeps_failing():
    """With L0 full and compaction failing on every try, close() still flushes (L0
    goes past its limit) and returns; everything written is there after reopen."""
    store = CompactionSstFailures(MemoryStore(f"failing-close-{uuid.uuid4()}"))
    opts = dict(FAST, l0_compaction_trigger=2, l0_slowdown_ssts=2, l0_max_ssts=2)
    db = kvstore.open(store, **opts)
    closed = threading.Event()
    try:
        for i in range(2):  # overlapping L0s: no trivial move, compaction must upload
            db.put(b"a", b"v%d" % i)
            db.put(b"z", b"v%d" % i)
            db.flush()
        db.put(b"last", b"v")  # the memtable close() must flush, with L0 full
        deadline = time.monotonic() + 30
        while db.stats()["compaction_errors"] == 0:
            assert time.monotonic() < deadline, db.stats()
            time.sleep(0.01)
        closer = threading.Thread(target=lambda: (db.close(), closed.set()), daemon=True)
        closer.start()
        assert closed.wait(30), "close() hung behind the failing compaction"
    finally:
        store.failing = False
        db.close()
    with kvstore.open(store.inner, **FAST) as db:
        assert dict(db.scan()) == {b"a": b"v1", b"z": b"v1", b"last": b"v"}


def test_compact_drops_tombstones_of_disjoint_l0s():
    """db.compact() must leave no tombstone when no snapshot needs one.

    A regression test: when the store held only L0 SSTs with disjoint key
    ranges (a single L0 is enough), compact()'s one plan was a *trivial move*
    (the L0s became the bottom run unchanged, tombstones included)::

        db = kvstore.open("memory://x"); db.delete(b"a"); db.compact()
        sum(m.tombstones for m in db.manifest.all_ssts())  # was 1, expected 0
    """
    db = kvstore.open(MemoryStore("tomb-trivial"), **FAST)
    try:
        db.delete(b"a")
        db.compact()
        assert db.stats()["sorted_runs"] <= 1  # purging the only tombstone leaves nothing
        assert tombstones_in_tree(db) == 0, "compact() left a tombstone in the bottom run"
    finally:
        db.close()


def test_compaction_outputs_are_split_at_sst_target_bytes():
    """docs/architecture.md: "Outputs split at sst_target_bytes on key boundaries".

    A regression test: compaction_chunks once cut only between the batches
    merge_batches yields, and a merge of small inputs is one batch, so
    compact() wrote one ~240 KB SST however small sst_target_bytes was.
    """
    db = kvstore.open(MemoryStore("split"), **FAST, sst_target_bytes=4096, compression="none")
    try:
        for i in range(2000):
            db.put(b"k%05d" % i, b"v" * 100, durable=False)
        db.compact()
        sizes = [m.size for m in db.manifest.all_ssts()]
        assert len(sizes) >= 20, sizes
        assert max(sizes) <= 4 * 4096, sizes
    finally:
        db.close()


class SleepRecordingClock(Clock):
    """The real clock, noting each sleep a part asks for (thread name, seconds)."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeps: list[tuple[str, float]] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append((threading.current_thread().name, seconds))
        time.sleep(seconds)


class SlowCompactionUploads(FaultyStore):
    """Uploads from the compaction thread take a while (an object store far away)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.uploading = threading.Event()

    def put_if_absent(self, name: str, data: bytes) -> None:
        if threading.current_thread().name == "kvstore-compact":
            self.uploading.set()
            time.sleep(0.05)
        super().put_if_absent(name, data)


def test_close_does_not_fail_a_running_background_compaction():
    """close() while a background compaction is uploading must stop (or finish) it
    quietly: no compaction error counted, logged or left in stats, and no
    backoff sleep inside close().

    (Regression: close() used to set ``_closed`` first; the compactor's
    ``collect_garbage()`` then raised ClosedError, logged as "compaction failed
    (retrying in 0.1s): the database is closed".)
    """
    store = SlowCompactionUploads(MemoryStore("close-race"))
    clock = SleepRecordingClock()
    db = kvstore.open(store, clock=clock, **FAST, memtable_bytes=4096, l0_compaction_trigger=2)
    for i in range(300):
        db.put(b"k%04d" % (i * 7 % 300), b"x" * 30, durable=False)
    assert store.uploading.wait(10), "no background compaction started"
    clock.sleeps.clear()
    db.close()
    # close() waited for no backoff: no part slept on the store's clock while it
    # closed, and the compaction thread has stopped (close() joins it with a timeout)
    assert clock.sleeps == [], clock.sleeps
    assert not db.parts.compactor.alive(), "close() returned with the compaction still running"
    assert db.parts.counters["compaction_errors"] == 0, repr(db.parts.compactor.error)
    assert db.parts.compactor.error is None, repr(db.parts.compactor.error)
    with kvstore.open(store.inner, **FAST) as db:
        assert len(dict(db.scan())) == 300


# ---------------------------------------------------------------------------
# the columnar merge (no snapshots, no watermark) equals the entry merge
# ---------------------------------------------------------------------------


@st.composite
def _sources(draw: st.DrawFn) -> list[list[tuple[bytes, int, bytes | None]]]:
    """Newest source first; seqs unique and higher in newer sources; blocks of 1-4."""
    count = draw(st.integers(1, 4))
    seq = 10_000
    out = []
    for _ in range(count):
        keys = sorted(draw(st.sets(st.binary(min_size=1, max_size=3), max_size=25)))
        entries = []
        for k in keys:
            for _ in range(draw(st.integers(1, 2))):
                seq -= 1
                entries.append((k, seq, draw(st.none() | st.binary(max_size=6))))
        # within a key, seq descending: the loop above already emits them that way
        out.append(entries)
    return out


def _as_blocks(
    entries: list[tuple[bytes, int, bytes | None]], size: int
) -> Iterator[tuple[list[bytes], tuple[int, ...], list[bytes | None]]]:
    for i in range(0, len(entries), size):
        part = entries[i : i + size]
        yield [e[0] for e in part], tuple(e[1] for e in part), [e[2] for e in part]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _sources(),
    st.booleans(),
    st.integers(1, 200),
    st.integers(1, 4),
    st.integers(2, 16),
)
def test_columnar_compaction_equals_entry_compaction(
    sources: list[list[tuple[bytes, int, bytes | None]]],
    bottom: bool,
    target: int,
    block: int,
    batch: int,
) -> None:
    from kvstore.compaction import compaction_columns
    from kvstore.iterators import merge_columns

    expected = list(
        compaction_chunks(merge_batches([iter(s) for s in sources], batch), [], bottom, target)
    )
    got = list(
        compaction_columns(
            merge_columns([_as_blocks(s, block) for s in sources], batch), bottom, target
        )
    )
    assert [list(zip(*c)) for c in got] == expected


@pytest.mark.parametrize("snapshot", [False, True], ids=["columns", "entries"])
def test_compact_reports_progress_in_input_bytes(snapshot: bool) -> None:
    """``compact(progress=)``: monotonic, never past the total, ends at exactly
    the bytes of every SST in the tree, on both merge paths (an open snapshot
    sends compaction down the entry path)."""
    db = kvstore.open(
        MemoryStore(f"progress-{snapshot}"),
        **FAST,
        memtable_bytes=16 << 10,
        background_compaction=False,
    )
    try:
        rng = random.Random(5)
        for i in range(30_000):
            db.put(b"k%05d" % rng.randrange(20_000), rng.randbytes(20), durable=False)
            if i == 20_000:
                db.flush()
                db.compact()  # a sorted run below the L0s
        db.flush()
        total = sum(m.size for m in db.manifest.all_ssts())
        assert db.stats()["l0_ssts"] >= 5 and db.stats()["sorted_runs"] == 1
        snap = db.snapshot() if snapshot else None
        calls: list[tuple[int, int]] = []
        db.compact(progress=lambda done, tot: calls.append((done, tot)))
        assert len(calls) >= 3, calls  # reported along the way, not only at the end
        assert calls[-1] == (total, total)
        assert all(0 <= d <= t == total for d, t in calls), calls
        assert [d for d, _ in calls] == sorted(d for d, _ in calls)
        # nothing left to do: one call, at the end
        calls.clear()
        db.compact(progress=lambda done, tot: calls.append((done, tot)))
        after = sum(m.size for m in db.manifest.all_ssts())
        assert calls == [(after, after)]
        with pytest.raises(TypeError, match="progress"):
            db.compact(progress=42)  # type: ignore[arg-type]
        if snap is not None:
            snap.close()
    finally:
        db.close()
