"""kvstore on S3 through a fault-injecting HTTP proxy in front of moto.

:class:`FaultProxy` is a small HTTP server on 127.0.0.1 (port 0) that relays
every request to the moto endpoint, except when its fault plan says:

``apply_then_500``   forward the request (moto applies it), then answer
                     500 InternalError: the write happened, the client is
                     told it failed (and a retried conditional PUT then gets
                     412 for the object it created itself);
``timeout_applied``  forward the request, then say nothing for longer than
                     the client's read timeout (applied, outcome unknown);
``timeout_lost``     say nothing for longer than the read timeout, never
                     forward (not applied, outcome unknown);
``throttle``         answer 503 SlowDown without forwarding;
``reset_applied`` /  close the connection without an answer, after / without
``reset_lost``       forwarding.

The client side is configured to give up quickly (s3fs ``config_kwargs``:
small read/connect timeouts, no or few botocore retries), so the
:class:`FsspecStore` retry and read-back logic is what copes.

Checked: a conditional PUT that was applied and then failed is reported as a
success (read back: our bytes) and counted in ``stats["ambiguous_resolved"]``
- for manifests, WAL objects and SSTs inside the engine too; random seeded
faults on every kind of request during a multi-threaded workload of durable
puts, batches and transactions lose no acknowledged write, report no
committed write as failed, apply nothing twice (no seq twice, counter
increments exact, no partial batch); and with faults that outlast the
retries, a write reported as failed is absent or (errors are ambiguous)
present exactly once and whole.
"""

from __future__ import annotations

import http.client
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest

import kvstore
from kvstore import TransactionConflict, paths
from kvstore.format.wal import decode_object
from kvstore.objstore import FsspecStore

pytestmark = pytest.mark.s3

FAST = {"fsync": False}

_ERRORS = {
    500: ("InternalError", "We encountered an internal error. Please try again."),
    503: ("SlowDown", "Please reduce your request rate."),
}
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
    "expect",
}


def _error_body(status: int) -> bytes:
    code, message = _ERRORS[status]
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        "<RequestId>faultproxy</RequestId></Error>"
    ).encode()


@dataclass
class Request:
    method: str
    path: str  # with the query string
    headers: dict[str, str]  # lower-cased names
    body: bytes

    @property
    def conditional(self) -> bool:
        return self.method == "PUT" and self.headers.get("if-none-match") == "*"

    @property
    def key(self) -> str:
        return f"{self.method} {self.path}"


Plan = Callable[[Request], "str | None"]


