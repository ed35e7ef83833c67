"""Dispatch, and the mapping from errors to exit statuses (and JSON error documents)."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Sequence

import kvstore
import lakehouse
from kvstore.objstore import local_path
from lakehouse.cli.parser import UsageError, build_parser, commands, reorder
from lakehouse.cli.target import (
    EXIT_CORRUPTION,
    EXIT_FAILURE,
    EXIT_USAGE,
    PROG,
    CliError,
    Ctx,
    Target,
    one_line,
)

__all__ = ["build_parser", "main"]


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------
def _fail(as_json: bool, kind: str, message: str, code: int) -> int:
    message = one_line(message)
    sys.stderr.write(f"{PROG}: {message}\n")
    if as_json:
        doc = {"error": {"type": kind, "message": message, "exit_code": code}}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    return code


def _os_message(exc: OSError, writes: bool) -> str:
    if isinstance(exc, PermissionError):
        where = f": {exc.filename}" if exc.filename else ""
        hint = " (write commands need write access to the lakehouse; read commands do not)"
        return f"permission denied{where}" + (hint if writes else "")
    return str(exc) or repr(exc)


def _is_local(url: str) -> bool:
    try:
        return local_path(url) is not None
    except ValueError:  # a malformed URL is no local directory
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (see ``lakehouse --help``)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    want_json = "--json" in args_list
    parser = build_parser()
    old = reorder(args_list, commands(parser))
    if old is not None:
        sys.stderr.write(
            f"{PROG}: note: `{PROG} URL COMMAND` is the old argument order; "
            f"write `{PROG} COMMAND URL ...`\n"
        )
        args_list = old
    try:
        args = parser.parse_args(args_list)
    except UsageError as exc:
        sys.stderr.write(exc.usage)
        return _fail(want_json, "usage", str(exc), EXIT_USAGE)
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else 0
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return _fail(want_json, "usage", "a command is required", EXIT_USAGE)
    logging.basicConfig(
        level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    as_json = bool(getattr(args, "json", False))
    target = Target(
        url=args.url,
        storage_options=dict(getattr(args, "storage_options", None) or []),
        takeover=bool(getattr(args, "takeover", False)),
    )
    ctx = Ctx(args=args, target=target, json=as_json)
    writes = bool(getattr(args, "writes", False))
    try:
        code: int = handler(ctx)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except CliError as exc:
        return _fail(as_json, exc.kind, str(exc), exc.code)
    except kvstore.CorruptionError as exc:  # lakehouse.CorruptionError is one too
        return _fail(
            as_json,
            "corruption",
            f"data is corrupt: {exc} (run `{PROG} verify {args.url}` for a full report)",
            EXIT_CORRUPTION,
        )
    except kvstore.WriterActive as exc:
        return _fail(as_json, "writer_active", str(exc), EXIT_FAILURE)
    except kvstore.FencedError as exc:
        msg = str(exc)  # the lakehouse's own says what was kept and what to do
        if "another writer took over" not in msg:
            msg = f"another writer took over the lakehouse: {msg}"
        return _fail(as_json, "fenced", msg, EXIT_FAILURE)
    except (lakehouse.LakehouseError, kvstore.KvError) as exc:
        cause = exc.__cause__
        if isinstance(cause, PermissionError) and _is_local(args.url):
            # a local directory: say what the command needs (write access, or none)
            return _fail(as_json, "PermissionError", _os_message(cause, writes), EXIT_FAILURE)
        return _fail(as_json, type(exc).__name__, str(exc), EXIT_FAILURE)
    except BrokenPipeError:  # e.g. `lakehouse head ... | head -1`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except FileNotFoundError as exc:
        return _fail(as_json, "missing", f"not found: {exc}", EXIT_FAILURE)
    except OSError as exc:
        return _fail(as_json, type(exc).__name__, _os_message(exc, writes), EXIT_FAILURE)
    except (ValueError, TypeError, NotImplementedError) as exc:
        return _fail(as_json, type(exc).__name__, str(exc) or repr(exc), EXIT_FAILURE)
    except KeyboardInterrupt:
        return _fail(as_json, "interrupted", "interrupted", 130)
    except Exception as exc:  # e.g. botocore's NoCredentialsError: a message, no traceback
        logging.getLogger("lakehouse").debug("unexpected error", exc_info=True)
        return _fail(as_json, type(exc).__name__, str(exc) or repr(exc), EXIT_FAILURE)
