"""The subcommands. Each takes a :class:`Ctx` and returns an exit status.

Reads go through :func:`kvstore.open_reader` or the manifest alone and never
fence a running writer. Writes open the store as its writer
(:func:`kvstore.open`: refused next to a live writer of a local store unless
``--takeover``, which fences it), then close it (which flushes): one-shot,
with background compaction off.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from kvstore._validate import prefix_end
from kvstore.cli import codec
from kvstore.cli.codec import InputError, human_bytes, human_ms, plural, show
from kvstore.cli.progress import ProgressBar
from kvstore.cli.store import (
    CliError,
    Target,
    checkpoint_rows,
    latest_manifest,
    manifest_doc,
    manifest_ids,
    summarize,
)
from kvstore.cli.verify import Plan, Progress, print_verdict, verify
from kvstore.engine.checkpoints import check_checkpoint_name
from kvstore.errors import CorruptionError, KvError
from kvstore.format.manifest import Manifest, SstMeta
from kvstore.manifest_store import ManifestStore

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_CORRUPTION = 3
EXIT_NOT_FOUND = 4


@dataclass
class Ctx:
    args: argparse.Namespace
    target: Target
    json: bool
    hex: bool

    def line(self, text: str = "") -> None:
        """Human output (suppressed under --json)."""
        if not self.json:
            sys.stdout.write(text + "\n")

    def doc(self, doc: Any) -> None:
        """The one JSON document (only under --json)."""
        if self.json:
            sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False) + "\n")

    def note(self, text: str) -> None:
        """A remark for the human on stderr (even under --json)."""
        sys.stderr.write(f"kvstore: {text}\n")

    def key(self, text: str, what: str = "KEY") -> bytes:
        return codec.parse_key(text, hex_mode=self.hex, what=what)

    def bound(self, text: str | None, what: str) -> bytes | None:
        if text is None:
            return None
        return codec.parse_bytes(text, hex_mode=self.hex, what=what)

    def put_bytes(self, doc: dict[str, Any], field: str, data: bytes | None) -> dict[str, Any]:
        codec.json_bytes(doc, field, data, hex_mode=self.hex)
        return doc

    def show(self, data: bytes) -> str:
        return show(data, hex_mode=self.hex)


def _rows(rows: list[tuple[str, str]]) -> Iterator[str]:
    width = max((len(a) for a, _ in rows), default=0)
    for a, b in rows:
        yield f"{a:<{width}}  {b}"


# ---------------------------------------------------------------------------
# info / manifest
# ---------------------------------------------------------------------------


def cmd_info(ctx: Ctx) -> int:
    store = ctx.target.open_existing()
    s = summarize(store, ctx.target.wal_store(store), ctx.target.url)
    if ctx.json:
        ctx.doc(s)
    else:
        for text in _rows(_info_rows(s)):
            ctx.line(text)
        for p in s["problems"]:
            ctx.line(f"PROBLEM: {p}")
    if s["problems"]:
        ctx.note("the store has problems; run `kvstore verify` for a full check")
        return EXIT_CORRUPTION
    return EXIT_OK


def _level_text(level: dict[str, int]) -> str:
    text = f"{plural(level['ssts'], 'SST')}, {human_bytes(level['bytes'])}"
    text += f", {plural(level['entries'], 'entry', 'entries')}"
    if level["tombstones"]:
        text += f" ({plural(level['tombstones'], 'tombstone')})"
    return text


def _info_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    last = s["last_seq"]
    flushed = s["last_flushed_seq"]
    if last is None:
        seq = f"unknown (WAL unreadable); {flushed} flushed"
    elif last > flushed:
        seq = f"{last} ({flushed} flushed, {last - flushed} more in the WAL)"
    else:
        seq = f"{last} (all flushed)"
    wm = s["retention_watermark"]
    rows = [
        ("store", s["url"]),
        ("manifest", f"#{s['manifest_id']}, written {human_ms(s['manifest_created_ms'])}"),
        ("writer epoch", str(s["writer_epoch"])),
        ("last seq", seq),
        ("retention watermark", "none" if wm is None else f"seq {wm}"),
        ("L0", _level_text(s["l0"])),
        ("sorted runs", str(len(s["sorted_runs"]))),
    ]
    rows += [(f"  run {i}", _level_text(run)) for i, run in enumerate(s["sorted_runs"])]
    rows.append(("total", _level_text(s["total"])))
    wal = s["wal"]
    wal_text = f"{plural(wal['segments'], 'segment')}, {human_bytes(wal['bytes'])} on disk"
    if wal["unflushed_records"] is not None:
        wal_text += f", {plural(wal['unflushed_records'], 'record')} not yet in an SST"
    wal_text += f" (replay from id {s['wal_replay_from']})"
    if wal["older_segments"]:
        wal_text += f"; {wal['older_segments']} older, already flushed"
    rows.append(("WAL", wal_text))
    cps = s["checkpoints"]
    cp_text = str(len(cps))
    if cps:
        cp_text += ": " + ", ".join(f"{c['name']} (seq {c['seq']})" for c in cps)
    if s["checkpoint_only_ssts"]:
        cp_text += f"; they alone keep {plural(s['checkpoint_only_ssts'], 'SST')}"
    rows.append(("checkpoints", cp_text))
    ms = s["manifests"]
    rows.append(("manifests", f"{ms['count']} stored (oldest #{ms['oldest']})"))
    g = s["unreferenced_ssts"]
    garbage = f"{plural(g['count'], 'unreferenced SST')}, {human_bytes(g['bytes'])}"
    rows.append(("garbage", garbage))
    return rows


def cmd_manifest(ctx: Ctx) -> int:
    store = ctx.target.open_existing()
    mid = ctx.args.id
    if mid is None:
        m = latest_manifest(store)
    else:
        try:
            m = ManifestStore(store).load(mid)
        except FileNotFoundError:
            ids = manifest_ids(store)
            have = f"stored: #{ids[0]}..#{ids[-1]}" if ids else "none stored"
            raise CliError(f"no manifest #{mid} at {ctx.target.url} ({have})") from None
    if ctx.json:
        ctx.doc(manifest_doc(m))
    else:
        for text in _manifest_lines(ctx, m):
            ctx.line(text)
    return EXIT_OK


def _sst_line(ctx: Ctx, s: SstMeta) -> str:
    tomb = f" ({plural(s.tombstones, 'tombstone')})" if s.tombstones else ""
    return (
        f"    {s.id}  {human_bytes(s.size):>10}  {plural(s.count, 'entry', 'entries')}{tomb}"
        f"  seq {s.min_seq}..{s.max_seq}  keys '{ctx.show(s.first_key)}'..'{ctx.show(s.last_key)}'"
    )


def _manifest_lines(ctx: Ctx, m: Manifest) -> Iterator[str]:
    from kvstore import paths

    yield f"manifest #{m.id}  ({paths.manifest_name(m.id)})"
    rows = [
        ("written", human_ms(m.created_ms)),
        ("writer epoch", str(m.writer_epoch)),
        ("last flushed seq", str(m.last_flushed_seq)),
        ("WAL replay from", str(m.wal_replay_from)),
        ("WAL location", "the store" if m.wal_dir is None else f"wal_dir {m.wal_dir}"),
        ("retention watermark", "none" if m.retention_seq is None else str(m.retention_seq)),
        ("seq/time samples", str(len(m.seq_times))),
        ("writer claims", ", ".join(f"#{c}" for c in m.claims) or "none recorded"),
    ]
    for text in _rows(rows):
        yield "  " + text
    yield f"  L0: {plural(len(m.l0), 'SST')}, {human_bytes(sum(s.size for s in m.l0))}" + (
        " (newest first)" if len(m.l0) > 1 else ""
    )
    for s in m.l0:
        yield _sst_line(ctx, s)
    for i, run in enumerate(m.runs):
        yield f"  run {i}: {plural(len(run), 'SST')}, {human_bytes(sum(s.size for s in run))}"
        for s in run:
            yield _sst_line(ctx, s)
    yield f"  checkpoints: {len(m.checkpoints)}"
    for cp in checkpoint_rows(m):
        yield (
            f"    {cp['name']}  seq {cp['seq']}  manifest #{cp['manifest_id']}"
            f"  created {human_ms(cp.get('created_ms'))}  expires {human_ms(cp.get('expires_ms'))}"
        )


# ---------------------------------------------------------------------------
# reads and writes of keys
# ---------------------------------------------------------------------------


def cmd_get(ctx: Ctx) -> int:
    key = ctx.key(ctx.args.key)
    with ctx.target.open_reader(ctx.args.checkpoint) as reader:
        value = reader.get(key)
    if ctx.json:
        doc = ctx.put_bytes({"found": value is not None}, "key", key)
        ctx.doc(ctx.put_bytes(doc, "value", value))
    elif value is not None:
        if ctx.args.raw:
            sys.stdout.flush()
            sys.stdout.buffer.write(value)
            sys.stdout.buffer.flush()
        else:
            ctx.line(ctx.show(value))
    if value is None:
        ctx.note(f"not found: {ctx.show(key)}")
        return EXIT_NOT_FOUND
    return EXIT_OK


def cmd_put(ctx: Ctx) -> int:
    key = ctx.key(ctx.args.key)
    if ctx.args.value is not None:
        value = codec.parse_bytes(ctx.args.value, hex_mode=ctx.hex, what="VALUE")
    elif sys.stdin.isatty():
        raise InputError("give VALUE, or pipe the value into standard input")
    else:  # values too big for a command line, or binary ones
        data = sys.stdin.buffer.read()
        value = codec.parse_bytes(data.decode(), hex_mode=True, what="VALUE") if ctx.hex else data
    with ctx.target.open_writer(create=ctx.args.create) as db:
        seq = db.put(key, value)
    ctx.doc(ctx.put_bytes({"seq": seq}, "key", key))
    ctx.line(f"put {ctx.show(key)} (seq {seq})")
    return EXIT_OK


def cmd_delete(ctx: Ctx) -> int:
    key = ctx.key(ctx.args.key)
    with ctx.target.open_reader() as reader:  # absent: say so without fencing anyone
        existed = reader.get(key) is not None
    seq = None
    if existed:
        with ctx.target.open_writer() as db:
            existed = db.get(key) is not None  # the writer may have changed it meanwhile
            seq = db.delete(key) if existed else None
    ctx.doc(ctx.put_bytes({"deleted": existed, "seq": seq}, "key", key))
    if existed:
        ctx.line(f"deleted {ctx.show(key)} (seq {seq})")
    else:
        ctx.line(f"{ctx.show(key)} not found; nothing to delete")
    return EXIT_OK


def _scan_range(ctx: Ctx) -> tuple[bytes | None, bytes | None]:
    a = ctx.args
    start = ctx.bound(a.start, "--start") or None
    end = ctx.bound(a.end, "--end") or None
    prefix = ctx.bound(a.prefix, "--prefix")
    if prefix:
        pend = prefix_end(prefix)
        start = prefix if start is None else max(start, prefix)
        end = pend if end is None else (end if pend is None else min(end, pend))
    return start, end


def cmd_scan(ctx: Ctx) -> int:
    a = ctx.args
    if a.limit is not None and not 0 <= a.limit < sys.maxsize:
        raise InputError(f"--limit must be between 0 and {sys.maxsize - 1}")
    start, end = _scan_range(ctx)
    with ctx.target.open_reader(a.checkpoint) as reader:
        items: Iterator[tuple[bytes, bytes]] = iter(())
        if start is None or end is None or start < end:
            items = reader.scan(start, end, reverse=a.reverse)
        if a.limit is not None:
            items = islice(items, a.limit + 1)
        count = 0
        truncated = False
        out = sys.stdout
        if ctx.json:
            out.write('{\n  "items": [')
        try:
            for key, value in items:
                if a.limit is not None and count == a.limit:
                    truncated = True
                    break
                if ctx.json:
                    doc = ctx.put_bytes({}, "key", key)
                    if not a.keys_only:
                        ctx.put_bytes(doc, "value", value)
                    out.write(("," if count else "") + "\n    " + json.dumps(doc))
                elif a.keys_only:
                    out.write(ctx.show(key) + "\n")
                else:
                    out.write(f"{ctx.show(key)}\t{ctx.show(value)}\n")
                count += 1
        except (KvError, OSError) as exc:
            if not ctx.json:
                raise
            # the items streamed so far stay one valid document, which names the error
            code = EXIT_CORRUPTION if isinstance(exc, CorruptionError) else EXIT_FAILURE
            kind = "corruption" if code == EXIT_CORRUPTION else type(exc).__name__
            error = {"type": kind, "message": str(exc), "exit_code": code}
            tail = {"count": count, "truncated": True, "error": error}
            out.write("\n  ],\n" + json.dumps(tail, indent=2)[2:] + "\n")
            sys.stderr.write(f"kvstore: stopped after {count} items: {exc}\n")
            return code
    if ctx.json:
        tail = {"count": count, "truncated": truncated, "encoding": "hex" if ctx.hex else "text"}
        out.write("\n  ],\n" + json.dumps(tail, indent=2)[2:] + "\n")
    elif truncated:
        ctx.note(f"stopped after --limit {a.limit} items; more remain")
    return EXIT_OK


# ---------------------------------------------------------------------------
# maintenance
# ---------------------------------------------------------------------------

_SHAPE = ("l0_ssts", "l0_bytes", "sorted_runs", "sorted_run_bytes", "obsolete_ssts")


def _shape(stats: dict[str, Any]) -> dict[str, int]:
    return {k: int(stats[k]) for k in _SHAPE}


def _shape_text(s: dict[str, int]) -> str:
    return (
        f"L0 {plural(s['l0_ssts'], 'SST')} ({human_bytes(s['l0_bytes'])}), "
        f"{plural(s['sorted_runs'], 'sorted run')} ({human_bytes(s['sorted_run_bytes'])})"
    )


def _grace_hint(ctx: Ctx, pending: int) -> None:
    if pending:
        ctx.line(
            f"{plural(pending, 'unreferenced SST')} kept: pinned by a checkpoint, or replaced "
            "less than the GC grace period ago (as the manifest records; files a crash left "
            "count from when a writer first found them); "
            "`kvstore gc --grace 0` deletes the latter, safe once no reader in another "
            "process can still be using an older manifest"
        )


def _progress_bar(ctx: Ctx, total: int, label: str) -> ProgressBar:
    """A bar on stderr if ``--progress``, or by default when stderr is a terminal."""
    show = ctx.args.progress if ctx.args.progress is not None else sys.stderr.isatty()
    return ProgressBar(total, sys.stderr, enabled=show, label=label)


def cmd_compact(ctx: Ctx) -> int:
    with ctx.target.open_writer() as db:
        before = _shape(db.stats())
        bar = _progress_bar(ctx, 0, "compact")
        try:
            db.compact(progress=bar.update)
        finally:
            bar.close()
        after = _shape(db.stats())
    ctx.doc({"before": before, "after": after})
    ctx.line(f"before: {_shape_text(before)}")
    ctx.line(f"after:  {_shape_text(after)}")
    _grace_hint(ctx, after["obsolete_ssts"])
    return EXIT_OK


def cmd_gc(ctx: Ctx) -> int:
    with ctx.target.open_writer() as db:
        grace = db.options.gc_grace_seconds if ctx.args.grace is None else ctx.args.grace
        deleted = db.collect_garbage(grace_seconds=grace)
        pending = int(db.stats()["obsolete_ssts"])
    ctx.doc({"deleted": deleted, "pending_ssts": pending, "grace_seconds": grace})
    ctx.line(
        f"deleted {plural(deleted['ssts'], 'SST')} and {plural(deleted['manifests'], 'manifest')}"
    )
    _grace_hint(ctx, pending)
    return EXIT_OK


def _checkpoint_name(text: str) -> str:
    try:
        return check_checkpoint_name(text)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def cmd_checkpoint_create(ctx: Ctx) -> int:
    name = _checkpoint_name(ctx.args.name)
    store = ctx.target.open_existing()
    if name in latest_manifest(store).checkpoints:  # say so before fencing anyone
        raise CliError(f"checkpoint {name!r} already exists")
    with ctx.target.open_writer() as db:
        cp = db.create_checkpoint(name, expires_in=ctx.args.expires_in)
    ctx.doc(cp)
    ctx.line(
        f"created checkpoint {name!r} at seq {cp['seq']} (manifest #{cp['manifest_id']}), "
        f"expires {human_ms(cp.get('expires_ms'))}"
    )
    return EXIT_OK


def _expired(cp: dict[str, Any]) -> bool:
    """Past its expiry: the writer's next GC removes it."""
    expires = cp.get("expires_ms")
    return expires is not None and expires <= time.time() * 1000