class FaultProxy:
    """An HTTP relay to ``upstream`` with programmable faults (see the module doc).

    Bounded: it serves on a daemon thread, and shuts itself down after
    ``max_lifetime`` seconds if the test has not stopped it.
    """

    def __init__(self, upstream: str, *, delay: float = 1.3, max_lifetime: float = 300.0):
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.delay = delay  # how long the timeout faults stay silent
        self.plan: Plan = lambda req: None
        self.log: list[tuple[str, str, str | None]] = []  # (method, path, action)
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                proxy._handle(self)

            do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fault-proxy",
            daemon=True,
        )
        self._timer = threading.Timer(max_lifetime, self.stop)
        self._timer.daemon = True
        self._stopped = False

    # -- lifecycle ------------------------------------------------------------
    def start(self) -> FaultProxy:
        self._thread.start()
        self._timer.start()
        return self

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._timer.cancel()
        self._server.shutdown()
        self._server.server_close()

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def actions(self, action: str | None = None) -> list[tuple[str, str, str | None]]:
        with self._lock:
            return [e for e in self.log if action is None or e[2] == action]

    # -- one request ----------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        h.close_connection = True
        headers = {k.lower(): v for k, v in h.headers.items()}
        body = self._read_body(h, headers)
        req = Request(h.command, h.path, headers, body)
        action = self.plan(req)
        with self._lock:
            self.log.append((req.method, req.path, action))
        head = req.method == "HEAD"
        if action == "throttle":
            self._reply(h, 503, {}, _error_body(503), head=head)
            return
        if action == "timeout_lost":
            time.sleep(self.delay)  # the client gives up; nothing was applied
            return
        if action == "reset_lost":
            return  # the connection closes without an answer; nothing was applied
        try:
            status, resp_headers, data = self._forward(req)
        except OSError:
            self._reply(h, 502, {}, b"")
            return
        if action == "apply_then_500":
            self._reply(h, 500, {}, _error_body(500), head=head)
        elif action == "timeout_applied":
            time.sleep(self.delay)  # applied, and the client gives up
        elif action == "reset_applied":
            pass  # applied, and the connection closes without an answer
        else:
            self._reply(h, status, resp_headers, data, head=head)

    @staticmethod
    def _read_body(h: BaseHTTPRequestHandler, headers: dict[str, str]) -> bytes:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            out = bytearray()
            while True:
                size = int(h.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while h.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return bytes(out)
                out += h.rfile.read(size)
                h.rfile.readline()
        length = int(headers.get("content-length", "0") or 0)
        return h.rfile.read(length) if length else b""

    def _forward(self, req: Request) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=30)
        try:
            headers = {k: v for k, v in req.headers.items() if k not in _HOP_BY_HOP}
            headers["content-length"] = str(len(req.body))
            conn.request(req.method, req.path, body=req.body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, resp.getheaders(), data
        finally:
            conn.close()

    @staticmethod
    def _reply(
        h: BaseHTTPRequestHandler,
        status: int,
        headers: dict[str, str] | list[tuple[str, str]],
        data: bytes,
        *,
        head: bool = False,
    ) -> None:
        """Send a response; for HEAD the upstream Content-Length and no body."""
        items = list(headers.items() if isinstance(headers, dict) else headers)
        length = None if head else str(len(data))
        try:
            h.send_response(status)
            for k, v in items:
                lk = k.lower()
                if lk == "content-length":
                    length = length if not head else v
                    continue
                if lk in _HOP_BY_HOP or lk in ("server", "date"):
                    continue
                h.send_header(k, v)
            if status >= 500 and not items:
                h.send_header("Content-Type", "application/xml")
            h.send_header("Content-Length", length or "0")
            h.send_header("Connection", "close")
            h.end_headers()
            if not head and data:
                h.wfile.write(data)
            h.wfile.flush()
        except OSError:
            pass  # the client went away


# ----------------------------------------------------------------------
# fault plans
# ----------------------------------------------------------------------
class Targeted:
    """``action`` for the first ``times`` requests matching ``match`` (``times=None``:
    every one); nothing otherwise."""

    def __init__(self, match: Callable[[Request], bool], action: str, times: int | None = 1):
        self.match = match
        self.action = action
        self.left = times
        self.hits: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, req: Request) -> str | None:
        with self._lock:
            if (self.left is None or self.left > 0) and self.match(req):
                if self.left is not None:
                    self.left -= 1
                self.hits.append(req.path)
                return self.action
        return None


class RandomFaults:
    """Seeded random faults on every kind of request.

    With ``max_streak`` (the recoverable setting), the same request (method and
    path) fails at most that many times in a row, so the client's retries always
    get through eventually; ``max_timeouts`` bounds the slow timeout faults.
    """

    WRITE_ACTIONS = (
        ("apply_then_500", 5),
        ("throttle", 3),
        ("reset_applied", 1),
        ("reset_lost", 1),
        ("timeout_applied", 1),
        ("timeout_lost", 1),
    )
    READ_ACTIONS = (("apply_then_500", 3), ("throttle", 4), ("reset_lost", 1), ("timeout_lost", 1))

    def __init__(
        self,
        seed: int,
        *,
        write_rate: float = 0.25,
        read_rate: float = 0.08,
        max_streak: int | None = 2,
        max_timeouts: int = 3,
        write_actions: tuple[tuple[str, int], ...] | None = None,
    ) -> None:
        self.write_actions = write_actions or self.WRITE_ACTIONS
        self.rng = random.Random(seed)
        self.write_rate = write_rate
        self.read_rate = read_rate
        self.max_streak = max_streak
        self.timeouts_left = max_timeouts
        self.streak: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        self.enabled = True
        self._lock = threading.Lock()

    def __call__(self, req: Request) -> str | None:
        with self._lock:
            if not self.enabled:
                return None
            write = req.method in ("PUT", "POST", "DELETE")
            rate = self.write_rate if write else self.read_rate
            streak = self.streak.get(req.key, 0)
            if (self.max_streak is not None and streak >= self.max_streak) or (
                self.rng.random() >= rate
            ):
                self.streak.pop(req.key, None)
                return None
            choices = [
                (a, w)
                for a, w in (self.write_actions if write else self.READ_ACTIONS)
                if not a.startswith("timeout") or self.timeouts_left > 0
            ]
            action = self.rng.choices([a for a, _ in choices], [w for _, w in choices])[0]
            if action.startswith("timeout"):
                self.timeouts_left -= 1
            self.streak[req.key] = streak + 1
            self.counts[action] = self.counts.get(action, 0) + 1
            return action


