"""The commit protocol: rebase over every version in between, then write w+1.

Versions form a chain 0, 1, 2, ... in the kvstore: the head key ``H`` holds
the latest version number and ``R/<v>`` one record per version (what it
changed, what it read, when, from which parent). A transaction that began at
version ``v`` freezes its buffer into a :class:`~lakehouse.intent.TxnIntent`
and :func:`run` commits that intent in a short kvstore transaction, one step
function each:

1. :func:`read_head`: the head ``w`` with ``get_for_update(H)``. Every commit
   writes ``H``, so the kvstore's first-committer-wins rule on that key lets
   exactly one writer turn ``w`` into ``w+1``: a second writer that read the
   same ``w`` gets ``kvstore.TransactionConflict`` at its kvstore commit and
   nothing of it becomes visible. (TrinityLake gets the same guarantee from a
   put-if-absent of the next root; here it is one key in one store.) It also
   reads the oldest retained version ``L/oldest`` for update: a transaction
   whose base (or a version it restored from) has expired gets
   ``RetryableConflict``, and an expiry committing meanwhile makes the
   attempt conflict and start over. An idempotent transaction whose app
   version is recorded already stops here (``skipped``).
2. :func:`check_since`: if ``w > v``, load the records of ``v+1..w`` and check
   each one against the intent (:mod:`lakehouse.conflicts`): SNAPSHOT
   conflicts when a version in between changed an object we change;
   SERIALIZABLE also when it changed an object we read or created/dropped one
   inside a listing we read. Checking *every* record, not only the latest
   state, is what makes the rebase sound: an object changed and changed back
   in between still counts. Versions already checked in an earlier attempt
   are not checked again.
3. :func:`revalidate`: the meaning of our changes on the state at ``w`` (the
   namespace of a new table still exists, a dropped namespace is still
   empty, no table/view took the name): a failure here cannot be fixed by
   retrying -> ``IncompatibleConflict``. Then the table data is rebased at
   ``w`` (:func:`lakehouse.data.commit.rebase_all`: per-row checks, the
   table-state keys to write).
4. :func:`build_record` and :func:`write_keys`: our definitions, the record
   ``R/<w+1>`` and ``H = w+1``; then the kvstore commit (durable: fsynced,
   group-committed with concurrent commits). On
   ``kvstore.TransactionConflict`` another writer won ``w+1``: back off
   (jittered, exponential) and go to 1. After ``commit_retries`` lost races
   the commit gives up with ``RetryableConflict``.

:func:`run` returns a :class:`~lakehouse.intent.CommitOutcome` (the version,
attempts, the versions rebased over, the record, or the error that stopped
it); it never touches the transaction, which takes what it needs from the
outcome::

    TxnIntent ─▶ check_ttl ─▶ prepare ─▶ attempt 1, 2, ... commit_retries ─▶ CommitOutcome
                                          │
         read_head ─▶ check_since ─▶ revalidate ─▶ rebase_all ─▶ build_record ─▶ write_keys
             ▲                                                                      │
             └──── lost race (kvstore.TransactionConflict): backoff ◀── kvstore commit

TrinityLake's example, both transactions begun at version 3::

    T1 ──begin(v3)── alter t1 ────────── commit: H=3 → write R/4, H=4 ✓
    T2 ──begin(v3)── alter t2 ──── commit: H=3 → write R/4 ........ ✗ lost race
                                           H=4 → R/4 changed only t1: compatible
                                                 → write R/5, H=5 ✓ (rebased over [4])

Each record stores ``base_seq``, the kvstore seq at which its commit read the
parent: version ``w`` is exactly the state visible at ``R/<w+1>.base_seq``
(the commit of ``w+1`` came later, and nothing else writes definitions), so
time travel to any version but the head is one record lookup plus a kvstore
snapshot. A record cannot hold its own commit seq: that is assigned inside
the kvstore commit, after the record's bytes are fixed.

``created_at`` is ``max(now, parent.created_at)``, so creation times never go
backwards along the chain and ``at_time`` can binary-search the records.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import kvstore
from lakehouse import codec, keys
from lakehouse.conflicts import INCOMPATIBLE, Conflict, Intent, check
from lakehouse.data import commit as data_commit
from lakehouse.errors import (
    CorruptionError,
    IncompatibleConflict,
    RetryableConflict,
    TransactionExpired,
)
from lakehouse.intent import (
    CommitOptions,
    CommitOutcome,
    CommitServices,
    DefinitionChange,
    TxnIntent,
)
from lakehouse.model import DataOp, ObjectChange, TableChange, VersionInfo

__all__ = ["CommitOptions", "Prepared", "files_added", "prepare", "revalidate", "run"]

log = logging.getLogger("lakehouse")

KeyWrites = list[tuple[bytes, bytes | None]]


@dataclass(frozen=True)
class Prepared:
    """An intent turned into what a commit writes and checks (the same every attempt)."""

    changes: tuple[ObjectChange, ...]
    changed: tuple[DefinitionChange, ...]
    writes: tuple[tuple[bytes, bytes | None], ...]
    #: what the conflict rules check against each version in between
    claims: Intent


@dataclass
class _Progress:
    """What one :func:`run` has learnt so far, across its attempts."""

    checked: int
    attempts: int = 0
    records: list[VersionInfo] = field(default_factory=list)
    rebased_over: list[int] = field(default_factory=list)

    def outcome(
        self,
        version: int,
        *,
        record: VersionInfo | None = None,
        skipped: bool = False,
        error: Exception | None = None,
    ) -> CommitOutcome:
        return CommitOutcome(
            version=version,
            created=record is not None,
            skipped=skipped,
            attempts=self.attempts,
            rebased_over=tuple(self.rebased_over),
            record=record,
            error=error,
        )


def run(services: CommitServices, intent: TxnIntent, options: CommitOptions) -> CommitOutcome:
    """Run the protocol for ``intent``: what happened, never raised (``outcome.error``)."""
    progress = _Progress(checked=intent.version)
    try:
        check_ttl(services, intent)
        prep = prepare(intent, options)
        if not prep.changes and not options.force and intent.app is None:
            # read-only: one consistent snapshot, always serializable
            return progress.outcome(intent.version)
        retries = services.commit_retries
        for attempt in range(1, retries + 1):
            progress.attempts = attempt
            outcome = _attempt(services, intent, options, prep, progress)
            if outcome is not None:
                return outcome
        raise RetryableConflict(
            f"gave up after {retries} commit attempts lost the race for the next version; "
            "the lakehouse is very busy, re-run the transaction"
        )
    except Exception as exc:  # the transaction raises it; nothing was written
        return progress.outcome(intent.version, error=exc)


def _attempt(
    services: CommitServices,
    intent: TxnIntent,
    options: CommitOptions,
    prep: Prepared,
    progress: _Progress,
) -> CommitOutcome | None:
    """One kvstore transaction: the outcome, or None after a lost race (backed off)."""
    attempt = progress.attempts
    ktx = services.db.transaction(kvstore.Isolation.SNAPSHOT)
    try:
        head, done = read_head(ktx, intent)
        if done is not None:
            return progress.outcome(done, skipped=True)
        check_since(services, ktx, prep, progress, head)
        if head > intent.version:
            revalidate(ktx, intent, prep, head)
        data_writes, data_changes = data_commit.rebase_all(services, ktx, intent, progress.records)
        if not prep.changes and not options.force and not data_changes:
            return progress.outcome(intent.version)
        record = build_record(services, ktx, intent, options, prep, head, data_changes)
        write_keys(ktx, intent, prep, data_writes, record)
        if options.hook is not None:
            options.hook(intent, attempt)
        ktx.commit(durable=services.durable)
    except (kvstore.TransactionConflict, kvstore.TransactionExpired) as exc:
        delay = services.backoff(attempt)
        log.debug("commit attempt %d lost the race (%s); retrying in %.4fs", attempt, exc, delay)
        services.sleep(delay)
        return None
    finally:
        ktx.rollback()  # no-op after commit
    services.remember(record)
    if progress.rebased_over:
        log.debug("version %d rebased over %s", record.version, progress.rebased_over)
    return progress.outcome(record.version, record=record)


# -- the steps ------------------------------------------------------------------------------
def check_ttl(services: CommitServices, intent: TxnIntent) -> None:
    """A transaction open longer than the lakehouse's TTL fails before any attempt."""
    ttl = services.transaction_ttl
    if services.monotonic() - intent.started > ttl:
        raise TransactionExpired(
            f"transaction began at version {intent.version} more than {ttl:g}s ago "
            "(the lakehouse's transaction TTL); re-run it"
        )


