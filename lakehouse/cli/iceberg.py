"""``serve-iceberg`` (the Iceberg REST catalog) and ``iceberg-metadata`` (one table's
Iceberg metadata file): the CLI side of :mod:`lakehouse.iceberg`."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from lakehouse.cli.target import EXIT_OK, Ctx, usage

__all__ = ["add_commands", "cmd_iceberg_metadata", "cmd_serve_iceberg"]

TOKEN_ENV = "LAKEHOUSE_ICEBERG_TOKEN"


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535, not {port}")
    return port


def add_commands(add: Any, version_type: Any) -> None:
    """Register the two commands through the parser's ``add(name, handler, help)``."""
    q = add(
        "serve-iceberg",
        cmd_serve_iceberg,
        "Serve the lakehouse as a read-only Iceberg REST catalog (until SIGTERM or "
        "Ctrl-C); it reads through a reader: never fences the writer, follows its "
        "commits. Namespaces as of version N are NS@vN.",
    )
    q.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    q.add_argument(
        "--port", type=_port, default=8181, metavar="PORT", help="default: 8181 (0: any free)"
    )
    g = q.add_mutually_exclusive_group()
    g.add_argument(
        "--token",
        metavar="TOKEN",
        help=f"require 'Authorization: Bearer TOKEN' (or set ${TOKEN_ENV})",
    )
    g.add_argument("--token-file", metavar="FILE", help="read the token from FILE")
    q = add(
        "iceberg-metadata",
        cmd_iceberg_metadata,
        "Write (or find) the Iceberg metadata of a table and print its location "
        "(for DuckDB's iceberg_scan, pyiceberg's StaticTable).",
    )
    q.add_argument("table", metavar="NS.TABLE")
    q.add_argument("--version", type=version_type, metavar="V", help="default: the latest")


def _token(ctx: Ctx) -> str | None:
    args = ctx.args
    if args.token is not None:
        token: str | None = args.token
    elif args.token_file is not None:
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            raise usage(f"--token-file {args.token_file}: {exc.strerror or exc}") from None
        if not token:
            raise usage(f"--token-file {args.token_file} is empty")
    else:
        token = os.environ.get(TOKEN_ENV) or None
    from lakehouse.iceberg.server import check_token

    try:
        return check_token(token)
    except ValueError as exc:
        raise usage(f"--token: {exc}") from None


def cmd_serve_iceberg(ctx: Ctx) -> int:
    from lakehouse.iceberg.server import serve

    token = _token(ctx)
    ctx.target.check_local()
    # the startup line and one line per request, through logging (to stderr)
    logging.getLogger("lakehouse.iceberg").setLevel(logging.INFO)
    serve(
        ctx.target.url,
        host=ctx.args.host,
        port=ctx.args.port,
        token=token,
        storage_options=ctx.target.storage_options or None,
    )
    return EXIT_OK


def cmd_iceberg_metadata(ctx: Ctx) -> int:
    from lakehouse.iceberg.writer import write_metadata

    with ctx.target.open_reader() as reader:
        location = write_metadata(reader, ctx.args.table, version=ctx.args.version)
    ctx.doc({"table": ctx.args.table, "metadata_location": location})
    ctx.line(location)
    return EXIT_OK