class DoomedWalObjects:
    """Every ``every``-th WAL object with frames fails for good, alternately:

    * ``lost``: every PUT attempt is throttled (never applied): the write must be
      reported failed and be absent;
    * ``landed``: every PUT attempt is applied-then-500 and the read-back GETs fail
      too: the store cannot tell, reports an error, and the write is there.

    Each doomed request fails ``attempts`` times (the client's attempts per call),
    then passes, so a reopen can read the object. Other requests get ``noise``.
    The keys of each doomed object are decoded from the PUT body.
    """

    def __init__(self, noise: Plan, *, every: int = 5, attempts: int = 3) -> None:
        self.noise = noise
        self.every = every
        self.attempts = attempts
        self.mode: dict[str, str | None] = {}  # WAL object path -> doom
        self.keys: dict[str, set[bytes]] = {"lost": set(), "landed": set()}
        self.left: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def __call__(self, req: Request) -> str | None:
        path = req.path.split("?")[0]
        with self._lock:
            if is_cond_put("wal")(req) and path not in self.mode:
                n = len(self.mode)
                doom = None
                if n % self.every == self.every - 1:
                    doom = "lost" if (n // self.every) % 2 == 0 else "landed"
                    records, _ = decode_object(req.body)
                    self.keys[doom].update(k for r in records for k in r.keys)
                    self.left[("PUT", path)] = self.attempts
                    if doom == "landed":
                        self.left[("GET", path)] = self.attempts
                self.mode[path] = doom
            left = self.left.get((req.method, path), 0)
            if left > 0:
                self.left[(req.method, path)] = left - 1
                if req.method == "PUT" and self.mode[path] == "landed":
                    return "apply_then_500"
                return "throttle"
        return self.noise(req)


# ----------------------------------------------------------------------
# fixtures and helpers
# ----------------------------------------------------------------------
READ_TIMEOUT = 2.0  # a legitimate request through the proxy to moto never takes this long


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[FaultProxy]:
    p = FaultProxy(moto_endpoint, delay=READ_TIMEOUT + 0.3).start()
    yield p
    p.stop()


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    names = ("kvstore", "kvstore.objstore", "s3fs", "aiobotocore", "botocore")
    old = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.CRITICAL)
    yield
    for n, level in old.items():
        logging.getLogger(n).setLevel(level)


def via_proxy(
    proxy: FaultProxy,
    s3_options: dict[str, Any],
    bucket: str,
    prefix: str = "store",
    *,
    botocore_attempts: int = 1,
    retries: int = 6,
    s3fs_retries: int | None = None,
) -> FsspecStore:
    """An FsspecStore whose requests go through the proxy, with small timeouts."""
    opts = {
        **s3_options,
        "endpoint_url": proxy.endpoint,
        "config_kwargs": {
            "read_timeout": READ_TIMEOUT,
            "connect_timeout": READ_TIMEOUT,
            "retries": {"total_max_attempts": botocore_attempts, "mode": "standard"},
        },
    }
    store = FsspecStore("s3", f"{bucket}/{prefix}", opts, retries=retries, backoff=0.02)
    if s3fs_retries is not None:
        store.fs.retries = s3fs_retries
    return store


def direct(s3_options: dict[str, Any], bucket: str, prefix: str = "store") -> FsspecStore:
    """A clean connection to moto (for checking what really is stored)."""
    return FsspecStore("s3", f"{bucket}/{prefix}", s3_options)


def is_cond_put(kind: str) -> Callable[[Request], bool]:
    """Conditional PUTs of one kind of engine object."""

    def match(req: Request) -> bool:
        if not req.conditional:
            return False
        if kind == "manifest":
            return "/manifest/" in req.path
        if kind == "wal":  # a WAL object with frames (fence objects are 24 bytes)
            return "/wal/" in req.path and len(req.body) > 24
        if kind == "sst":
            return "/sst/" in req.path
        return kind in req.path

    return match