def prepare(intent: TxnIntent, options: CommitOptions) -> Prepared:
    """The record's object changes, the definition keys to write and what the conflict
    rules check: computed once, the same for every attempt."""
    changes: list[ObjectChange] = []
    changed: list[DefinitionChange] = []
    writes: list[tuple[bytes, bytes | None]] = []
    reads = set(intent.reads)
    state_tables = {f"{ns}.{t}" for ns, t in intent.state_tables}
    state_tables |= {w.qualified for w in intent.table_writes.values() if not w.is_empty()}
    data_only: dict[tuple[str, str], frozenset[DataOp]] = {}
    for (kind, qname), p in intent.touched.items():
        final = None
        if p.final is not None:
            final = codec.encode_def(p.final)
            codec.remember_def(final, p.final)
        if final == p.base_bytes:
            if kind == "table" and qname in state_tables and final is not None:
                did = codec.def_id(final)
                changes.append(ObjectChange(kind, qname, "alter", did, did))
                w = intent.table_writes.get((p.ns, p.name or ""))
                data_only[(kind, qname)] = frozenset(w.ops if w is not None else (DataOp.RESTORE,))
            elif intent.serializable:
                reads.add((kind, qname))  # looked at, left as it was
            continue
        if p.base_bytes is None:
            op = "create"
        elif final is None:
            op = "drop"
        else:
            op = "alter"
        changes.append(
            ObjectChange(
                kind,
                qname,
                op,
                None if p.base_bytes is None else codec.def_id(p.base_bytes),
                None if final is None else codec.def_id(final),
            )
        )
        changed.append(p)
        writes.append((p.key, final))
    writes.extend(intent.state_writes.items())
    claims = Intent(
        isolation=intent.isolation,
        writes={(c.kind, c.name): c.op for c in changes},
        reads=frozenset(reads) if intent.serializable else frozenset(),
        listings=intent.listings if intent.serializable else frozenset(),
        exclusive=options.exclusive,
        data_only=data_only,
    )
    return Prepared(tuple(changes), tuple(changed), tuple(writes), claims)


