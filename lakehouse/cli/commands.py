"""Commands on the tree and the versions of a lakehouse.

``list``/``show``, ``describe``, ``history``, the ``ns``/``table``/``view``
groups, ``rollback``, ``export`` and ``expire``. Each takes a
:class:`~lakehouse.cli.target.Ctx` and returns an exit status. Reads open
with :func:`lakehouse.open_reader`; writes with the single writer (see
:mod:`lakehouse.cli.target`).
"""

from __future__ import annotations

import os
from typing import Any

import lakehouse
from kvstore.objstore import local_path
from lakehouse.cli.parse import parse_props
from lakehouse.cli.render import (
    describe_text,
    history_text,
    table_json,
    tree,
    tree_text,
    version_json,
    view_json,
)
from lakehouse.cli.target import EXIT_OK, CliError, Ctx, transact, usage
from lakehouse.reads import ReadOps


# ---------------------------------------------------------------------------
# the tree and its objects
# ---------------------------------------------------------------------------
def cmd_show(ctx: Ctx) -> int:
    """``list`` and ``show``: the whole tree (at ``--version`` / ``--at``)."""
    with ctx.target.open_reader() as r, ctx.view(r) as view:
        t = tree(view)
    ctx.doc({"version": view.version, "tree": t})
    ctx.line(f"version {view.version}\n{tree_text(t)}")
    return EXIT_OK


def describe_any(view: ReadOps, name: str, kind: str | None = None) -> dict[str, Any]:
    if kind == "namespace" or (kind is None and "." not in name):
        d = view.describe_namespace(name)
        return {"kind": "namespace", "name": d.name, "properties": dict(d.properties)}
    if kind == "table" or (kind is None and view.table_exists(name)):
        return table_json(view.describe_table(name))
    if kind == "view" or (kind is None and view.view_exists(name)):
        return view_json(view.describe_view(name))
    ns = name.split(".", 1)[0]
    view.describe_namespace(ns)  # NotFound naming the namespace, if that is what is missing
    raise lakehouse.NotFound(f"no table or view named {name}")


_KINDS = {"ns": "namespace", "table": "table", "view": "view"}


def cmd_describe(ctx: Ctx) -> int:
    kind = _KINDS.get(ctx.args.command)  # `table describe` etc. say what they want
    with ctx.target.open_reader() as r, ctx.view(r) as view:
        obj = describe_any(view, ctx.args.name, kind)
    ctx.doc(obj)
    ctx.line(describe_text(obj))
    return EXIT_OK


def cmd_names(ctx: Ctx) -> int:
    """``ns list``, ``table list NS``, ``view list NS``."""
    cmd = ctx.args.command
    with ctx.target.open_reader() as r, ctx.view(r) as view:
        if cmd == "ns":
            names = view.list_namespaces()
        elif cmd == "table":
            names = view.list_tables(ctx.args.name)
        else:
            names = view.list_views(ctx.args.name)
    ctx.doc(names)
    ctx.line("\n".join(names) if names else "(none)")
    return EXIT_OK