# ======================================================================
# the proxy and the store
# ======================================================================
def test_proxy_relays_everything(proxy: FaultProxy, s3_bucket: str, s3_options: dict) -> None:
    st = via_proxy(proxy, s3_options, s3_bucket)
    st.put_if_absent("a/1", b"one")
    st.put("a/2", b"two" * 1000)
    assert st.get("a/1") == b"one"
    assert st.get_range("a/2", 3, 3) == b"two"
    assert st.size("a/2") == 3000 and st.exists("a/1") and not st.exists("a/3")
    assert st.list("a/") == ["a/1", "a/2"]
    with pytest.raises(FileExistsError):
        st.put_if_absent("a/1", b"other")
    st.delete("a/1")
    assert st.list("a/") == ["a/2"]
    assert {m for m, _, _ in proxy.actions()} >= {"PUT", "GET", "HEAD", "DELETE"}
    assert st.stats["retries"] == 0 and st.stats["ambiguous_resolved"] == 0


def test_applied_then_500_is_an_ambiguous_outcome_on_the_wire(
    proxy: FaultProxy, s3_bucket: str, s3_options: dict
) -> None:
    """Without retries or read-back a client sees an error for a PUT that happened:
    the ambiguity the store has to resolve."""
    st = via_proxy(proxy, s3_options, s3_bucket, retries=0, s3fs_retries=1)
    proxy.plan = Targeted(lambda r: r.method == "PUT", "apply_then_500")
    with pytest.raises(OSError):
        st.put("plain", b"data")
    assert direct(s3_options, s3_bucket).get("plain") == b"data"


def test_throttling_is_retried(proxy: FaultProxy, s3_bucket: str, s3_options: dict) -> None:
    st = via_proxy(proxy, s3_options, s3_bucket, s3fs_retries=1)
    proxy.plan = Targeted(lambda r: True, "throttle", times=3)
    st.put_if_absent("t", b"x")
    assert st.get("t") == b"x"
    assert len(proxy.actions("throttle")) == 3
    assert st.stats["retries"] >= 2 and st.stats["ambiguous_resolved"] == 0


def test_timeouts_are_retried(proxy: FaultProxy, s3_bucket: str, s3_options: dict) -> None:
    st = via_proxy(proxy, s3_options, s3_bucket, s3fs_retries=1)
    proxy.plan = Targeted(lambda r: r.method == "GET", "timeout_lost")
    st.put("g", b"x")
    assert st.get("g") == b"x"
    assert st.stats["retries"] == 1


@pytest.mark.parametrize("action", ["reset_lost", "reset_applied"])
def test_dropped_connections_are_retried(
    proxy: FaultProxy, s3_bucket: str, s3_options: dict, action: str
) -> None:
    """A connection closed without an answer (botocore: ConnectionClosedError, not an
    OSError) is transient: retried, and for a conditional PUT resolved by read-back."""
    st = via_proxy(proxy, s3_options, s3_bucket, s3fs_retries=1)
    proxy.plan = Targeted(lambda r: r.method in ("PUT", "GET"), action, times=2)
    st.put_if_absent("c/1", b"ours")
    assert st.get("c/1") == b"ours"
    assert st.stats["retries"] >= 1
    assert st.stats["ambiguous_resolved"] == (1 if action == "reset_applied" else 0)


def test_transport_failure_outlasting_retries_is_an_oserror(
    proxy: FaultProxy, s3_bucket: str, s3_options: dict
) -> None:
    st = via_proxy(proxy, s3_options, s3_bucket, retries=1, s3fs_retries=1)
    proxy.plan = Targeted(lambda r: r.method == "GET", "reset_lost", times=None)
    st.put("x", b"1")
    with pytest.raises(OSError):
        st.get("x")


# how the PUT gets retried: by botocore itself (the HTTP layer; the retry answers
# 412), by FsspecStore after s3fs reports the 500, or never successfully (every
# attempt is applied-then-500 / times out: the store reads back after giving up)
RETRY_LAYERS = {
    "botocore": dict(botocore_attempts=3, s3fs_retries=1),
    "fsspecstore": dict(botocore_attempts=1, s3fs_retries=1),
    "s3fs": dict(botocore_attempts=1, s3fs_retries=3),
}