def read_head(ktx: kvstore.Transaction, intent: TxnIntent) -> tuple[int, int | None]:
    """Step 1: the head (for update), and the version that recorded the intent's app
    version already, if any; the intent's base must still be retained."""
    head = keys.decode_u64(_must(ktx.get_for_update(keys.HEAD), "head"))
    if intent.app is not None:
        done = _app_done(ktx, *intent.app)
        if done is not None:
            return head, done
    # every attempt, for update: an expiry committed meanwhile makes this
    # attempt conflict (its files may be queued for deletion, and the
    # retention watermark may have passed this attempt's read seq)
    oldest_raw = ktx.get_for_update(keys.OLDEST)
    oldest = 0 if oldest_raw is None else keys.decode_u64(oldest_raw)
    check_not_expired(intent, oldest)
    return head, None


def check_since(
    services: CommitServices,
    ktx: kvstore.Transaction,
    prep: Prepared,
    progress: _Progress,
    head: int,
) -> None:
    """Step 2: every version committed since the last one checked, against the claims."""
    for u in range(progress.checked + 1, head + 1):
        rec = services.record(u, ktx.get)
        conflict = check(prep.claims, rec)
        if conflict is not None:
            _raise(conflict)
        progress.records.append(rec)
        progress.rebased_over.append(u)
    progress.checked = max(progress.checked, head)


def _raise(conflict: Conflict) -> None:
    cls = IncompatibleConflict if conflict.outcome == INCOMPATIBLE else RetryableConflict
    raise cls(conflict.reason, version=conflict.version, objects=conflict.objects)


def revalidate(ktx: kvstore.Transaction, intent: TxnIntent, prep: Prepared, head: int) -> None:
    """Step 3: our changes still mean the same on the state at ``head``."""
    touched = intent.touched
    for p in prep.changed:
        if ktx.get(p.key) != p.base_bytes:  # defensive: records already cover this
            raise RetryableConflict(
                f"{p.kind} {p.qualified} changed after version {intent.version}",
                version=head,
                objects=((p.kind, p.qualified),),
            )

    def exists_at_head(kind: str, ns: str, name: str | None) -> bool:
        ref = (kind, ns if name is None else f"{ns}.{name}")
        if ref in touched:
            return touched[ref].final is not None
        return ktx.get(keys.object_key(kind, ns, name)) is not None

    for p in prep.changed:
        if p.base is None and p.kind in ("table", "view") and p.final is not None:
            assert p.name is not None
            if not exists_at_head("namespace", p.ns, None):
                raise IncompatibleConflict(
                    f"cannot create {p.kind} {p.qualified}: namespace {p.ns!r} was dropped "
                    f"by a version after {intent.version}",
                    version=head,
                    objects=(("namespace", p.ns),),
                )
            other = "view" if p.kind == "table" else "table"
            if exists_at_head(other, p.ns, p.name):
                raise IncompatibleConflict(
                    f"cannot create {p.kind} {p.qualified}: a {other} of that name was "
                    f"created by a version after {intent.version}",
                    version=head,
                    objects=((other, p.qualified),),
                )
        if p.kind == "namespace" and p.final is None:
            for kind in ("table", "view"):
                prefix = keys.children_prefix(kind, p.ns)
                for k, _ in ktx.scan_prefix(prefix):
                    name = keys.child_name(prefix, k)
                    if exists_at_head(kind, p.ns, name):
                        raise IncompatibleConflict(
                            f"cannot drop namespace {p.ns!r}: {kind} {p.ns}.{name} was "
                            f"created in it by a version after {intent.version}",
                            version=head,
                            objects=((kind, f"{p.ns}.{name}"),),
                        )