def cmd_checkpoint_list(ctx: Ctx) -> int:
    store = ctx.target.open_existing()
    rows = checkpoint_rows(latest_manifest(store))
    ctx.doc({"checkpoints": rows})
    if not ctx.json:
        if not rows:
            ctx.line("no checkpoints")
        table = [("NAME", "SEQ", "MANIFEST", "CREATED", "EXPIRES")]
        table += [
            (
                cp["name"],
                str(cp["seq"]),
                f"#{cp['manifest_id']}",
                human_ms(cp.get("created_ms")),
                human_ms(cp.get("expires_ms")) + (" (expired)" if _expired(cp) else ""),
            )
            for cp in rows
        ]
        if rows:
            widths = [max(len(r[i]) for r in table) for i in range(5)]
            for r in table:
                ctx.line("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return EXIT_OK


def cmd_checkpoint_delete(ctx: Ctx) -> int:
    name = _checkpoint_name(ctx.args.name)
    store = ctx.target.open_existing()
    if name not in latest_manifest(store).checkpoints:  # say so before fencing anyone
        raise CliError(f"no checkpoint named {name!r} at {ctx.target.url}")
    with ctx.target.open_writer() as db:
        try:
            db.delete_checkpoint(name)
        except KeyError:
            raise CliError(f"no checkpoint named {name!r} at {ctx.target.url}") from None
    ctx.doc({"deleted": name})
    ctx.line(f"deleted checkpoint {name!r}; its files go at the next GC")
    return EXIT_OK


# ---------------------------------------------------------------------------
# verify
# ---------------------------------------------------------------------------


def cmd_verify(ctx: Ctx) -> int:
    store = ctx.target.open_existing()
    wal_store = ctx.target.wal_store(store)
    bars: list[ProgressBar] = []

    def on_plan(plan: Plan) -> Progress:
        bar = _progress_bar(ctx, plan.total_bytes, "verify")
        bars.append(bar)
        return bar.advance

    try:
        report = verify(store, wal_store, on_plan=on_plan)
    finally:
        for bar in bars:
            bar.close()
    ctx.doc(report.to_json())
    r = report
    ctx.line(
        f"checked {plural(r.manifests, 'manifest')}, {plural(r.ssts, 'SST')} "
        f"({plural(r.blocks, 'block')}, {plural(r.entries, 'entry', 'entries')}), "
        f"{plural(r.wal_segments, 'WAL segment')} ({plural(r.wal_records, 'record')}): "
        f"{human_bytes(r.bytes)}"
    )
    return EXIT_OK if print_verdict(ctx, r) else EXIT_CORRUPTION
