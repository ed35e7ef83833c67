"""Command line: ``python -m lakehouse URL COMMAND ...`` (also the ``lakehouse`` script).

Examples::

    lakehouse ./lh init
    lakehouse ./lh ns create sales --property owner=ada
    lakehouse ./lh table create sales.orders --schema 'id:int64!,total:decimal128(10,2)'
    lakehouse ./lh table alter sales.orders --set retention=30d
    lakehouse ./lh view create sales.big --sql 'SELECT * FROM sales.orders WHERE total > 100'
    lakehouse ./lh list                       # the whole tree
    lakehouse ./lh describe sales.orders
    lakehouse ./lh history
    lakehouse ./lh show --version 2           # the tree as of version 2
    lakehouse ./lh show --time 2024-05-01T12:00:00Z
    lakehouse ./lh rollback 2
    lakehouse ./lh export ./lh-copy --kind full
    lakehouse ./lh expire --keep-last 10
    lakehouse --json ./lh history             # machine-readable output

Exit status: 0 on success, 1 on a lakehouse or input error, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

import lakehouse
from lakehouse.model import TableDef, VersionInfo, ViewDef
from lakehouse.reads import ReadOps

# ---------------------------------------------------------------------------
# parsing helpers
# ---------------------------------------------------------------------------
_DECIMAL = re.compile(r"^decimal(128|256)?\((\d+)\s*,\s*(-?\d+)\)$")
_LIST = re.compile(r"^list<(.+)>$")


def parse_type(text: str) -> pa.DataType:
    t = text.strip()
    m = _LIST.match(t)
    if m:
        return pa.list_(parse_type(m.group(1)))
    m = _DECIMAL.match(t)
    if m:
        bits, p, s = m.groups()
        return (pa.decimal256 if bits == "256" else pa.decimal128)(int(p), int(s))
    try:
        return pa.type_for_alias(t)
    except (ValueError, KeyError):
        raise ValueError(
            f"unknown column type {t!r} (e.g. int64, string, float64, bool, "
            "date32, timestamp[us], decimal128(10,2), list<string>)"
        ) from None


def _split_top(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for c in text:
        if c in "(<[":
            depth += 1
        elif c in ")>]":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def parse_schema(text: str) -> pa.Schema:
    """``'id:int64!,name:string'`` -> a schema (``!`` marks a NOT NULL column)."""
    fields = []
    for part in _split_top(text):
        if ":" not in part:
            raise ValueError(f"column {part!r} must be written name:type")
        name, typ = part.split(":", 1)
        nullable = not typ.strip().endswith("!")
        fields.append(pa.field(name.strip(), parse_type(typ.strip().rstrip("!")), nullable))
    if not fields:
        raise ValueError("the schema has no columns")
    return pa.schema(fields)


def parse_props(items: Sequence[str] | None) -> dict[str, str]:
    out = {}
    for item in items or ():
        if "=" not in item:
            raise ValueError(f"property {item!r} must be written key=value")
        k, v = item.split("=", 1)
        out[k] = v
    return out


def parse_time(text: str) -> int | datetime:
    """Epoch ms, or ISO 8601 (a time without a zone is taken as UTC)."""
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"time {text!r} is neither epoch milliseconds nor ISO 8601") from None
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


def parse_age(text: str) -> timedelta | int | datetime:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", text)
    if m:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[m.group(2)]
        return timedelta(**{unit: float(m.group(1))})
    return parse_time(text)


# ---------------------------------------------------------------------------
# rendering
# ---------------------------------------------------------------------------
def table_text(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def table_json(d: TableDef) -> dict[str, Any]:
    return {
        "kind": "table",
        "name": d.qualified_name,
        "table_id": d.table_id,
        "columns": [
            {"id": c.id, "name": c.name, "type": c.type, "nullable": c.nullable} for c in d.columns
        ],
        "properties": dict(d.properties),
        "primary_key": list(d.primary_key),
        "sort_keys": list(d.sort_keys),
        "format": d.format,
    }


def view_json(d: ViewDef) -> dict[str, Any]:
    return {
        "kind": "view",
        "name": d.qualified_name,
        "sql": d.sql,
        "referenced": list(d.referenced),
        "properties": dict(d.properties),
        "dialect": d.dialect,
    }


def version_json(v: VersionInfo) -> dict[str, Any]:
    return {
        "version": v.version,
        "created_at": v.created_at.isoformat(),
        "parent": v.parent,
        "isolation": v.isolation.value,
        "txn": v.txn_id,
        "changes": [
            {"kind": c.kind, "name": c.name, "op": c.op, "old_id": c.old_id, "new_id": c.new_id}
            for c in v.changes
        ],
        "rollback_of": v.rollback_of,
        "source": v.source,
    }


def tree(view: ReadOps) -> dict[str, Any]:
    return {
        ns: {
            "properties": dict(view.describe_namespace(ns).properties),
            "tables": view.list_tables(ns),
            "views": view.list_views(ns),
        }
        for ns in view.list_namespaces()
    }


def tree_text(t: dict[str, Any]) -> str:
    if not t:
        return "(no namespaces)"
    lines = []
    for ns, body in t.items():
        props = " ".join(f"{k}={v}" for k, v in body["properties"].items())
        lines.append(f"{ns}/" + (f"  [{props}]" if props else ""))
        for name in body["tables"]:
            lines.append(f"  {name}  (table)")
        for name in body["views"]:
            lines.append(f"  {name}  (view)")
    return "\n".join(lines)


def describe_text(obj: dict[str, Any]) -> str:
    lines = [f"{obj['kind']} {obj['name']}"]
    if obj["kind"] == "table":
        lines.append(
            table_text(
                [
                    [c["id"], c["name"], c["type"], "" if c["nullable"] else "not null"]
                    for c in obj["columns"]
                ],
                ["id", "column", "type", ""],
            )
        )
        if obj["primary_key"]:
            lines.append(f"primary key: {', '.join(obj['primary_key'])}")
        if obj["sort_keys"]:
            lines.append(f"sort keys: {', '.join(obj['sort_keys'])}")
        lines.append(f"format: {obj['format']}")
    elif obj["kind"] == "view":
        lines.append(f"sql: {obj['sql']}")
        if obj["referenced"]:
            lines.append(f"reads: {', '.join(obj['referenced'])}")
    for k, v in obj.get("properties", {}).items():
        lines.append(f"  {k} = {v}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# commands
# ---------------------------------------------------------------------------
def describe_any(view: ReadOps, name: str) -> dict[str, Any]:
    if "." not in name:
        d = view.describe_namespace(name)
        return {"kind": "namespace", "name": d.name, "properties": dict(d.properties)}
    if view.table_exists(name):
        return table_json(view.describe_table(name))
    if view.view_exists(name):
        return view_json(view.describe_view(name))
    raise lakehouse.NotFound(f"no table or view named {name}")


def run(args: argparse.Namespace, out: list[Any]) -> str:
    """Execute one command; appends JSON-able results to ``out``, returns text."""
    opts: dict[str, Any] = {"create": False}
    if args.command == "init":
        opts = {
            "default_isolation": args.isolation,
            "max_name_length": args.max_name_length,
            "properties": parse_props(args.property),
        }
    with lakehouse.open(args.url, **opts) as lh:
        cmd = args.command
        if cmd == "init":
            out.append({"url": args.url, "id": lh.definition.id, "version": lh.version})
            return f"lakehouse {lh.definition.id} at {args.url}, version {lh.version}"
        if cmd in ("ns", "table", "view") and args.action in ("create", "drop", "alter"):
            return write_object(lh, args, out)
        if cmd in ("ns", "table", "view"):
            with lh.at_version(lh.version) as view:
                if args.action == "list":
                    names = (
                        view.list_namespaces()
                        if cmd == "ns"
                        else view.list_tables(args.name)
                        if cmd == "table"
                        else view.list_views(args.name)
                    )
                    out.append(names)
                    return "\n".join(names) if names else "(none)"
                obj = describe_any(view, args.name)
                out.append(obj)
                return describe_text(obj)
        if cmd in ("list", "show"):
            view = (
                lh.at_time(parse_time(args.time))
                if getattr(args, "time", None)
                else lh.at_version(
                    lh.version if getattr(args, "version", None) is None else args.version
                )
            )
            with view:
                t = tree(view)
                out.append({"version": view.version, "tree": t})
                return f"version {view.version}\n{tree_text(t)}"
        if cmd == "describe":
            with lh.at_version(lh.version if args.version is None else args.version) as view:
                obj = describe_any(view, args.name)
                out.append(obj)
                return describe_text(obj)
        if cmd == "history":
            hist = lh.history(limit=args.limit)
            out.extend(version_json(v) for v in hist)
            rows = [
                [
                    v.version,
                    v.created_at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
                    v.isolation.value,
                    v.summary(),
                ]
                for v in hist
            ]
            return table_text(rows, ["version", "created_at (UTC)", "isolation", "changes"])
        if cmd == "rollback":
            v = lh.rollback(args.version)
            out.append({"version": v, "rollback_of": args.version})
            return f"version {v}: state of version {args.version} restored"
        if cmd == "export":
            summary = lh.export(args.dest, version=args.version, kind=args.kind)
            out.append(summary)
            return (
                f"exported version {summary['source_version']} to {args.dest} ({args.kind}): "
                f"{summary['objects']} objects, {summary['files_copied']} files copied"
            )
        if cmd == "expire":
            older = parse_age(args.older_than) if args.older_than else None
            oldest = lh.expire_versions(keep_last=args.keep_last, older_than=older)
            out.append({"oldest_version": oldest, "version": lh.version})
            return f"oldest retained version: {oldest} (latest: {lh.version})"
    raise AssertionError(f"unhandled command {args.command}")


def write_object(lh: lakehouse.Lakehouse, args: argparse.Namespace, out: list[Any]) -> str:
    cmd, action, name = args.command, args.action, args.name
    with lh.begin() as txn:
        if cmd == "ns":
            if action == "create":
                txn.create_namespace(name, parse_props(args.property))
            elif action == "drop":
                txn.drop_namespace(name)
            else:
                txn.alter_namespace(
                    name, set_properties=parse_props(args.set), remove_properties=args.unset
                )
        elif cmd == "table":
            if action == "create":
                txn.create_table(
                    name,
                    parse_schema(args.schema),
                    parse_props(args.property),
                    primary_key=args.primary_key,
                    sort_keys=args.sort_key,
                )
            elif action == "drop":
                txn.drop_table(name)
            else:
                txn.alter_table(
                    name,
                    set_properties=parse_props(args.set),
                    remove_properties=args.unset,
                    schema=parse_schema(args.schema) if args.schema else None,
                )
        else:
            if action == "create":
                txn.create_view(name, args.sql, parse_props(args.property), referenced=args.reads)
            elif action == "drop":
                txn.drop_view(name)
            else:
                txn.alter_view(
                    name,
                    sql=args.sql,
                    set_properties=parse_props(args.set),
                    remove_properties=args.unset,
                )
    version = txn.committed_version or txn.version
    kind = {"ns": "namespace", "table": "table", "view": "view"}[cmd]
    out.append({"version": version, "op": action, "kind": kind, "name": name})
    return f"version {version}: {action} {kind} {name}"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lakehouse", description="A TrinityLake-style lakehouse on kvstore."
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("url", help="lakehouse location: a directory, file://, memory:// or s3://")
    sub = p.add_subparsers(dest="command", required=True)

    init = sub.add_parser("init", help="create the lakehouse (if missing) and show its id")
    init.add_argument("--isolation", default="snapshot", choices=["snapshot", "serializable"])
    init.add_argument("--max-name-length", type=int, default=255)
    init.add_argument("--property", action="append", metavar="K=V")

    for kind, label in (("ns", "namespace"), ("table", "table"), ("view", "view")):
        kp = sub.add_parser(kind, help=f"{label} commands")
        acts = kp.add_subparsers(dest="action", required=True)
        qual = "NS" if kind == "ns" else f"NS.{kind.upper()}"
        c = acts.add_parser("create", help=f"create a {label}")
        c.add_argument("name", metavar=qual)
        c.add_argument("--property", action="append", metavar="K=V")
        if kind == "table":
            c.add_argument("--schema", required=True, help="e.g. 'id:int64!,name:string'")
            c.add_argument("--primary-key", action="append", metavar="COLUMN")
            c.add_argument("--sort-key", action="append", metavar="COLUMN")
        if kind == "view":
            c.add_argument("--sql", required=True)
            c.add_argument("--reads", action="append", metavar="NS.OBJ")
        a = acts.add_parser("alter", help=f"alter a {label}")
        a.add_argument("name", metavar=qual)
        a.add_argument("--set", action="append", metavar="K=V")
        a.add_argument("--unset", action="append", metavar="K")
        if kind == "table":
            a.add_argument("--schema", help="the full new schema")
        if kind == "view":
            a.add_argument("--sql")
        d = acts.add_parser("drop", help=f"drop a {label}")
        d.add_argument("name", metavar=qual)
        ls = acts.add_parser("list", help="list names")
        if kind != "ns":
            ls.add_argument("name", metavar="NS")
        ds = acts.add_parser("describe", help=f"describe a {label}")
        ds.add_argument("name", metavar=qual)

    sub.add_parser("list", help="the whole tree at the latest version")
    de = sub.add_parser("describe", help="describe a namespace, table or view")
    de.add_argument("name")
    de.add_argument("--version", type=int)
    hi = sub.add_parser("history", help="versions, newest first")
    hi.add_argument("--limit", type=int)
    sh = sub.add_parser("show", help="the tree as of a version or a time")
    g = sh.add_mutually_exclusive_group(required=True)
    g.add_argument("--version", type=int)
    g.add_argument("--time", help="epoch ms or ISO 8601 (UTC unless a zone is given)")
    rb = sub.add_parser("rollback", help="commit a new version equal to an old one")
    rb.add_argument("version", type=int)
    ex = sub.add_parser("export", help="copy a version into a new lakehouse")
    ex.add_argument("dest")
    ex.add_argument("--version", type=int)
    ex.add_argument("--kind", default="full", choices=["full", "minimal"])
    xp = sub.add_parser("expire", help="drop old versions")
    xp.add_argument("--keep-last", type=int)
    xp.add_argument("--older-than", help="7d / 12h / 30m / 45s, epoch ms or ISO 8601")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    argv = [a for a in argv if a != "--json"]
    args = build_parser().parse_args(argv)
    out: list[Any] = []
    try:
        text = run(args, out)
    except (lakehouse.LakehouseError, ValueError, TypeError) as exc:
        if as_json:
            print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
        else:
            print(f"error: {exc}", file=sys.stderr)
        return 1
    if as_json:
        payload: Any = out[0] if len(out) == 1 and args.command != "history" else out
        print(json.dumps(payload, indent=2, default=str))
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