def build_record(
    services: CommitServices,
    ktx: kvstore.Transaction,
    intent: TxnIntent,
    options: CommitOptions,
    prep: Prepared,
    head: int,
    data_changes: list[TableChange],
) -> VersionInfo:
    """Step 4: the record of version ``head + 1``."""
    parent = services.record(head, ktx.get)
    return VersionInfo(
        version=head + 1,
        created_ms=max(services.now_ms(), parent.created_ms),
        parent=head,
        isolation=intent.isolation,
        txn_id=intent.txn_id,
        changes=prep.changes,
        reads=tuple(sorted(prep.claims.reads)),
        listings=tuple(sorted(prep.claims.listings)),
        rollback_of=options.rollback_of,
        base_seq=ktx.read_seq,
        source=options.source,
        files_added=files_added(intent),
        data=tuple(data_changes),
        app=intent.app,
    )


def write_keys(
    ktx: kvstore.Transaction,
    intent: TxnIntent,
    prep: Prepared,
    data_writes: KeyWrites,
    record: VersionInfo,
) -> None:
    """Step 4: the app version, the definitions, the table state, the record, the head."""
    if intent.app is not None:
        app_id, app_version = intent.app
        ktx.put(keys.app_key(app_id), codec.encode_app(app_version, record.version))
    writes = list(prep.writes) + data_writes
    start = 0  # runs of puts between deletes go in one call (key index entries)
    for i in [i for i, (_, value) in enumerate(writes) if value is None]:
        if i > start:
            ktx.put_many(writes[start:i])  # type: ignore[arg-type]  # no None in the run
        ktx.delete(writes[i][0])
        start = i + 1
    if start < len(writes):
        ktx.put_many(writes[start:])  # type: ignore[arg-type]
    ktx.put(keys.record_key(record.version), codec.encode_record(record))
    ktx.put(keys.HEAD, keys.encode_u64(record.version))


def check_not_expired(intent: TxnIntent, oldest: int) -> None:
    """A transaction whose base version, or a version it restored or cloned a table
    from, has expired is retried (docs/api.md, "Integrity"): the files it would
    reference may be queued for deletion."""
    if intent.version < oldest:
        raise RetryableConflict(
            f"this transaction's base version {intent.version} has expired (the "
            f"oldest retained version is {oldest}); re-run it",
            version=oldest,
        )
    if intent.oldest_version_read < oldest:
        raise RetryableConflict(
            f"version {intent.oldest_version_read}, which this transaction restored or "
            f"cloned a table from, has expired (the oldest retained version is {oldest}); "
            "re-run it",
            version=oldest,
        )


def files_added(intent: TxnIntent) -> tuple[str, ...]:
    """The data files (in the data directory) the new version references that its
    record lists: written, adopted, restored or cloned ones, and those a rollback or
    an export brings back. Expiry and orphan removal keep every file a retained
    version's record lists, so a file missing here could be deleted while in use."""
    paths: dict[str, None] = {}
    for w in intent.table_writes.values():
        paths.update(dict.fromkeys(f.path for f in w.added.values() if f.is_stored))
    for key, value in intent.state_writes.items():  # a rollback's or an export's state
        if value is not None and keys.is_data_file_key(key):
            f = codec.decode_data_file(value)
            if f.is_stored:
                paths[f.path] = None
    return tuple(paths)


def _app_done(ktx: kvstore.Transaction, app_id: str, app_version: int) -> int | None:
    """The version that recorded ``app_id`` at ``app_version`` or later, if any."""
    raw = ktx.get_for_update(keys.app_key(app_id))
    if raw is None:
        return None
    recorded, version = codec.decode_app(raw)
    return version if recorded >= app_version else None


def _must(value: bytes | None, what: str) -> bytes:
    if value is None:
        raise CorruptionError(f"the lakehouse has no {what} key")
    return value
