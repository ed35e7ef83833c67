"""Commands on a lakehouse as a whole: ``init``, ``info`` and ``verify``.

``init`` is the only command that creates a lakehouse; on an existing one it
checks that the settings asked for are the ones it has (they are fixed at
creation) and changes nothing. ``info`` and ``verify`` only read.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import lakehouse
from kvstore.cli.codec import human_bytes, human_ms, plural
from kvstore.cli.progress import ProgressBar
from kvstore.cli.verify import print_verdict
from lakehouse.cli.parse import parse_props
from lakehouse.cli.target import EXIT_CORRUPTION, EXIT_OK, CliError, Ctx
from lakehouse.cli.verify import verify
from lakehouse.model import LakehouseDef


def _rows(rows: list[tuple[str, str]]) -> Iterator[str]:
    width = max((len(a) for a, _ in rows), default=0)
    for a, b in rows:
        yield f"{a:<{width}}  {b}"


# ---------------------------------------------------------------------------
# init / info
# ---------------------------------------------------------------------------
def _asked(ctx: Ctx) -> dict[str, Any]:
    """The creation settings given on the command line (and only those)."""
    a = ctx.args
    asked: dict[str, Any] = {}
    if a.isolation is not None:
        asked["default_isolation"] = a.isolation
    if a.max_name_length is not None:
        asked["max_name_length"] = a.max_name_length
    if a.transaction_ttl is not None:
        asked["transaction_ttl"] = a.transaction_ttl
    if a.property is not None:
        asked["properties"] = parse_props(a.property)
    return asked


def _differences(d: LakehouseDef, asked: dict[str, Any]) -> list[str]:
    out = []
    iso = asked.get("default_isolation")
    if iso is not None and d.default_isolation.value != iso:
        out.append(f"default isolation {d.default_isolation.value} (asked: {iso})")
    n = asked.get("max_name_length")
    if n is not None and d.max_name_length != n:
        out.append(f"max name length {d.max_name_length} (asked: {n})")
    ttl = asked.get("transaction_ttl")
    if ttl is not None and float(d.transaction_ttl) != float(ttl):
        out.append(f"transaction TTL {d.transaction_ttl:g} s (asked: {ttl:g} s)")
    props = asked.get("properties")
    if props is not None and dict(d.properties) != props:
        out.append(f"properties {dict(d.properties)} (asked: {props})")
    return out


def _init_doc(url: str, d: LakehouseDef, version: int, created: bool) -> dict[str, Any]:
    return {
        "url": url,
        "id": d.id,
        "version": version,
        "created": created,
        "default_isolation": d.default_isolation.value,
        "max_name_length": d.max_name_length,
        "transaction_ttl": d.transaction_ttl,
        "properties": dict(d.properties),
    }


def cmd_init(ctx: Ctx) -> int:
    """Create the lakehouse; on an existing one, check the settings asked for match."""
    t = ctx.target
    asked = _asked(ctx)
    try:
        reader: lakehouse.LakehouseReader | None = lakehouse.open_reader(
            t.url, storage_options=t.storage_options
        )
    except lakehouse.NotFound:
        reader = None
    if reader is None:
        with lakehouse.open(t.url, create=True, **t.writer_options(), **asked) as lh:
            d, version = lh.definition, lh.version
        created = version == 0 and not _differences(d, asked)
    else:
        with reader:
            d, version = reader.definition, reader.version
        created = False
    diffs = _differences(d, asked)
    if diffs:
        raise CliError(
            f"a lakehouse already exists at {t.url} with other settings: {'; '.join(diffs)}; "
            "they are fixed when a lakehouse is created (nothing was changed)",
            kind="AlreadyExists",
        )
    ctx.doc(_init_doc(t.url, d, version, created))
    if created:
        ctx.line(f"lakehouse {d.id} at {t.url}, version {version} (created)")
    else:
        ctx.line(f"lakehouse {d.id} at {t.url}, version {version} (it existed; nothing changed)")
    return EXIT_OK


def summarize(r: lakehouse.Lakehouse, url: str) -> dict[str, Any]:
    """Everything ``info`` reports, as plain JSON-able data."""
    d = r.definition
    with r.at_version(r.version) as v:
        namespaces = v.list_namespaces()
        tables = [f"{ns}.{t}" for ns in namespaces for t in v.list_tables(ns)]
        views = sum(len(v.list_views(ns)) for ns in namespaces)
        stats = [v.table_stats(t) for t in tables]
        head = v.version
    last = r.version_info(head)
    data_url: str | None
    try:
        data_url = r.data_location()[0]
    except TypeError:
        data_url = None
    return {
        "url": url,
        "id": d.id,
        "created_ms": d.created_ms,
        "version": head,
        "oldest_version": r.oldest_version,
        "last_commit_ms": last.created_ms,
        "default_isolation": d.default_isolation.value,
        "max_name_length": d.max_name_length,
        "transaction_ttl": d.transaction_ttl,
        "properties": dict(d.properties),
        "namespaces": len(namespaces),
        "tables": len(tables),
        "views": views,
        "data": {
            "rows": sum(s.rows for s in stats),
            "files": sum(s.files for s in stats),
            "deleted_rows": sum(s.deleted_rows for s in stats),
            "bytes": sum(s.bytes for s in stats),
        },
        "data_url": data_url,
    }


def _info_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    data = s["data"]
    data_text = (
        f"{plural(data['rows'], 'row')} in {plural(data['files'], 'file')}, "
        f"{human_bytes(data['bytes'])}"
    )
    if data["deleted_rows"]:
        data_text += f" ({plural(data['deleted_rows'], 'more row')} marked deleted)"
    kept = s["version"] - s["oldest_version"] + 1
    rows = [
        ("lakehouse", s["url"]),
        ("id", s["id"]),
        ("created", human_ms(s["created_ms"])),
        ("version", f"{s['version']} (oldest retained {s['oldest_version']}, {kept} kept)"),
        ("last commit", human_ms(s["last_commit_ms"])),
        ("default isolation", s["default_isolation"]),
        ("max name length", str(s["max_name_length"])),
        ("transaction TTL", f"{s['transaction_ttl']:g} s"),
        ("properties", " ".join(f"{k}={v}" for k, v in s["properties"].items()) or "none"),
        ("namespaces", str(s["namespaces"])),
        ("tables", str(s["tables"])),
        ("views", str(s["views"])),
        ("table data", data_text),
    ]
    if s["data_url"]:
        rows.append(("data location", s["data_url"]))
    return rows


def cmd_info(ctx: Ctx) -> int:
    with ctx.target.open_reader() as r:
        s = summarize(r, ctx.target.url)
    ctx.doc(s)
    for text in _rows(_info_rows(s)):
        ctx.line(text)
    return EXIT_OK


# ---------------------------------------------------------------------------
# verify
# ---------------------------------------------------------------------------
def cmd_verify(ctx: Ctx) -> int:
    bars: list[ProgressBar] = []

    def on_plan(total: int) -> Callable[[int, str], None]:
        show = ctx.args.progress if ctx.args.progress is not None else sys.stderr.isatty()
        bar = ProgressBar(total, sys.stderr, enabled=show, label="verify")
        bars.append(bar)
        return bar.advance

    try:
        r = verify(ctx.target, all_versions=ctx.args.all_versions, on_plan=on_plan)
    finally:
        for bar in bars:
            bar.close()
    ctx.doc(r.to_json())
    m = r.meta
    if m is not None:
        ctx.line(
            f"meta store: {plural(m.manifests, 'manifest')}, {plural(m.ssts, 'SST')} "
            f"({plural(m.blocks, 'block')}, {plural(m.entries, 'entry', 'entries')}), "
            f"{plural(m.wal_segments, 'WAL segment')}: {human_bytes(m.bytes)}"
        )
    if r.version is None:
        ctx.line("lakehouse: could not be read")
    else:
        if ctx.args.all_versions:
            trees = (
                f"the trees of {plural(r.trees, 'version')} ({plural(r.tables, 'table')} "
                f"and {plural(r.views, 'view')} in all)"
            )
        else:
            trees = (
                f"the tree of version {r.version} ({plural(r.tables, 'table')}, "
                f"{plural(r.views, 'view')})"
            )
        ctx.line(
            f"lakehouse: {plural(r.versions, 'version record')}, {trees}, "
            f"{plural(r.data_files, 'data file')} ({plural(r.rows, 'row')}, "
            f"{human_bytes(r.bytes)})"
        )
    return EXIT_OK if print_verdict(ctx, r) else EXIT_CORRUPTION
