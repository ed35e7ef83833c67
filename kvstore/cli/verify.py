"""``kvstore verify``: read every byte the store depends on and check it.

What is checked, in this order::

    manifests   every manifest/*.manifest present: envelope, checksum, invariants,
                and that the id inside matches the file name
    SSTs        every SST of the newest readable manifest and of every checkpoint:
                footer, props, index, bloom (SstReader), then each data block
                (checksum, decompression, layout, key order inside and across
                blocks), the properties against the manifest's record, and that
                the bloom filter answers "maybe" for every key it holds
    WAL         every journal segment / WAL object with id >= wal_replay_from:
                headers and every frame checksum (a torn journal tail is a note,
                not damage: it is an unfinished write that recovery cuts)

It only reads, so it can run beside a live writer. A file that vanishes while
being checked is re-examined against the newest manifest: if nothing needs it
any more (GC deleted it after a flush or a compaction) it is skipped, else it
is reported missing. Problems are collected, never raised; the caller decides
the exit status.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kvstore import paths
from kvstore.cli.codec import plural
from kvstore.errors import CorruptionError
from kvstore.format.manifest import Manifest, SstMeta
from kvstore.format.sst_reader import SstReader
from kvstore.format.wal import all_zero, decode_object
from kvstore.manifest_store import ManifestStore
from kvstore.objstore import ObjectStore
from kvstore.wal import decode_journal, list_wal_ids, missing_seq

Progress = Callable[[int, str], None]

#: at most this many problems are listed per object (the rest are counted)
MAX_PROBLEMS_PER_OBJECT = 10


@dataclass
class Problem:
    object: str
    kind: str  # "corrupt" or "missing"
    message: str

    def to_json(self) -> dict[str, str]:
        return {"object": self.object, "kind": self.kind, "message": self.message}


class Out(Protocol):
    """Where a command prints (the kvstore and lakehouse CLIs' contexts)."""

    def line(self, text: str = "") -> None: ...
    def note(self, text: str) -> None: ...


@dataclass
class Findings:
    """What a verification found: damage (``problems``) and ``notes``; the
    kvstore's and the lakehouse's reports both are one."""

    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def damaged_objects(self) -> list[str]:
        return sorted({p.object for p in self.problems})


def print_verdict(out: Out, r: Findings) -> bool:
    """Print the notes, then OK or every damaged object's problems; True when OK."""
    for n in r.notes:
        out.line(f"note: {n}")
    if r.ok:
        out.line("OK: no damage found")
        return True
    damaged = r.damaged_objects()
    out.line(f"DAMAGED: {plural(len(damaged), 'object')}")
    for p in r.problems:
        out.line(f"  {p.object}: {p.kind}: {p.message}")
    out.note(f"corruption found in {plural(len(damaged), 'object')}: {', '.join(damaged)}")
    return False


@dataclass
class VerifyReport(Findings):
    manifest_id: int | None = None
    manifests: int = 0
    ssts: int = 0
    blocks: int = 0
    entries: int = 0
    wal_segments: int = 0
    wal_records: int = 0
    bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "manifest_id": self.manifest_id,
            "checked": {
                "manifests": self.manifests,
                "ssts": self.ssts,
                "blocks": self.blocks,
                "entries": self.entries,
                "wal_segments": self.wal_segments,
                "wal_records": self.wal_records,
                "bytes": self.bytes,
            },
            "damaged_objects": self.damaged_objects(),
            "problems": [p.to_json() for p in self.problems],
            "notes": self.notes,
        }


@dataclass(frozen=True)
class Plan:
    """What :func:`verify` will read, and how many bytes that is (for progress)."""

    manifests: list[tuple[str, int]]
    ssts: list[SstMeta]
    wal: list[tuple[str, str, int]]  # name, kind, size
    manifest: Manifest | None

    @property
    def total_bytes(self) -> int:
        return (
            sum(size for _, size in self.manifests)
            + sum(s.size for s in self.ssts)
            + sum(size for _, _, size in self.wal)
        )