# every layer with apply_then_500; timeouts only where the layer's path differs
# (a botocore-layer timeout takes the s3fs layer's path)
AMBIGUOUS_CASES = [(layer, "apply_then_500") for layer in sorted(RETRY_LAYERS)] + [
    (layer, "timeout_applied") for layer in sorted(RETRY_LAYERS) if layer != "botocore"
]


@pytest.mark.parametrize(("layer", "action"), AMBIGUOUS_CASES)
def test_ambiguous_conditional_put_is_resolved_by_read_back(
    proxy: FaultProxy, s3_bucket: str, s3_options: dict, layer: str, action: str
) -> None:
    st = via_proxy(proxy, s3_options, s3_bucket, **RETRY_LAYERS[layer])
    proxy.plan = Targeted(lambda r: r.conditional, action)
    st.put_if_absent("m/1", b"ours")  # applied, then an error, retried: 412 -> read back
    assert st.stats["ambiguous_resolved"] == 1
    assert direct(s3_options, s3_bucket).get("m/1") == b"ours"
    conds = [a for m, p, a in proxy.actions() if m == "PUT"]
    assert conds[0] == action and len(conds) >= 2
    # someone else's object is still someone else's
    with pytest.raises(FileExistsError):
        st.put_if_absent("m/1", b"theirs")


def test_every_attempt_applied_then_500_still_reports_success(
    proxy: FaultProxy, s3_bucket: str, s3_options: dict
) -> None:
    """The create landed on the first attempt; every answer is a 500 (the later
    attempts are 412s turned into 500s). After the last retry the store reads back
    and reports the write as done - never as failed."""
    st = via_proxy(proxy, s3_options, s3_bucket, retries=2, s3fs_retries=1)
    proxy.plan = Targeted(lambda r: r.method == "PUT", "apply_then_500", times=None)
    st.put_if_absent("m/2", b"ours")
    assert st.stats["ambiguous_resolved"] == 1 and st.stats["retries"] == 2
    assert len(proxy.actions("apply_then_500")) == 3


def test_lost_race_with_errors_is_reported_as_lost(
    proxy: FaultProxy, s3_bucket: str, s3_options: dict
) -> None:
    """Another writer created the object; our PUTs all fail (500, not applied since
    it exists): the read-back finds their bytes, so FileExistsError - not success."""
    direct(s3_options, s3_bucket).put_if_absent("m/3", b"theirs")
    st = via_proxy(proxy, s3_options, s3_bucket, retries=2, s3fs_retries=1)
    proxy.plan = Targeted(lambda r: r.method == "PUT", "apply_then_500", times=None)
    with pytest.raises(FileExistsError):
        st.put_if_absent("m/3", b"ours")
    assert st.stats["ambiguous_resolved"] == 0


def test_write_that_never_landed_is_reported_as_failed(
    proxy: FaultProxy, s3_bucket: str, s3_options: dict
) -> None:
    st = via_proxy(proxy, s3_options, s3_bucket, retries=2, s3fs_retries=1)
    proxy.plan = Targeted(lambda r: r.method == "PUT", "throttle", times=None)
    with pytest.raises(OSError):
        st.put_if_absent("m/4", b"ours")
    assert not direct(s3_options, s3_bucket).exists("m/4")
    assert st.stats["ambiguous_resolved"] == 0


# ======================================================================
# the engine: the first conditional PUT of an object is applied, then 500
# ======================================================================
@pytest.mark.parametrize("kind", ["manifest-create", "manifest-flush", "wal", "sst"])
def test_engine_ambiguous_first_put_is_a_success(
    proxy: FaultProxy, s3_bucket: str, s3_options: dict, kind: str
) -> None:
    st = via_proxy(proxy, s3_options, s3_bucket, s3fs_retries=1)
    target = Targeted(is_cond_put(kind.split("-")[0]), "apply_then_500")
    if kind == "manifest-create":
        proxy.plan = target  # manifest 1 of a new store
    db = kvstore.open(st, retention="all", **FAST)
    try:
        db.put(b"before", b"0")
        if kind != "manifest-create":
            proxy.plan = target
        seq = db.put(b"k", b"v")  # kind == "wal": this commit's WAL object
        db.flush()  # "manifest-flush" / "sst": the flush's objects
        assert target.hits, f"no {kind} PUT was made"
        assert st.stats["ambiguous_resolved"] >= 1
        db.put(b"after", b"1")
    finally:
        db.close()
    with kvstore.open(direct(s3_options, s3_bucket), retention="all", **FAST) as db2:
        assert dict(db2.scan()) == {b"before": b"0", b"k": b"v", b"after": b"1"}
        with db2.snapshot(seq=seq) as snap:
            assert snap.get(b"k") == b"v"
        with db2.snapshot(seq=seq - 1) as snap:
            assert snap.get(b"k") is None


