"""Argument parsing, dispatch and the mapping from errors to exit statuses."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import kvstore
from kvstore.cli import commands as c
from kvstore.cli.codec import InputError
from kvstore.cli.store import CliError, Target, option_value
from kvstore.errors import CorruptionError, FencedError, KvError, WriterActive

PROG = "kvstore"

DESCRIPTION = """\
Administer a kvstore: inspect, read, write, compact, garbage-collect,
checkpoint and verify. URL is a local directory, file:///abs/dir or
s3://bucket/prefix (pass -o endpoint_url=... -o key=... -o secret=...).

Read commands (info, manifest, get, scan, checkpoint list, verify) only read
and never disturb a running writer. Write commands (put, delete, compact, gc,
checkpoint create/delete) open the store as its single writer. On a local
directory they refuse while another process writes the store, naming it;
--takeover opens anyway and FENCES that writer (the application gets
kvstore.FencedError on its next write and must reopen the store). On object
stores (s3://), where a live writer cannot be seen, they always fence."""

EPILOG = """\
exit status: 0 ok, 1 failure, 2 usage error, 3 corruption found,
4 key not found (get)."""

WRITER_NOTE = (
    "Opens the store as its writer: refused while another process writes a local "
    "store (unless --takeover); fences any writer on s3://."
)


class UsageError(Exception):
    def __init__(self, message: str, usage: str) -> None:
        super().__init__(message)
        self.usage = usage


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so main() decides what to print."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.format_usage())


def _storage_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE``, the value decoded by :func:`option_value` (as ``lakehouse -o``)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, option_value(value)


_MAX_SECONDS = 100 * 365 * 86400.0  # a century


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"seconds must be >= 0: {text!r}")
    if value > _MAX_SECONDS:  # also inf: a time no clock can reach
        raise argparse.ArgumentTypeError(f"seconds must be at most {_MAX_SECONDS:.0f}: {text!r}")
    return value


def _positive_seconds(text: str) -> float:
    value = _seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError("seconds must be > 0")
    return value


def _common() -> Parser:
    """Options every command takes, before or after its name (hence SUPPRESS)."""
    p = Parser(add_help=False)
    g = p.add_argument_group("common options")
    g.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print one JSON document on stdout",
    )
    g.add_argument(
        "-o",
        "--storage-option",
        dest="storage_options",
        metavar="KEY=VALUE",
        type=_storage_option,
        action="append",
        default=argparse.SUPPRESS,
        help="fsspec storage option for remote URLs (repeatable)",
    )
    g.add_argument(
        "--wal-dir",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="the local WAL directory, if the writer was opened with wal_dir= "
        "(default: the one the latest manifest records, when it exists here)",
    )
    g.add_argument(
        "--accept-wal-loss",
        action="store_true",
        default=argparse.SUPPRESS,
        help="write commands: open even if the last writer's WAL, holding writes no SST "
        "has, is gone or elsewhere (they are lost; see kvstore.open's accept_wal_loss)",
    )
    g.add_argument(
        "--takeover",
        action="store_true",
        default=argparse.SUPPRESS,
        help="write commands: open even while another process writes the store, "
        "fencing it (its next write raises FencedError)",
    )
    g.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="log what the engine does (to stderr)",
    )
    return p


def _hex() -> Parser:
    p = Parser(add_help=False)
    p.add_argument(
        "--hex",
        action="store_true",
        help="keys and values are hex, in and out (default: text; binary output escaped)",
    )
    return p


Handler = Callable[[c.Ctx], int]


