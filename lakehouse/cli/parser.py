"""The argument parser, and the old argument order ``lakehouse URL COMMAND``.

Every command takes its URL first, as in ``kvstore COMMAND URL``; the
groups take it after the action (``lakehouse table create URL NS.T``).
Common options (``--json``, ``-o``, ``--takeover``, ``-v``) go before or
after the command name. Bad values are usage errors (exit status 2).
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

import lakehouse
from lakehouse.cli import admin as w
from lakehouse.cli import commands as c
from lakehouse.cli import data as d
from lakehouse.cli import parse as p
from lakehouse.cli import partitions as pt
from lakehouse.cli.target import PROG

DESCRIPTION = """\
Administer a lakehouse: create it, define namespaces, tables and views, look
at its tree, versions and table data at any version, append, update, merge,
delete and compact rows, restore and clone tables, expire versions, export,
verify. URL is a local directory, file:///abs/dir or
s3://bucket/prefix (pass -o endpoint_url=... -o key=... -o secret=...).

Read commands (info, list, show, describe, history, stats, files,
partitions, head, changes, verify, and list/describe in the ns/table/view
groups) open the lakehouse read-only: they never disturb a running writer and
work on a read-only directory. Write commands open it as its single writer.
On a local directory they refuse while another process writes the lakehouse, naming it;
--takeover opens anyway and FENCES that writer (its next commit raises
lakehouse.FencedError). On object stores (s3://), where a live writer cannot
be seen, they always fence."""

EPILOG = """\
exit status: 0 ok, 1 failure, 2 usage error, 3 corruption found."""

WRITER = (
    "Writer: refused while another process writes a local lakehouse (unless "
    "--takeover); fences any writer on s3://."
)


class UsageError(Exception):
    def __init__(self, message: str, usage: str) -> None:
        super().__init__(message)
        self.usage = usage


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so main() decides what to print."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.format_usage())


def _common() -> Parser:
    """Options every command takes, before or after its name (hence SUPPRESS)."""
    q = Parser(add_help=False)
    g = q.add_argument_group("common options")
    g.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON document"
    )
    g.add_argument(
        "-o",
        "--storage-option",
        dest="storage_options",
        metavar="KEY=VALUE",
        type=p.arg(p.storage_option),
        action="append",
        default=argparse.SUPPRESS,
        help="fsspec storage option for s3:// URLs (repeatable)",
    )
    g.add_argument(
        "--takeover",
        action="store_true",
        default=argparse.SUPPRESS,
        help="write commands: open even while another process writes the lakehouse, "
        "fencing it (its next commit raises FencedError)",
    )
    g.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="log what the lakehouse does (to stderr)",
    )
    return q


def _at(q: argparse.ArgumentParser) -> None:
    g = q.add_mutually_exclusive_group()
    g.add_argument("--version", type=p.arg(p.version), metavar="V", help="read version V")
    g.add_argument(
        "--at",
        "--time",
        dest="at",
        type=p.arg(p.parse_time),
        metavar="TIME",
        help="read the version current at TIME: epoch ms or ISO 8601 (UTC unless a zone is given)",
    )


def _where(q: argparse.ArgumentParser) -> None:
    q.add_argument("--where", type=p.arg(p.where), metavar="SQL", help='e.g. "total > 100"')


def _add_group(sub: Any, common: Parser, kind: str, label: str) -> None:
    """``ns``/``table``/``view`` with create, alter, drop, list and describe."""
    kp = sub.add_parser(kind, help=f"{label} commands", description=f"Commands on {label}s.")
    acts = kp.add_subparsers(dest="action", metavar="ACTION", required=True)
    qual = "NS" if kind == "ns" else f"NS.{kind.upper()}"

    def act(name: str, handler: Any, help: str, writes: bool) -> Parser:
        q: Parser = acts.add_parser(
            name, help=help, description=help + (f" {WRITER}" if writes else ""), parents=[common]
        )
        q.set_defaults(handler=handler, writes=writes)
        q.add_argument("url", metavar="URL", help="the lakehouse")
        return q

    q = act("create", c.cmd_write_object, f"Create a {label}.", True)
    q.add_argument("name", metavar=qual)
    q.add_argument("--property", action="append", type=p.arg(p.parse_pair), metavar="K=V")
    if kind != "view":
        q.add_argument(
            "--if-not-exists",
            action="store_true",
            help=f"an existing {label} is left as it is (no error, no new version)",
        )
    if kind == "table":
        q.add_argument(
            "--schema",
            required=True,
            type=p.arg(p.parse_schema),
            help="e.g. 'id:int64!,name:string,total:decimal128(10,2)' (! = not null)",
        )
        q.add_argument("--primary-key", action="append", metavar="COLUMN")
        q.add_argument(
            "--sort-key",
            action="append",
            metavar="COLUMN",
            help="rows of each written file are sorted by these columns (repeatable)",
        )
        q.add_argument(
            "--partition-by",
            action="append",
            metavar="TRANSFORM",
            help="a partition field: COLUMN, year(COL), month(COL), day(COL), hour(COL), "
            "'bucket(N, COL)' or 'truncate(W, COL)' (repeatable, in order)",
        )
    if kind == "view":
        q.add_argument("--sql", required=True)
        q.add_argument("--reads", action="append", metavar="NS.OBJ")
    q = act("alter", c.cmd_write_object, f"Alter a {label}.", True)
    q.add_argument("name", metavar=qual)
    q.add_argument("--set", action="append", type=p.arg(p.parse_pair), metavar="K=V")
    q.add_argument("--unset", action="append", metavar="K")
    if kind == "table":
        q.add_argument(
            "--schema",
            type=p.arg(p.parse_schema),
            help="the full new schema (adds, drops, widens columns)",
        )
        q.add_argument(
            "--rename-column", action="append", type=p.arg(p.parse_pair), metavar="OLD=NEW"
        )
        g = q.add_mutually_exclusive_group()
        g.add_argument(
            "--partition-by",
            action="append",
            metavar="TRANSFORM",
            help="a new partition spec for data written from now on (repeatable, in order; "
            "existing files keep theirs)",
        )
        g.add_argument(
            "--unpartitioned",
            action="store_true",
            help="write new data unpartitioned (existing files keep their spec)",
        )
        g = q.add_mutually_exclusive_group()
        g.add_argument(
            "--sort-key",
            action="append",
            metavar="COLUMN",
            help="the new sort keys, for files written from now on (repeatable)",
        )
        g.add_argument("--no-sort-keys", action="store_true", help="stop sorting written files")
    if kind == "view":
        q.add_argument("--sql")
    q = act("drop", c.cmd_write_object, f"Drop a {label}.", True)
    q.add_argument("name", metavar=qual)
    q = act("list", c.cmd_names, f"List {label} names.", False)
    if kind != "ns":
        q.add_argument("name", metavar="NS")
    _at(q)
    q = act("describe", c.cmd_describe, f"Describe a {label}.", False)
    q.add_argument("name", metavar=qual)
    _at(q)


def build_parser() -> Parser:
    common = _common()
    parser = Parser(
        prog=PROG,
        description=DESCRIPTION,
        epilog=EPILOG,
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {lakehouse.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, handler: Any, help: str, *, writes: bool = False) -> Parser:
        text = help + (f" {WRITER}" if writes else "")
        q: Parser = sub.add_parser(name, help=help, description=text, parents=[common])
        q.set_defaults(handler=handler, writes=writes)
        q.add_argument("url", metavar="URL", help="the lakehouse")
        return q

    q = add(
        "init",
        w.cmd_init,
        "Create a lakehouse (on an existing one: check its settings).",
        writes=True,
    )
    q.add_argument("--isolation", choices=["snapshot", "serializable"], help="default: snapshot")
    q.add_argument("--max-name-length", type=p.arg(p.positive), metavar="N", help="default: 255")
    q.add_argument(
        "--transaction-ttl", type=p.arg(p.parse_seconds), metavar="SECONDS", help="default: 3600"
    )
    q.add_argument("--property", action="append", type=p.arg(p.parse_pair), metavar="K=V")

    add("info", w.cmd_info, "Summarize a lakehouse: id, settings, versions, objects, data.")
    q = add("list", c.cmd_show, "The whole tree (namespaces, tables, views).")
    _at(q)
    q = add("show", c.cmd_show, "The tree as of a version or a time (same as list).")
    _at(q)
    q = add("describe", c.cmd_describe, "Describe a namespace, table or view.")
    q.add_argument("name", metavar="NAME")
    _at(q)
    q = add("history", c.cmd_history, "Versions, newest first.")
    q.add_argument("--limit", type=p.arg(p.count), metavar="N", help="the newest N only")

    for kind, label in (("ns", "namespace"), ("table", "table"), ("view", "view")):
        _add_group(sub, common, kind, label)

    q = add("stats", d.cmd_stats, "Rows, data files, deleted rows and bytes of a table.")
    q.add_argument("table", metavar="NS.TABLE")
    _at(q)
    q = add("files", d.cmd_files, "A table's data files: rows, deleted rows, bytes, column bounds.")
    q.add_argument("table", metavar="NS.TABLE")
    q.add_argument(
        "--partition",
        action="append",
        type=p.arg(p.partition_filter),
        metavar="FIELD=VALUE",
        help="only files of partitions with this value, spelled as `partitions` prints it: "
        "ts_day=2024-01-02 (repeatable: all must hold; or joined by '/')",
    )
    _at(q)
    q = add(
        "partitions",
        pt.cmd_partitions,
        "A table's partitions (spec, values): data files, live rows, deleted rows, bytes.",
    )
    q.add_argument("table", metavar="NS.TABLE")
    _at(q)
    q = add("head", d.cmd_head, "The first rows of a table (at a version or a time).")
    q.add_argument("table", metavar="NS.TABLE")
    q.add_argument("-n", type=p.arg(p.count), default=10, metavar="N", help="rows (default 10)")
    q.add_argument("--columns", type=p.arg(p.parse_columns), metavar="A,B", help="these columns")
    _where(q)
    _at(q)
    q.add_argument("--wide", action="store_true", help="do not cut long values")
    q = add("changes", d.cmd_changes, "Rows inserted and deleted by versions START..END.")
    q.add_argument("table", metavar="NS.TABLE")
    q.add_argument("start", type=p.arg(p.version), metavar="START")
    q.add_argument("end", type=p.arg(p.version), metavar="END", nargs="?", help="default: latest")
    q.add_argument("--wide", action="store_true", help="do not cut long values")
    q = add(
        "verify",
        w.cmd_verify,
        "Check the metadata store, every version record, the tree and every data file of the "
        "latest version (--all-versions: of every retained version). Exit 3 if anything is "
        "damaged.",
    )
    q.add_argument("--all-versions", action="store_true", help="check every retained version")
    q.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: when stderr is a terminal)",
    )

    q = add(
        "append", d.cmd_append, "Append the rows of a Parquet, CSV or JSON-lines file.", writes=True
    )
    q.add_argument("table", metavar="NS.TABLE")
    q.add_argument("file", metavar="FILE")
    q.add_argument("--format", choices=["parquet", "csv", "json"], help="default: by extension")
    q = add("delete", d.cmd_delete, "Delete the rows matching WHERE.", writes=True)
    q.add_argument("table", metavar="NS.TABLE")
    q.add_argument("where", type=p.arg(p.where), metavar="WHERE", help="e.g. \"status = 'void'\"")
    q = add("update", d.cmd_update, "Set columns of the rows matching WHERE.", writes=True)
    q.add_argument("table", metavar="NS.TABLE")
    q.add_argument("where", type=p.arg(p.where), metavar="WHERE", help='e.g. "id = 7"')
    q.add_argument(
        "--set",
        action="append",
        required=True,
        type=p.arg(p.parse_pair),
        metavar="COLUMN=SQL",
        help="the column's new value, a SQL expression over the row: "
        '--set "status=\'shipped\'" --set "total=total * 2" (repeatable)',
    )
    q = add(
        "merge",
        d.cmd_merge,
        "Upsert the rows of a Parquet, CSV or JSON-lines file by key columns.",
        writes=True,
    )
    q.add_argument("table", metavar="NS.TABLE")
    q.add_argument("file", metavar="FILE")
    q.add_argument(
        "--on",
        action="append",
        metavar="COLUMN",
        help="a key column (repeatable; default: the table's primary key)",
    )
    q.add_argument("--when-matched", default="update", choices=["update", "delete", "ignore"])
    q.add_argument("--when-not-matched", default="insert", choices=["insert", "ignore"])
    q.add_argument("--format", choices=["parquet", "csv", "json"], help="default: by extension")
    q = add(
        "restore",
        d.cmd_restore,
        "Make a table (schema, properties, rows) what it was at version V, as a new version.",
        writes=True,
    )
    q.add_argument("table", metavar="NS.TABLE")
    q.add_argument("version", type=p.arg(p.version), metavar="V")
    q = add(
        "clone",
        d.cmd_clone,
        "Create TARGET sharing SOURCE's data files (no copy), as of now or version V.",
        writes=True,
    )
    q.add_argument("source", metavar="NS.SOURCE")
    q.add_argument("target", metavar="NS.TARGET")
    q.add_argument("--version", type=p.arg(p.version), metavar="V", help="default: the latest")
    q = add(
        "compact",
        d.cmd_compact,
        "Rewrite small files and files with deleted rows into fewer files.",
        writes=True,
    )
    q.add_argument("table", metavar="NS.TABLE")
    q.add_argument("--target-file-bytes", type=p.arg(p.positive), metavar="N")
    g = q.add_mutually_exclusive_group()
    g.add_argument(
        "--where",
        type=p.arg(p.where),
        metavar="SQL",
        help="only the partitions this condition on partition columns selects",
    )
    g.add_argument(
        "--partition",
        action="append",
        type=p.arg(p.partition_filter),
        metavar="FIELD=VALUE",
        help="only these partitions, spelled as `partitions` prints them (repeatable: "
        "all must hold)",
    )
    q.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr: bytes of the files being rewritten, read so far "
        "(default: when stderr is a terminal)",
    )
    q = add(
        "remove-orphans",
        d.cmd_remove_orphans,
        "Delete data files no retained version references (left by crashed writers).",
        writes=True,
    )
    q.add_argument(
        "--older-than",
        type=p.arg(p.parse_duration),
        metavar="SECONDS",
        help="only files created longer ago: seconds or 7d/12h/30m/45s "
        "(default: the lakehouse's transaction TTL)",
    )
    q = add("rollback", c.cmd_rollback, "Commit a new version equal to an old one.", writes=True)
    q.add_argument("version", type=p.arg(p.version), metavar="V")
    q = add("export", c.cmd_export, "Copy a version into a new lakehouse at DEST.", writes=True)
    q.add_argument("dest", metavar="DEST")
    q.add_argument("--version", type=p.arg(p.version), metavar="V", help="default: the latest")
    q.add_argument("--kind", default="full", choices=["full", "minimal"])
    q = add("expire", c.cmd_expire, "Drop old versions and the files only they use.", writes=True)
    q.add_argument("--keep-last", type=p.arg(p.positive), metavar="N")
    q.add_argument(
        "--older-than",
        type=p.arg(p.parse_age),
        metavar="AGE",
        help="7d / 12h / 30m / 45s ago, or a time: epoch ms or ISO 8601",
    )
    q.add_argument(
        "--grace",
        type=p.arg(p.parse_duration),
        metavar="SECONDS",
        help="delete the files only expired versions use after this long (readers "
        "elsewhere may still read them): seconds or 7d/12h/30m/45s (default: 1h)",
    )
    _add_sql(add)
    from lakehouse.cli.iceberg import add_commands as add_iceberg

    add_iceberg(add, p.arg(p.version))
    return parser


def _cmd_sql(ctx: Any) -> int:
    from lakehouse.cli.sql import cmd_sql  # sqlglot and Spark only for this command

    return cmd_sql(ctx)


def _add_sql(add: Any) -> None:
    q = add(
        "sql",
        _cmd_sql,
        "A Spark SQL console over the lakehouse (local Spark), or a script with -e / -f: "
        "lakehouse tables as ns.table, time travel, DML, DDL, BEGIN ... COMMIT.",
        writes=True,
    )
    g = q.add_mutually_exclusive_group()
    g.add_argument("-e", "--execute", metavar="SQL", help="run these statements (';'-separated)")
    g.add_argument("-f", "--file", metavar="FILE", help="run the statements of FILE ('-': stdin)")
    q.add_argument("--master", default="local[2]", help="Spark master (default: local[2])")
    q.add_argument(
        "--conf",
        action="append",
        type=p.arg(p.parse_pair),
        metavar="K=V",
        help="a Spark setting for the session (repeatable)",
    )
    q.add_argument(
        "--max-rows",
        type=p.arg(p.positive),
        default=1000,
        metavar="N",
        help="show at most N rows of a result (default 1000)",
    )
    q.add_argument("--wide", action="store_true", help="do not cut long values")
    q.add_argument("--timing", action="store_true", help="print each statement's time")
    q.add_argument(
        "--history",
        metavar="FILE",
        help="readline history file (default: $LAKEHOUSE_SQL_HISTORY, else "
        "~/.lakehouse_sql_history; '' keeps none)",
    )


# ---------------------------------------------------------------------------
# the old argument order: lakehouse URL COMMAND ...
# ---------------------------------------------------------------------------
_FLAGS = ("--json", "-v", "--verbose", "--takeover")
_OPTIONS = ("-o", "--storage-option")  # each takes a value
_GROUPS = ("ns", "table", "view")


def commands(parser: argparse.ArgumentParser) -> set[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    raise AssertionError("no subcommands")


def _next_word(argv: list[str], i: int) -> int:
    """The index of the first argument at or after ``i`` that is not a common option."""
    while i < len(argv):
        a = argv[i]
        if a in _OPTIONS:
            i += 2
        elif a in _FLAGS or a.startswith(("-o", "--storage-option=")):
            i += 1
        else:
            break
    return i


def reorder(argv: list[str], commands: set[str]) -> list[str] | None:
    """``URL COMMAND ...`` (the old order) as ``COMMAND URL ...``; None if not that.

    For the groups the URL goes after the action: ``URL table create T`` is
    ``table create URL T``.
    """
    i = _next_word(argv, 0)
    if i >= len(argv) or argv[i].startswith("-") or argv[i] in commands:
        return None
    j = _next_word(argv, i + 1)
    if j >= len(argv) or argv[j] not in commands:
        return None
    url, cmd = argv[i], argv[j]
    head = argv[:i] + argv[i + 1 : j] + [cmd]
    rest = argv[j + 1 :]
    if cmd in _GROUPS and rest and not rest[0].startswith("-"):
        return [*head, rest[0], url, *rest[1:]]
    return [*head, url, *rest]
