"""The Iceberg REST catalog protocol, read-only: the Starlette application
(:func:`app`) and its answers; :mod:`lakehouse.iceberg.server` runs it on uvicorn.

Routes follow apache/iceberg's ``open-api/rest-catalog-open-api.yaml`` with no
prefix (``/v1/namespaces/...``). Path segments are taken from the raw request
path and percent-decoded one by one, so a name holding ``/`` or ``%`` travels
as ``%2F``/``%25``; a multi-level namespace (parts joined by ``%1F``) does not
exist here (the lakehouse's namespaces have one level).

Answers: ``GET /v1/config``; ``GET /v1/namespaces`` (``parent``, ``pageToken``,
``pageSize``); ``GET``/``HEAD /v1/namespaces/{ns}``; ``GET
/v1/namespaces/{ns}/tables``; ``GET``/``HEAD /v1/namespaces/{ns}/tables/{t}``
(the stored metadata JSON bytes, not re-encoded, with an ETag: ``If-None-Match`` gets
304); ``GET
/v1/namespaces/{ns}/views`` (always empty: views are not served). ``HEAD`` of a
namespace or table answers 204 when it exists (the protocol's existence checks);
``HEAD`` of any other ``GET`` route the ``GET`` answer's status and headers without
its body (RFC 9110), so ``HEAD /v1/config`` is a 200. Every write
answers 406 ``UnsupportedOperationException``; ``POST /v1/oauth/tokens`` an
OAuth error (static bearer tokens only). Errors are the protocol's
``{"error": {"message", "type", "code"}}``; an unexpected failure is a 500
with a one-line message (its traceback goes to the log only) and the server
keeps serving. Each request is logged on ``lakehouse.iceberg``: method, path,
status, milliseconds.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from lakehouse.errors import NotFound, VersionExpired
from lakehouse.iceberg.catalog import IcebergCatalog, NoSuchTable

__all__ = ["app", "check_token"]

log = logging.getLogger("lakehouse.iceberg")

#: what GET /v1/config lists as served (clients skip the others)
ENDPOINTS = [
    "GET /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "GET /v1/{prefix}/namespaces/{namespace}/views",
]

READ_ONLY = (
    "this Iceberg catalog is read-only: the lakehouse is written through the "
    "lakehouse library (lakehouse.open), not through the catalog"
)
SEPARATOR = "\x1f"
WRITES = frozenset({"POST", "PUT", "DELETE", "PATCH"})
MAX_PAGE = 10_000


class HttpError(Exception):
    """An answer in the protocol's error model."""

    def __init__(self, code: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.kind = kind


def _json(code: int, doc: Any, headers: dict[str, str] | None = None) -> Any:
    from starlette.responses import Response

    body = json.dumps(doc, separators=(",", ":")).encode()
    return Response(body, status_code=code, media_type="application/json", headers=headers)


def _no_content() -> Any:
    from starlette.responses import Response

    return Response(status_code=204)


def _error(code: int, kind: str, message: str) -> Any:
    message = " ".join(message.split())  # one line
    headers = {"WWW-Authenticate": "Bearer"} if code == 401 else None
    return _json(code, {"error": {"message": message, "type": kind, "code": code}}, headers)


class _Api:
    """Request -> answer, over an :class:`IcebergCatalog` (HTTP-level checks here)."""

    def __init__(self, catalog: IcebergCatalog, token: str | None) -> None:
        self.catalog = catalog
        self._token = None if token is None else token.encode()

    async def __call__(self, request: Any) -> Any:
        from starlette.concurrency import run_in_threadpool

        t0 = time.perf_counter()
        method = request.method
        raw = request.scope.get("raw_path") or request.url.path.encode()
        path = raw.decode("utf-8", "replace")
        try:
            response = await run_in_threadpool(self._answer, request, method, path)
        except HttpError as exc:
            response = _error(exc.code, exc.kind, str(exc))
        except Exception as exc:  # the server keeps serving
            log.error("%s %s failed", method, path, exc_info=True)
            response = _error(500, "InternalServerError", f"{type(exc).__name__}: {exc}")
        if method == "HEAD" and response.body:
            from starlette.responses import Response

            # the GET answer's status and headers (Content-Length included), no body
            response = Response(status_code=response.status_code, headers=response.headers)
        ms = (time.perf_counter() - t0) * 1000
        log.info("%s %s %d %.1fms", method, path, response.status_code, ms)
        return response

    # -- dispatch ------------------------------------------------------------------------------
    def _answer(self, request: Any, method: str, path: str) -> Any:
        parts = [unquote(p) for p in path.split("/")[1:]]
        if parts[:1] != ["v1"]:
            raise HttpError(404, "NoSuchEndpointException", f"no endpoint {path}")
        rest = parts[1:]
        if rest == ["oauth", "tokens"]:
            return _json(
                400,
                {
                    "error": "unsupported_grant_type",
                    "error_description": "this catalog issues no tokens; send the "
                    "server's static bearer token (Authorization: Bearer TOKEN)",
                },
            )
        self._authorize(request)
        query = request.query_params
        if rest == ["config"]:
            self._only(method)
            return _json(200, {"defaults": {}, "overrides": {}, "endpoints": ENDPOINTS})
        if rest in (["tables", "rename"], ["views", "rename"], ["transactions", "commit"]):
            raise HttpError(406, "UnsupportedOperationException", READ_ONLY)
        if not rest or rest[0] != "namespaces":
            raise HttpError(404, "NoSuchEndpointException", f"no endpoint {path}")
        if len(rest) == 1:
            self._only(method)
            return self._list_namespaces(query)
        ns = rest[1]
        tail = rest[2:]
        if not ns:
            raise HttpError(400, "BadRequestException", "the namespace in the path is empty")
        if not tail:
            self._only(method)
            found = self._namespace(ns)
            return _no_content() if method == "HEAD" else found  # HEAD: 204 when it exists
        if tail == ["properties"] or tail in (["register"], ["register-view"]):
            raise HttpError(406, "UnsupportedOperationException", READ_ONLY)
        if tail == ["tables"]:
            self._only(method)
            return self._list_tables(ns, query)
        if tail[0] == "tables" and len(tail) == 2:
            self._only(method)
            return self._table(request, ns, tail[1], method)
        if tail[0] == "views" and len(tail) <= 2:
            self._only(method)
            self._tables(ns)  # the namespace must exist
            if len(tail) == 1:
                return _json(200, {"identifiers": []})
            raise HttpError(
                404, "NoSuchViewException", f"view {tail[1]!r}: this catalog serves no views"
            )
        if tail[0] == "tables" and len(tail) == 3 and tail[2] == "metrics" and method == "POST":
            return _no_content()  # a client's scan report: nothing to keep
        if method in WRITES:
            raise HttpError(406, "UnsupportedOperationException", READ_ONLY)
        raise HttpError(404, "NoSuchEndpointException", f"no endpoint {path}")

    def _authorize(self, request: Any) -> None:
        if self._token is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer" or not value:
            raise HttpError(401, "NotAuthorizedException", "a bearer token is required")
        if not hmac.compare_digest(value.strip().encode(), self._token):
            raise HttpError(401, "NotAuthorizedException", "the bearer token is not valid")

    @staticmethod
    def _only(method: str) -> None:
        if method in ("GET", "HEAD"):
            return
        if method in WRITES:
            raise HttpError(406, "UnsupportedOperationException", READ_ONLY)
        raise HttpError(405, "MethodNotAllowedException", f"{method} is not served")

    def _call(self, ns: str, table: str | None, fn: Callable[[], Any]) -> Any:
        """Run a catalog call, mapping its errors to the protocol's."""
        try:
            return fn()
        except NoSuchTable as exc:
            raise HttpError(404, "NoSuchTableException", str(exc)) from None
        except (NotFound, VersionExpired) as exc:
            if SEPARATOR in ns:
                msg = (
                    f"namespace {ns.split(SEPARATOR)!r} does not exist (namespaces have one level)"
                )
            else:
                msg = str(exc)
            raise HttpError(404, "NoSuchNamespaceException", msg) from None
        except (ValueError, TypeError) as exc:
            raise HttpError(400, "BadRequestException", str(exc)) from None

    # -- endpoints -----------------------------------------------------------------------------
    def _list_namespaces(self, query: Any) -> Any:
        parent = query.get("parent")
        if parent is not None:
            parent = unquote(parent)
            if not parent:
                raise HttpError(400, "BadRequestException", "the parent namespace is empty")
            # namespaces have one level: an existing parent has no children
            self._call(parent, None, lambda: self.catalog.namespace(parent))
            names: list[str] = []
        else:
            names = self._call("", None, self.catalog.namespaces)
        page, token = _page(names, query)
        doc: dict[str, Any] = {"namespaces": [[n] for n in page]}
        if token is not None:
            doc["next-page-token"] = token
        return _json(200, doc)

    def _namespace(self, ns: str) -> Any:
        props = self._call(ns, None, lambda: self.catalog.namespace(ns))
        return _json(200, {"namespace": [ns], "properties": props})

    def _tables(self, ns: str) -> list[str]:
        """The tables of namespace ``ns`` (404 NoSuchNamespaceException if it does not exist)."""
        names: list[str] = self._call(ns, None, lambda: self.catalog.tables(ns))
        return names

    def _list_tables(self, ns: str, query: Any) -> Any:
        names = self._tables(ns)
        page, token = _page(names, query)
        doc: dict[str, Any] = {"identifiers": [{"namespace": [ns], "name": n} for n in page]}
        if token is not None:
            doc["next-page-token"] = token
        return _json(200, doc)

    def _table(self, request: Any, ns: str, table: str, method: str) -> Any:
        from starlette.responses import Response

        snapshots = request.query_params.get("snapshots")
        if snapshots is not None and snapshots not in ("all", "refs"):
            raise HttpError(
                400, "BadRequestException", f"snapshots must be 'all' or 'refs', not {snapshots!r}"
            )
        if not table:
            raise HttpError(400, "BadRequestException", "the table in the path is empty")
        if method == "HEAD":  # 204 when it exists
            self._call(ns, table, lambda: self.catalog.table_id(ns, table))
            return _no_content()
        location = self._call(ns, table, lambda: self.catalog.locate(ns, table))
        # the location names immutable bytes (table, effective version): it is the ETag
        etag = '"' + hashlib.sha256(location.encode()).hexdigest()[:32] + '"'
        if etag in _etags(request.headers.get("if-none-match")):
            return Response(status_code=304, headers={"ETag": etag})
        data = self._call(ns, table, lambda: self.catalog.document(location))
        body = b"".join(
            (b'{"metadata-location":', json.dumps(location).encode(), b',"metadata":', data)
        )
        body += b',"config":{}}'
        return Response(
            body, status_code=200, media_type="application/json", headers={"ETag": etag}
        )


def _etags(header: str | None) -> set[str]:
    if not header:
        return set()
    return {t.strip().removeprefix("W/") for t in header.split(",")}


def _page(names: list[str], query: Any) -> tuple[list[str], str | None]:
    """One page of ``names`` by ``pageToken`` (an offset) and ``pageSize``."""
    size_text = query.get("pageSize")
    token_text = query.get("pageToken")
    if size_text is None and not token_text:
        return names, None
    try:
        size = MAX_PAGE if size_text is None else int(size_text)
        start = int(token_text) if token_text else 0
    except ValueError:
        raise HttpError(
            400, "BadRequestException", "pageSize and pageToken must be integers"
        ) from None
    if size <= 0 or start < 0:
        raise HttpError(400, "BadRequestException", "pageSize must be positive")
    end = start + size
    return names[start:end], (str(end) if end < len(names) else None)


def check_token(token: Any) -> str | None:
    """``token`` if a server can require it as its bearer token (None: no token):
    a non-empty str without whitespace at either end (a client's ``Authorization``
    value is compared without it, so such a token could never match); ValueError
    or TypeError naming the problem otherwise."""
    if token is None:
        return None
    if not isinstance(token, str):
        raise TypeError(f"token must be a str or None, not {type(token).__name__}")
    if not token:
        raise ValueError("token must not be empty (pass None to serve without a token)")
    if token != token.strip():
        raise ValueError(
            "token must not begin or end with whitespace (clients' Authorization "
            "headers are read without it)"
        )
    return token


def app(catalog: IcebergCatalog, *, token: str | None = None) -> Any:
    """The Starlette application serving ``catalog``."""
    from starlette.applications import Starlette
    from starlette.routing import Route

    token = check_token(token)
    api = _Api(catalog, token)

    async def endpoint(request: Any) -> Any:
        return await api(request)

    methods = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
    return Starlette(routes=[Route("/{path:path}", endpoint, methods=methods)])