def build_parser() -> Parser:
    common, hexa = _common(), _hex()
    parser = Parser(
        prog=PROG,
        description=DESCRIPTION,
        epilog=EPILOG,
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {kvstore.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, handler: Handler, help: str, *, hex: bool = False, **kw: Any) -> Parser:
        parents = [common, hexa] if hex else [common]
        p: Parser = sub.add_parser(name, help=help, description=help, parents=parents, **kw)
        p.set_defaults(handler=handler)
        return p

    def url(p: argparse.ArgumentParser) -> None:
        p.add_argument("url", metavar="URL", help="the store")

    def progress_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--progress",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="progress bar on stderr (default: when stderr is a terminal)",
        )

    p = add("info", c.cmd_info, "Summarize a store: manifest, seqs, levels, WAL, checkpoints.")
    url(p)

    p = add("manifest", c.cmd_manifest, "Show the latest manifest (or --id N).", hex=True)
    url(p)
    p.add_argument("--id", type=int, metavar="N", help="show manifest N instead of the latest")

    p = add("get", c.cmd_get, "Print the value of KEY.", hex=True)
    url(p)
    p.add_argument("key", metavar="KEY")
    p.add_argument("--raw", action="store_true", help="write the value's bytes unescaped")
    p.add_argument("--checkpoint", metavar="NAME", help="read from checkpoint NAME")

    p = add("put", c.cmd_put, f"Set KEY to VALUE. {WRITER_NOTE}", hex=True)
    url(p)
    p.add_argument("key", metavar="KEY")
    p.add_argument(
        "value",
        metavar="VALUE",
        nargs="?",
        help="the value; without it, standard input (all of it, byte for byte)",
    )
    p.add_argument("--create", action="store_true", help="create the store if it is missing")

    p = add("delete", c.cmd_delete, f"Delete KEY. {WRITER_NOTE}", hex=True)
    url(p)
    p.add_argument("key", metavar="KEY")

    p = add(
        "scan",
        c.cmd_scan,
        "List keys and values in [--start, --end), one 'KEY<TAB>VALUE' line each.",
        hex=True,
    )
    url(p)
    p.add_argument("--prefix", metavar="P", help="only keys starting with P")
    p.add_argument("--start", metavar="S", help="first key (inclusive)")
    p.add_argument("--end", metavar="E", help="end key (exclusive)")
    p.add_argument("--limit", type=int, metavar="N", help="stop after N items")
    p.add_argument("--reverse", action="store_true", help="descending key order")
    p.add_argument("--keys-only", action="store_true", help="print keys only")
    p.add_argument("--checkpoint", metavar="NAME", help="read from checkpoint NAME")

    p = add(
        "compact",
        c.cmd_compact,
        f"Flush and compact everything into one sorted run, then GC. {WRITER_NOTE}",
    )
    url(p)
    progress_flag(p)

    p = add(
        "gc",
        c.cmd_gc,
        f"Delete SSTs and manifests nothing references any more. {WRITER_NOTE}",
    )
    url(p)
    p.add_argument(
        "--grace",
        type=_seconds,
        metavar="SECONDS",
        help="delete only files unreferenced for this long, as far as this command can "
        "tell (default: the store's gc_grace_seconds option, 60)",
    )

    p = add("checkpoint", c.cmd_checkpoint_list, "Create, list or delete named checkpoints.")
    cps = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    def add_cp(name: str, handler: Handler, help: str) -> Parser:
        q: Parser = cps.add_parser(name, help=help, description=help, parents=[common])
        q.set_defaults(handler=handler)
        q.add_argument("url", metavar="URL", help="the store")
        return q

    q = add_cp("create", c.cmd_checkpoint_create, f"Create checkpoint NAME. {WRITER_NOTE}")
    q.add_argument("name", metavar="NAME")
    q.add_argument(
        "--expires-in", type=_positive_seconds, metavar="SECONDS", help="expire after SECONDS"
    )
    add_cp("list", c.cmd_checkpoint_list, "List checkpoints.")
    q = add_cp("delete", c.cmd_checkpoint_delete, f"Delete checkpoint NAME. {WRITER_NOTE}")
    q.add_argument("name", metavar="NAME")

    p = add(
        "verify",
        c.cmd_verify,
        "Check every manifest, every block of every live and checkpoint SST, and every WAL "
        "segment still to be replayed. Exit 3 if anything is damaged.",
    )
    url(p)
    progress_flag(p)

    add("bench", _no_handler, "Run the benchmark: `kvstore bench --help` for its options.")
    return parser