# ======================================================================
# random faults under a concurrent workload
# ======================================================================
@dataclass
class Outcome:
    kind: str  # put | batch | incr
    items: dict[bytes, bytes]
    seq: int | None = None
    error: BaseException | None = None
    conflicts: int = 0


@dataclass
class Workload:
    outcomes: list[Outcome] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, o: Outcome) -> None:
        with self.lock:
            self.outcomes.append(o)


def run_thread(db: kvstore.DB, w: Workload, tid: int, n: int, seed: int) -> None:
    rng = random.Random(seed * 100 + tid)
    for i in range(n):
        r = rng.random()
        tag = b"s%d/t%d/%03d" % (seed, tid, i)
        if r < 0.4:
            o = Outcome("put", {b"p/" + tag: b"v-" + tag + b"-" + rng.randbytes(60)})
        elif r < 0.7:
            o = Outcome(
                "batch",
                {b"b/" + tag + b"/%d" % j: b"bv-%d-" % j + tag for j in range(rng.randint(2, 5))},
            )
        else:
            o = Outcome("incr", {b"inc/" + tag: b"1"})
        try:
            if o.kind == "put":
                ((k, v),) = o.items.items()
                o.seq = db.put(k, v)
            elif o.kind == "batch":
                b = kvstore.WriteBatch()
                for k, v in o.items.items():
                    b.put(k, v)
                o.seq = db.write(b)
            else:  # a counter increment plus a marker key, retried on conflict
                while True:
                    t = db.transaction()
                    t.put(b"counter", b"%d" % (int(t.get(b"counter") or b"0") + 1))
                    for k, v in o.items.items():
                        t.put(k, v)
                    try:
                        o.seq = t.commit()
                        break
                    except TransactionConflict:
                        o.conflicts += 1
        except (OSError, kvstore.KvError) as exc:
            o.error = exc
        w.record(o)


def wal_seqs(store: FsspecStore) -> list[int]:
    """Every record seq in the WAL objects now on the store (duplicates included)."""
    out: list[int] = []
    for name in store.list(paths.WAL_DIR):
        if name.endswith(".wal"):
            records, _fence = decode_object(store.get(name), where=name)
            out.extend(r.seq for r in records)
    return out


def verify(s3_options: dict, bucket: str, w: Workload, *, errors_allowed: bool) -> dict[str, int]:
    """Reopen on a clean connection and check every outcome."""
    raw = direct(s3_options, bucket)
    seqs = wal_seqs(raw)
    assert len(seqs) == len(set(seqs)), "a seq appears in two WAL records"
    ok = [o for o in w.outcomes if o.error is None]
    failed = [o for o in w.outcomes if o.error is not None]
    if not errors_allowed:
        assert not failed, f"{len(failed)} writes reported as failed, e.g. {failed[0].error!r}"
    acked_seqs = [o.seq for o in ok]
    assert len(acked_seqs) == len(set(acked_seqs)), "two acknowledged writes share a seq"
    with kvstore.open(raw, retention="all", **FAST) as db:
        state = dict(db.scan())
        for o in ok:  # acknowledged: present, exactly at its seq
            assert o.seq is not None
            for k, v in o.items.items():
                assert state.get(k) == v, f"acknowledged {o.kind} lost: {k!r}"
            with db.snapshot(seq=o.seq) as snap:
                assert all(snap.get(k) == v for k, v in o.items.items())
            with db.snapshot(seq=o.seq - 1) as snap:
                assert all(snap.get(k) is None for k in o.items), "applied before its seq"
        for o in failed:  # errors are ambiguous: all or nothing, at most once
            present = [state.get(k) == v for k, v in o.items.items()]
            assert all(present) or not any(present), f"partial {o.kind}: {present}"
            if isinstance(o.error, TransactionConflict):
                assert not any(present), "a conflicting transaction became visible"
        markers = [k for k in state if k.startswith(b"inc/")]
        counter = int(state.get(b"counter", b"0"))
        assert counter == len(markers), (
            f"counter {counter} but {len(markers)} increments present: an increment was "
            "lost or applied twice"
        )
        assert set(markers) >= {k for o in ok if o.kind == "incr" for k in o.items}
        allowed = {k for o in w.outcomes for k in o.items} | {b"counter"}
        assert set(state) <= allowed, "keys nobody wrote"
        present_failed = sum(all(state.get(k) == v for k, v in o.items.items()) for o in failed)
    return {"ok": len(ok), "failed": len(failed), "present_failed": present_failed}