def cmd_write_object(ctx: Ctx) -> int:
    """``ns|table|view create|alter|drop``: one transaction, one new version."""
    a = ctx.args
    cmd, action, name = a.command, a.action, a.name

    left: list[bool] = []  # create --if-not-exists found it there

    def work(txn: lakehouse.Transaction) -> None:
        if cmd == "ns":
            if action == "create":
                if not txn.create_namespace(
                    name, parse_props(a.property), if_not_exists=a.if_not_exists
                ):
                    left.append(True)
            elif action == "drop":
                txn.drop_namespace(name)
            else:
                txn.alter_namespace(
                    name, set_properties=parse_props(a.set), remove_properties=a.unset
                )
        elif cmd == "table":
            if action == "create":
                if not txn.create_table(
                    name,
                    a.schema,
                    parse_props(a.property),
                    primary_key=a.primary_key,
                    sort_keys=a.sort_key,
                    partition_by=a.partition_by,
                    if_not_exists=a.if_not_exists,
                ):
                    left.append(True)
            elif action == "drop":
                txn.drop_table(name)
            else:
                txn.alter_table(
                    name,
                    set_properties=parse_props(a.set),
                    remove_properties=a.unset,
                    schema=a.schema,
                    rename_columns=parse_props(a.rename_column) or None,
                    partition_by=[] if a.unpartitioned else a.partition_by,
                    sort_keys=[] if a.no_sort_keys else a.sort_key,
                )
        elif action == "create":
            txn.create_view(name, a.sql, parse_props(a.property), referenced=a.reads)
        elif action == "drop":
            txn.drop_view(name)
        else:
            txn.alter_view(
                name, sql=a.sql, set_properties=parse_props(a.set), remove_properties=a.unset
            )

    with ctx.target.open_writer() as lh:
        version, _ = transact(lh, work)
        if version is None:  # an alter that changed nothing
            version = lh.version
    kind = _KINDS[cmd]
    if left:
        ctx.doc({"version": version, "op": "none", "kind": kind, "name": name, "exists": True})
        ctx.line(f"{kind} {name} exists; left as it is (version {version})")
        return EXIT_OK
    ctx.doc({"version": version, "op": action, "kind": kind, "name": name})
    ctx.line(f"version {version}: {action} {kind} {name}")
    return EXIT_OK


# ---------------------------------------------------------------------------
# versions
# ---------------------------------------------------------------------------
def cmd_history(ctx: Ctx) -> int:
    with ctx.target.open_reader() as r:
        hist = r.history(limit=ctx.args.limit)
    ctx.doc([version_json(v) for v in hist])
    ctx.line(history_text(hist) if hist else "(no versions)")
    return EXIT_OK


def cmd_rollback(ctx: Ctx) -> int:
    target = ctx.args.version
    with ctx.target.open_writer() as lh:
        v = lh.rollback(target)
    ctx.doc({"version": v, "rollback_of": target})
    ctx.line(f"version {v}: state of version {target} restored")
    return EXIT_OK


def _check_dest(ctx: Ctx, dest: str) -> None:
    """Refuse a destination that is the source or a non-empty directory, before
    opening anything (a lakehouse there would be fenced by the export's open)."""
    src, dst = local_path(ctx.target.url), local_path(dest)
    if src is not None and dst is not None:
        if os.path.abspath(src) == os.path.abspath(dst):
            raise CliError(f"cannot export {ctx.target.url} onto itself", kind="AlreadyExists")
    elif ctx.target.url.rstrip("/") == dest.rstrip("/"):
        raise CliError(f"cannot export {ctx.target.url} onto itself", kind="AlreadyExists")
    if dst is not None and os.path.exists(dst):
        if not os.path.isdir(dst):
            raise CliError(f"export destination {dest} is a file", kind="AlreadyExists")
        if os.listdir(dst):
            raise CliError(
                f"export destination {dest} is not empty; export writes a new lakehouse "
                "into an empty or missing directory",
                kind="AlreadyExists",
            )


def cmd_export(ctx: Ctx) -> int:
    a = ctx.args
    _check_dest(ctx, a.dest)
    summary: dict[str, Any] | None = None
    with ctx.target.open_reader() as r:
        try:  # export only reads its source: from a reader, when the reader can
            summary = r.export(a.dest, version=a.version, kind=a.kind)
        except lakehouse.ReadOnlyError:
            summary = None
    if summary is None:
        with ctx.target.open_writer() as lh:
            summary = lh.export(a.dest, version=a.version, kind=a.kind)
    ctx.doc(summary)
    ctx.line(
        f"exported version {summary['source_version']} to {a.dest} ({a.kind}): "
        f"{summary['objects']} objects, {summary['files_copied']} files copied"
    )
    return EXIT_OK


def cmd_expire(ctx: Ctx) -> int:
    a = ctx.args
    if a.keep_last is None and a.older_than is None:
        raise usage("give --keep-last N, --older-than AGE, or both")
    with ctx.target.open_writer() as lh:
        oldest = lh.expire_versions(keep_last=a.keep_last, older_than=a.older_than, grace=a.grace)
        head = lh.version
    ctx.doc({"oldest_version": oldest, "version": head})
    ctx.line(f"oldest retained version: {oldest} (latest: {head})")
    return EXIT_OK
