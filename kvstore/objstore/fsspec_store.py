"""Any fsspec filesystem as an object store (S3 through s3fs, GCS, ...).

``put_if_absent`` is ``pipe_file(path, data, mode="create")``, which s3fs sends
as ``If-None-Match: *`` and maps a 412 to FileExistsError (never
``open(p, "xb")``: with zero bytes it silently overwrites, and multipart
uploads drop the condition). Filesystems whose ``pipe_file`` has no create
mode cannot be used for a writer (fencing would be a check-then-write race),
so they raise :class:`NotImplementedError` there. Filesystems are built with
``skip_instance_cache=True`` and ``use_listings_cache=False`` so listings
never go stale.

Ambiguous outcomes. A conditional PUT that errors or times out may still have
happened, and a retried PUT (ours, or the HTTP client's own retry) can answer
412 to the writer that actually won. So after *any* uncertain outcome, and on
every FileExistsError, the object is read back: if it holds exactly our bytes,
the write happened and is reported as a success; otherwise FileExistsError
(someone else's object) or the original error (nothing there). Every object
the engine creates this way is unique to its writer (manifests carry the
writer epoch and a per-session nonce; WAL objects carry their sequence
numbers; SST names are random), so "same bytes" means "our write".

Transient failures (throttling, 5xx, timeouts, connection resets) are retried
with exponential backoff and jitter, ``retries`` times; definite answers (404,
403, 412, 416 and other 4xx) are not. A transport failure that outlasts the
retries is raised as OSError.

Each call is one request on S3: ``get`` asks for the open range ``bytes=0-``
(a plain ``cat_file`` makes s3fs send a HEAD first), ``exists``/``size`` send
one HEAD (s3fs's own add a LIST for a missing key). Only a create that finds
its name taken costs a second request, the read-back GET.
"""

from __future__ import annotations

import errno
import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kvstore.objstore.base import Journal, RangeReader, SimpleRangeReader, check_name

log = logging.getLogger("kvstore.objstore")
T = TypeVar("T")

#: errors that say something definite about the object: never retried
_DEFINITE = (
    FileNotFoundError,
    FileExistsError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
    NotImplementedError,
    ValueError,
    TypeError,
)


#: 4xx answers that are worth another try (timeouts, throttling, conflicting
#: concurrent conditional requests, bodies damaged in transit)
_TRANSIENT_4XX_CODES = frozenset(
    {
        "RequestTimeout",
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "ConditionalRequestConflict",
        "OperationAborted",
        "IncompleteBody",
        "BadDigest",
        "XAmzContentSHA256Mismatch",
    }
)


def _s3_answer(exc: BaseException) -> tuple[int | None, str | None]:
    """(HTTP status, S3 error code) of a translated botocore ClientError, if any."""
    for e in (exc, exc.__cause__):
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            code = response.get("Error", {}).get("Code")
            return (status if isinstance(status, int) else None), code
    return None, None


def is_transient(exc: BaseException) -> bool:
    """Throttling, 5xx, timeouts and connection trouble: worth another try.

    A definite 4xx answer (416 InvalidRange, 400 InvalidArgument, ...) is not:
    asking again gets the same answer.
    """
    if isinstance(exc, _DEFINITE):
        return False
    status, code = _s3_answer(exc)
    if (
        status is not None
        and 400 <= status < 500
        and status not in (408, 409, 429)
        and code not in _TRANSIENT_4XX_CODES
    ):
        return False
    if isinstance(exc, (OSError, TimeoutError, ConnectionError)):
        return True
    # botocore's and aiohttp's transport errors are not all OSErrors (a connection
    # closed without an answer is botocore's ConnectionClosedError, a refused one
    # EndpointConnectionError): match them by class name, without importing either
    return not _TRANSIENT_CLASS_NAMES.isdisjoint(c.__name__ for c in type(exc).__mro__)


_TRANSIENT_CLASS_NAMES = frozenset(
    {
        "ClientError",  # botocore, when s3fs did not translate it
        "HTTPClientError",  # botocore: ConnectionClosedError, ReadTimeoutError, ...
        "ConnectionError",  # botocore's own: EndpointConnectionError, ...
        "ClientConnectionError",  # aiohttp: ServerDisconnectedError, ClientOSError, ...
        "ClientPayloadError",
        "ServerTimeoutError",
        "FSTimeoutError",
    }
)