class Verifier:
    def __init__(self, store: ObjectStore, wal_store: ObjectStore) -> None:
        self.store = store
        self.wal_store = wal_store
        self.mstore = ManifestStore(store)
        self.report = VerifyReport()
        self._per_object: dict[str, int] = {}

    # -- bookkeeping ----------------------------------------------------------
    def problem(self, obj: str, kind: str, message: str) -> None:
        n = self._per_object.get(obj, 0) + 1
        self._per_object[obj] = n
        if n <= MAX_PROBLEMS_PER_OBJECT:
            self.report.problems.append(Problem(obj, kind, message))
        elif n == MAX_PROBLEMS_PER_OBJECT + 1:
            self.report.notes.append(f"{obj}: more problems than the {n - 1} listed")

    def corrupt(self, obj: str, exc: CorruptionError) -> None:
        msg = str(exc)
        if msg.startswith(obj):  # "sst/x.sst block 3: ..." -> "block 3: ..."
            msg = msg[len(obj) :].lstrip(": ")
        self.problem(obj, "corrupt", msg)

    # -- planning -------------------------------------------------------------
    def plan(self) -> Plan:
        names = [
            n
            for n in self.store.list(paths.MANIFEST_DIR)
            if paths.parse_manifest_name(n) is not None
        ]
        manifests = [(n, self._size(self.store, n)) for n in names]
        m = self._newest_readable()
        ssts: dict[str, SstMeta] = {}
        if m is not None:
            for s in m.all_ssts():
                ssts.setdefault(s.id, s)
            for name, cp in sorted(m.checkpoints.items()):
                mid = int(cp["manifest_id"])
                try:
                    cpm = self.mstore.load(mid)
                except FileNotFoundError:
                    self.problem(
                        paths.manifest_name(mid), "missing", f"manifest of checkpoint {name!r}"
                    )
                    continue
                except CorruptionError:
                    continue  # reported when the manifests are checked
                for s in cpm.all_ssts():
                    ssts.setdefault(s.id, s)
        wal: list[tuple[str, str, int]] = []
        start = m.wal_replay_from if m is not None else 0
        older = 0
        for wal_id, kind in list_wal_ids(self.wal_store):
            if wal_id < start:
                older += 1
                continue
            name = (paths.wal_segment_name if kind == "log" else paths.wal_object_name)(wal_id)
            wal.append((name, kind, self._size(self.wal_store, name)))
        if older:
            self.report.notes.append(
                f"{older} WAL segment(s) below wal_replay_from={start} not checked "
                "(already flushed; deleted by the writer)"
            )
        listed = {paths.parse_sst_name(n) for n in self.store.list(paths.SST_DIR)} - {None}
        extra = len(listed - set(ssts))
        if extra:
            self.report.notes.append(
                f"{extra} SST file(s) referenced by no manifest or checkpoint not checked "
                "(garbage awaiting GC)"
            )
        return Plan(manifests, list(ssts.values()), wal, m)

    def _newest_readable(self) -> Manifest | None:
        latest = self.mstore.latest_id()
        for mid in range(latest, 0, -1):
            try:
                m = self.mstore.load(mid)
            except FileNotFoundError:
                break  # older ones were collected
            except CorruptionError:
                continue  # reported when the manifests are checked
            self.report.manifest_id = m.id
            if mid != latest:
                self.report.notes.append(
                    f"newest manifest {latest} is unreadable; checked the files of manifest {mid}"
                )
            return m
        self.problem(paths.MANIFEST_DIR, "corrupt", "no readable manifest")
        return None

    @staticmethod
    def _size(store: ObjectStore, name: str) -> int:
        try:
            return store.size(name)
        except FileNotFoundError:
            return 0

    # -- checks ---------------------------------------------------------------
    def run(self, plan: Plan, progress: Progress) -> VerifyReport:
        for name, size in plan.manifests:
            self.check_manifest(name)
            progress(size, name)
        for meta in plan.ssts:
            self.check_sst(meta, progress)
        seen: dict[int, str] = {}
        for name, kind, size in plan.wal:
            self.check_wal(name, kind, seen)
            progress(size, name)
        if plan.manifest is not None:
            self.check_wal_continuity(plan.manifest, seen)
        return self.report

    def check_wal_continuity(self, m: Manifest, seen: dict[int, str]) -> None:
        """Every commit is one WAL record with the next seq: after the manifest's
        ``last_flushed_seq`` the records must follow without a hole."""
        after = sorted(s for s in seen if s > m.last_flushed_seq)
        gap = missing_seq(after, m.last_flushed_seq)
        if gap is None:
            return
        if self.mstore.latest_id() != m.id:
            self.report.notes.append(
                "the writer flushed while verify ran: WAL continuity not checked"
            )
            return
        resumes = after[gap - m.last_flushed_seq - 1]
        self.problem(
            paths.WAL_DIR,
            "missing",
            f"WAL records from seq {gap} on are missing (manifest {m.id} has everything "
            f"up to seq {m.last_flushed_seq}; the WAL resumes at seq {resumes})",
        )

    def check_manifest(self, name: str) -> None:
        try:
            data = self.store.get(name)
        except FileNotFoundError:
            return  # collected since the listing: nothing depends on it any more
        self.report.manifests += 1
        self.report.bytes += len(data)
        try:
            m = Manifest.decode(data, where=name)
        except CorruptionError as exc:
            self.corrupt(name, exc)
            return
        if paths.manifest_name(m.id) != name:
            self.problem(name, "corrupt", f"holds manifest id {m.id}")

    def check_sst(self, meta: SstMeta, progress: Progress) -> None:
        name = paths.sst_name(meta.id)
        done = 0

        def step(upto: int) -> None:
            nonlocal done
            if upto > done:
                progress(upto - done, name)
                done = upto

        try:
            self._check_sst(name, meta, step)
        except FileNotFoundError:
            if self._still_needed(meta.id):
                self.problem(name, "missing", "listed in the manifest but not in the store")
            else:
                self.report.notes.append(f"{name} was deleted by GC while verify ran")
        except CorruptionError as exc:
            self.corrupt(name, exc)
        step(meta.size)

    def _check_sst(self, name: str, meta: SstMeta, step: Callable[[int], None]) -> None:
        actual = self.store.size(name)
        if actual != meta.size:
            self.problem(name, "corrupt", f"is {actual} bytes, the manifest says {meta.size}")
        reader = self.store.open_range_reader(name)
        self.report.ssts += 1
        self.report.bytes += actual
        try:
            sst = SstReader(reader.read, actual, name=name)
            expected = (meta.count, meta.min_seq, meta.max_seq, meta.first_key, meta.last_key)
            props = (sst.count, sst.min_seq, sst.max_seq, sst.first_key, sst.last_key)
            if props != expected:
                self.problem(name, "corrupt", "SST properties disagree with the manifest")
            self._check_blocks(name, sst, meta, step)
        finally:
            reader.close()

    def _check_blocks(
        self, name: str, sst: SstReader, meta: SstMeta, step: Callable[[int], None]
    ) -> None:
        n = sst.num_blocks
        entries = tombstones = 0
        prev: tuple[bytes, int] | None = None
        first: bytes | None = None
        last: bytes | None = None
        seqs: list[int] = []
        bloom_misses = 0
        complete = True
        for i in range(n):
            try:
                blk = sst.block(i)
                keys, values = blk.keys, blk.values
            except CorruptionError as exc:
                self.corrupt(name, exc)
                prev, complete = None, False
                continue
            finally:
                self.report.blocks += 1
                step(meta.size * (i + 1) // n)
            entries += blk.n
            tombstones += values.count(None)
            seqs.extend((min(blk.seqs), max(blk.seqs)))
            if prev is not None and (keys[0], -blk.seqs[0]) <= (prev[0], -prev[1]):
                self.problem(name, "corrupt", f"block {i} starts before block {i - 1} ends")
            prev = (keys[-1], blk.seqs[-1])
            first = keys[0] if first is None else first
            last = keys[-1]
            if sst.bloom is not None:
                bloom_misses += sum(1 for k in set(keys) if not sst.bloom.may_contain(k))
        self.report.entries += entries
        if bloom_misses:
            self.problem(name, "corrupt", f"bloom filter rejects {bloom_misses} key(s) it holds")
        if not complete:
            return  # a damaged block is reported already; totals would only repeat it
        got = (entries, tombstones, min(seqs), max(seqs), first, last)
        want = (meta.count, meta.tombstones, meta.min_seq, meta.max_seq)
        if got != (*want, meta.first_key, meta.last_key):
            self.problem(name, "corrupt", "entries disagree with the manifest's record")

    def _still_needed(self, sst_id: str) -> bool:
        try:
            m = self.mstore.load_latest()
        except (CorruptionError, FileNotFoundError):
            return True
        if m is None:
            return True
        if any(s.id == sst_id for s in m.all_ssts()):
            return True
        for cp in m.checkpoints.values():
            try:
                cpm = self.mstore.load(int(cp["manifest_id"]))
            except (CorruptionError, FileNotFoundError):
                continue
            if any(s.id == sst_id for s in cpm.all_ssts()):
                return True
        return False

    def check_wal(self, name: str, kind: str, seen: dict[int, str]) -> None:
        try:
            data = self.wal_store.get(name)
        except FileNotFoundError:
            return  # flushed and deleted since the listing
        self.report.wal_segments += 1
        self.report.bytes += len(data)
        try:
            if kind == "log":
                # a live journal may be read mid-write: decode_journal reads it again
                data, decoded = decode_journal(self.wal_store, name, data)
                records = decoded.records
                cut = len(data) - decoded.valid_length
                if decoded.torn and not all_zero(data, decoded.valid_length):
                    self.report.notes.append(
                        f"{name}: torn tail of {cut} bytes (an unfinished write; recovery cuts it)"
                    )
            else:
                records, _fence = decode_object(data, where=name)
        except CorruptionError as exc:
            self.corrupt(name, exc)
            return
        self.report.wal_records += len(records)
        for rec in records:
            if rec.seq in seen:
                where = seen[rec.seq]
                self.problem(name, "corrupt", f"sequence number {rec.seq} also appears in {where}")
            else:
                seen[rec.seq] = name


def verify(
    store: ObjectStore,
    wal_store: ObjectStore,
    *,
    on_plan: Callable[[Plan], Progress] | None = None,
) -> VerifyReport:
    """Check the whole store; ``on_plan`` gets the plan and returns a progress callback."""
    v = Verifier(store, wal_store)
    plan = v.plan()
    progress = on_plan(plan) if on_plan is not None else (lambda _n, _name: None)
    return v.run(plan, progress)