@pytest.mark.parametrize("seed", [1, 2])
def test_random_faults_lose_nothing_and_duplicate_nothing(
    proxy: FaultProxy, s3_bucket: str, s3_options: dict, seed: int
) -> None:
    """3 threads of durable puts, batches and counter transactions (group commit)
    while ~25% of writes and ~8% of reads hit a fault (applied-then-500, 503
    SlowDown, timeouts applied or not), never more than twice in a row for the
    same request. Every fault is recoverable, so every write must succeed - none
    reported failed - and everything must be there exactly once after reopening
    on a clean connection. Small memtables make flushes (SST + manifest PUTs, WAL
    DELETEs) happen under faults too."""
    st = via_proxy(proxy, s3_options, s3_bucket)
    plan = RandomFaults(seed)
    proxy.plan = plan
    db = kvstore.open(st, memtable_bytes=3000, retention="all", **FAST)
    w = Workload()
    threads = [threading.Thread(target=run_thread, args=(db, w, t, 11, seed)) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    stats = db.stats()
    db.close()
    plan.enabled = False
    verify(s3_options, s3_bucket, w, errors_allowed=False)
    assert sum(plan.counts.values()) >= 10, plan.counts
    assert plan.counts.get("apply_then_500", 0) >= 3, plan.counts
    assert st.stats["retries"] >= 5
    assert st.stats["ambiguous_resolved"] >= 1, (st.stats, plan.counts)
    assert stats["flushes"] >= 1
    assert sum(o.kind == "incr" for o in w.outcomes) >= 3


@pytest.mark.slow
def test_faults_that_outlast_the_retries(proxy: FaultProxy, s3_bucket: str, s3_options: dict):
    """Some WAL objects fail for good (see DoomedWalObjects) on top of random
    recoverable noise, and the store retries only twice: those writes raise, and
    the writer is reopened, as a WAL failure requires. A write whose WAL object
    never landed is absent; one whose object landed but could not be read back
    (an honest "don't know") is present - whole and once. Acknowledged writes are
    all there, nothing is applied twice."""
    noise = RandomFaults(11, write_rate=0.2, read_rate=0.08, max_streak=1, max_timeouts=0)
    plan = DoomedWalObjects(noise, every=4)
    proxy.plan = plan
    w = Workload()
    db: kvstore.DB | None = None
    reopens = 0
    i = 0
    while i < 22:
        if db is None:
            st = via_proxy(proxy, s3_options, s3_bucket, retries=2, s3fs_retries=1)
            db = kvstore.open(st, memtable_bytes=3000, retention="all", **FAST)
        before = len(w.outcomes)
        run_thread(db, w, 0, 1, 1000 + i)  # one operation
        i += 1
        if w.outcomes[before].error is not None:
            try:
                db.close()
            except (OSError, kvstore.KvError):
                pass
            db = None
            reopens += 1
    if db is not None:
        db.close()
    noise.enabled = False
    proxy.plan = lambda req: None
    result = verify(s3_options, s3_bucket, w, errors_allowed=True)
    lost, landed = plan.keys["lost"] - {b"counter"}, plan.keys["landed"] - {b"counter"}
    assert lost and landed, plan.keys
    failed = [o for o in w.outcomes if o.error is not None]
    assert {k for o in failed for k in o.items} == lost | landed
    with kvstore.open_reader(direct(s3_options, s3_bucket)) as reader:
        state = dict(reader.scan())
    assert not lost & set(state), "a write whose WAL object never landed is present"
    assert landed <= set(state), "a write whose WAL object landed is missing"
    assert result["ok"] >= 14 and reopens == len(failed), (result, reopens)
    assert result["present_failed"] == sum(all(k in landed for k in o.items) for o in failed)
    assert sum(noise.counts.values()) >= 10, noise.counts