#: packages whose exceptions are translated to OSError (callers handle OSError)
_HTTP_STACK = frozenset({"botocore", "aiobotocore", "boto3", "aiohttp", "s3fs", "fsspec", "gcsfs"})


def _foreign(exc: BaseException) -> bool:
    """An exception of the HTTP stack that is not already an OSError or a Python builtin."""
    return not isinstance(exc, OSError) and type(exc).__module__.split(".")[0] in _HTTP_STACK


def _as_os_error(what: str, exc: BaseException) -> OSError:
    """The OSError for a definite failure the HTTP stack raised in its own class:
    missing or unusable credentials are a PermissionError, the rest EIO."""
    text = f"{what}: {type(exc).__name__}: {exc}"
    if "Credential" in type(exc).__name__ or "credential" in str(exc).lower():
        return PermissionError(errno.EACCES, text)
    return OSError(errno.EIO, text)


class FsspecStore:
    def __init__(
        self,
        protocol: str,
        root: str,
        storage_options: dict[str, Any] | None = None,
        *,
        filesystem: Any = None,
        retries: int = 5,
        backoff: float = 0.05,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        import fsspec

        opts = dict(storage_options or {})
        if filesystem is None:
            opts.setdefault("skip_instance_cache", True)
            opts.setdefault("use_listings_cache", False)
            filesystem = fsspec.filesystem(protocol, **opts)
        self.fs = filesystem
        self.retries = retries
        self._backoff = backoff
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.stats = {"requests": 0, "retries": 0, "ambiguous_resolved": 0}
        self.protocol = protocol
        self.root = root.rstrip("/")

    def _path(self, name: str) -> str:
        return f"{self.root}/{check_name(name)}"

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run one request, retrying transient failures with jittered backoff."""
        delay = self._backoff
        for attempt in range(self.retries + 1):
            self.stats["requests"] += 1
            try:
                return fn()
            except BaseException as exc:
                if not is_transient(exc):
                    if isinstance(exc, Exception) and _foreign(exc):
                        raise _as_os_error(what, exc) from exc
                    raise
                if attempt == self.retries:
                    if isinstance(exc, OSError):
                        raise
                    # callers handle OSError (and KvError): a transport failure that
                    # outlasted the retries is one, whatever the HTTP stack called it
                    raise OSError(errno.EIO, f"{what}: {type(exc).__name__}: {exc}") from exc
                self.stats["retries"] += 1
                log.warning("%s: %s (retry %d in %.2fs)", what, exc, attempt + 1, delay)
                self._sleep(delay * (0.5 + self._rng.random()))
                delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    def _read_back(self, name: str) -> bytes | None:
        try:
            return self.get(name)
        except FileNotFoundError:
            return None

    def put(self, name: str, data: bytes) -> None:
        path = self._path(name)
        payload = bytes(data)
        self._call(f"put {name}", lambda: self.fs.pipe_file(path, payload))

    def put_if_absent(self, name: str, data: bytes) -> None:
        path = self._path(name)
        payload = bytes(data)

        def attempt() -> None:
            try:
                self.fs.pipe_file(path, payload, mode="create")
            except TypeError as exc:  # pipe_file without a create mode
                raise NotImplementedError(
                    f"{self.protocol}: filesystem has no atomic create (pipe_file mode='create')"
                ) from exc

        try:
            self._call(f"put_if_absent {name}", attempt)
        except FileExistsError:
            # maybe our own earlier (retried) request won: read back and decide
            if self._read_back(name) == payload:
                self.stats["ambiguous_resolved"] += 1
                return
            raise FileExistsError(name) from None
        except NotImplementedError:
            raise
        except Exception:
            # outcome unknown (error after retries, timeout): the object decides
            found = self._read_back(name)
            if found == payload:
                self.stats["ambiguous_resolved"] += 1
                log.warning("put_if_absent %s reported an error but landed", name)
                return
            if found is not None:  # someone else's object: ours can never land now
                raise FileExistsError(name) from None
            raise

    def get(self, name: str) -> bytes:
        """The whole object in one GET.

        (``cat_file(path)`` without a range makes s3fs send a HEAD first, to
        decide on a chunked parallel download, and a HEAD plus a LIST for a
        missing key; an open-ended range ``bytes=0-`` is one GET.)
        """
        path = self._path(name)
        try:
            return bytes(self._call(f"get {name}", lambda: self.fs.cat_file(path, start=0)))
        except FileNotFoundError:
            raise FileNotFoundError(name) from None
        except OSError as exc:
            status, code = _s3_answer(exc)
            if status == 416 or code == "InvalidRange":
                return b""  # S3 answers 416 to any range of an empty object
            raise

    def get_range(self, name: str, start: int, length: int) -> bytes:
        """Bytes ``start .. start+length`` (fewer at the end), like the other stores.

        One ranged GET. ``length <= 0`` reads nothing (s3fs would return the
        whole object for an empty range) and a range past the end is empty
        (S3 answers 416), but a missing object is FileNotFoundError either way.
        """
        path = self._path(name)
        if length <= 0:
            self.size(name)
            return b""
        try:
            return bytes(
                self._call(
                    f"get_range {name}",
                    lambda: self.fs.cat_file(path, start=start, end=start + length),
                )
            )
        except FileNotFoundError:
            raise FileNotFoundError(name) from None
        except OSError as exc:
            status, code = _s3_answer(exc)
            if status == 416 or code == "InvalidRange":
                return b""
            raise

    def list(self, prefix: str = "") -> list[str]:
        dir_part, _, _ = prefix.rpartition("/")
        base = f"{self.root}/{dir_part}" if dir_part else self.root
        try:
            found = self._call(f"list {prefix}", lambda: self.fs.find(base))
        except FileNotFoundError:
            return []
        root = self.root + "/"
        names = []
        for path in found:
            rel = path[len(root) :] if path.startswith(root) else path.split(root, 1)[-1]
            if rel.startswith(prefix):
                names.append(rel)
        return sorted(names)

    def delete(self, name: str) -> None:
        path = self._path(name)
        try:
            self._call(f"delete {name}", lambda: self.fs.rm_file(path))
        except FileNotFoundError:
            pass

    def _head(self, path: str) -> dict[str, Any]:
        """One HEAD request on s3fs (whose ``exists``/``info`` follow a 404 with a
        LIST, looking for a "directory": two requests for every missing object,
        such as the next manifest that every fencing check probes for)."""
        bucket, key, _ = self.fs.split_path(path)
        return dict(self.fs.call_s3("head_object", Bucket=bucket, Key=key))

    @property
    def _can_head(self) -> bool:
        return hasattr(self.fs, "call_s3") and hasattr(self.fs, "split_path")

    def exists(self, name: str) -> bool:
        path = self._path(name)
        if self._can_head:
            try:
                self._call(f"exists {name}", lambda: self._head(path))
                return True
            except FileNotFoundError:
                return False
        return bool(self._call(f"exists {name}", lambda: self.fs.exists(path)))

    def size(self, name: str) -> int:
        path = self._path(name)
        try:
            if self._can_head:
                head = self._call(f"size {name}", lambda: self._head(path))
                return int(head["ContentLength"])
            return int(self._call(f"size {name}", lambda: self.fs.size(path)))
        except FileNotFoundError:
            raise FileNotFoundError(name) from None

    def open_journal(self, name: str) -> Journal | None:
        return None

    def open_range_reader(self, name: str) -> RangeReader:
        return SimpleRangeReader(self, name)

    def describe(self) -> str:
        return f"{self.protocol}://{self.root}"

    def arrow_filesystem(self) -> tuple[Any, str]:
        """``(pyarrow FileSystem, root path)`` for engines that read many objects at
        once (the lakehouse's Parquet scans); requests go through this fsspec
        filesystem, so they see the same endpoint and credentials."""
        import pyarrow.fs as pafs

        return pafs.PyFileSystem(pafs.FSSpecHandler(self.fs)), self.root