def _no_handler(ctx: c.Ctx) -> int:  # bench is dispatched before parsing
    raise AssertionError("unreachable")


def _bench(argv: list[str]) -> int:
    from kvstore.bench.__main__ import main as bench_main

    try:
        return bench_main(argv)
    except SystemExit as exc:  # its --help and usage errors
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)


_GLOBAL_FLAGS = ("--json", "-v", "--verbose", "--accept-wal-loss", "--takeover")
_GLOBAL_OPTIONS = ("-o", "--storage-option", "--wal-dir")  # each takes a value


def _split_bench(argv: list[str]) -> list[str] | None:
    """The arguments for the benchmark if the command is ``bench``, else None."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in _GLOBAL_OPTIONS:
            i += 2  # the option and its value
        elif a in _GLOBAL_FLAGS or a.startswith(("-o", "--storage-option=", "--wal-dir=")):
            i += 1  # a flag, or an option with its value attached
        else:
            break
    if i < len(argv) and argv[i] == "bench":
        passed = argv[i + 1 :]
        if "--json" in argv[:i] and "--json" not in passed:
            passed = ["--json", *passed]
        return passed
    return None


def _fail(args_json: bool, kind: str, message: str, code: int) -> int:
    sys.stderr.write(f"{PROG}: {message}\n")
    if args_json:
        doc = {"error": {"type": kind, "message": message, "exit_code": code}}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (see ``kvstore --help``)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    bench_args = _split_bench(args_list)
    if bench_args is not None:
        return _bench(bench_args)
    want_json = "--json" in args_list
    parser = build_parser()
    try:
        args = parser.parse_args(args_list)
    except UsageError as exc:
        sys.stderr.write(exc.usage)
        return _fail(want_json, "usage", str(exc), c.EXIT_USAGE)
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else 0
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return _fail(want_json, "usage", "a command is required", c.EXIT_USAGE)
    logging.basicConfig(
        level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    as_json = bool(getattr(args, "json", False))
    target = Target(
        url=args.url,
        storage_options=dict(getattr(args, "storage_options", None) or []),
        wal_dir=getattr(args, "wal_dir", None),
        accept_wal_loss=bool(getattr(args, "accept_wal_loss", False)),
        takeover=bool(getattr(args, "takeover", False)),
    )
    ctx = c.Ctx(args=args, target=target, json=as_json, hex=bool(getattr(args, "hex", False)))
    try:
        return handler(ctx)
    except InputError as exc:
        return _fail(as_json, "usage", str(exc), c.EXIT_USAGE)
    except CliError as exc:
        return _fail(as_json, "error", str(exc), exc.code)
    except CorruptionError as exc:
        return _fail(
            as_json,
            "corruption",
            f"data is corrupt: {exc} (run `kvstore verify {args.url}` for a full report)",
            c.EXIT_CORRUPTION,
        )
    except FencedError as exc:
        return _fail(
            as_json, "fenced", f"another writer took over the store: {exc}", c.EXIT_FAILURE
        )
    except WriterActive as exc:
        return _fail(as_json, "writer_active", str(exc), c.EXIT_FAILURE)
    except KvError as exc:
        return _fail(as_json, type(exc).__name__, str(exc), c.EXIT_FAILURE)
    except FileNotFoundError as exc:
        return _fail(as_json, "missing", f"object not found: {exc}", c.EXIT_FAILURE)
    except BrokenPipeError:  # e.g. `kvstore scan ... | head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except (ValueError, NotImplementedError, OSError) as exc:
        return _fail(as_json, type(exc).__name__, str(exc) or repr(exc), c.EXIT_FAILURE)
    except KeyboardInterrupt:
        return _fail(as_json, "interrupted", "interrupted", 130)
    except Exception as exc:  # e.g. botocore's NoCredentialsError: a message, no traceback
        logging.getLogger("kvstore").debug("unexpected error", exc_info=True)
        return _fail(as_json, type(exc).__name__, str(exc) or repr(exc), c.EXIT_FAILURE)
