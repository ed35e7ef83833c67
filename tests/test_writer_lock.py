"""One writer per local store: WriterActive, takeover, crashed writers (issue 13, item 3).

On a local directory a second writer (another handle, or another process)
is refused with ``kvstore.WriterActive`` naming the live one; ``takeover=True``
fences it instead; a writer killed with SIGKILL holds nothing. Readers never
take the lock. Object stores keep fencing on open.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

import kvstore
from kvstore.clock import FakeClock

REPO = Path(__file__).resolve().parent.parent

WRITER = r"""
import sys, time, kvstore
db = kvstore.open(sys.argv[1])
db.put(b"child", b"1")
print("READY", flush=True)
time.sleep(float(sys.argv[2]))
db.close()
print("CLOSED", flush=True)
"""


def _spawn_writer(path: Path, seconds: float = 60.0) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "READY", (line, proc.stderr.read() if proc.stderr else "")
    return proc


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvstore", *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


def test_second_handle_in_this_process_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "db"
    db = kvstore.open(path)
    db.put(b"k", b"v")
    with pytest.raises(kvstore.WriterActive) as info:
        kvstore.open(path)
    err = info.value
    assert isinstance(err, kvstore.KvError)
    assert err.pid == os.getpid() and err.host == socket.gethostname()
    assert isinstance(err.opened_at, datetime) and err.opened_at.tzinfo is not None
    assert f"pid {os.getpid()}" in str(err) and "this process" in str(err)
    assert "takeover=True" in str(err)
    # the refused open changed nothing: the writer goes on
    assert db.put(b"k2", b"v2") > 0
    db.close()
    with kvstore.open(path) as again:  # closed: free
        assert again.get(b"k2") == b"v2"


def test_takeover_fences_the_live_writer(tmp_path: Path) -> None:
    path = tmp_path / "db"
    old = kvstore.open(path)
    old.put(b"a", b"1")
    new = kvstore.open(path, takeover=True)
    with pytest.raises(kvstore.FencedError):
        old.put(b"a", b"2")
    assert new.get(b"a") == b"1"
    # the fenced handle is still open, but the live writer is the new one
    with pytest.raises(kvstore.WriterActive):
        kvstore.open(path)
    new.close()
    with kvstore.open(path) as third:  # the fenced handle does not count
        assert third.get(b"a") == b"1"
    old.close()


def test_readers_never_take_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with kvstore.open(path) as db:
        db.put(b"k", b"v")
        with kvstore.open_reader(path) as r:
            assert r.get(b"k") == b"v"
        db.put(b"k", b"w")  # not fenced by the reader


def test_a_failed_open_releases_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with kvstore.open(path, wal_dir=str(tmp_path / "wal")) as db:
        db.put(b"k", b"v", durable=False)  # unflushed at close? close flushes
    with pytest.raises(TypeError):
        kvstore.open(path, no_such_option=1)
    with kvstore.open(path, wal_dir=str(tmp_path / "wal")) as db:
        assert db.get(b"k") == b"v"
    assert os.listdir(path / "writers") == []


def test_another_live_process_is_named(tmp_path: Path) -> None:
    path = tmp_path / "db"
    proc = _spawn_writer(path)
    try:
        with pytest.raises(kvstore.WriterActive) as info:
            kvstore.open(path)
        assert info.value.pid == proc.pid
        assert f"pid {proc.pid} on {socket.gethostname()}" in str(info.value)
        # the CLI refuses too, and says how to take over
        p = _cli("put", str(path), "k", "v")
        assert p.returncode == 1 and f"pid {proc.pid}" in p.stderr and "--takeover" in p.stderr
        p = _cli("--json", "put", str(path), "k", "v")
        assert json.loads(p.stdout)["error"]["type"] == "writer_active"
        # reads never disturb it
        p = _cli("get", str(path), "child")
        assert (p.returncode, p.stdout) == (0, "1\n")
        p = _cli("put", str(path), "k", "v", "--takeover")
        assert p.returncode == 0, p.stderr
    finally:
        proc.kill()
        proc.wait()
    with kvstore.open_reader(path) as r:
        assert r.get(b"k") == b"v" and r.get(b"child") == b"1"


def test_a_killed_writer_holds_nothing(tmp_path: Path) -> None:
    path = tmp_path / "db"
    proc = _spawn_writer(path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    clock = FakeClock()
    with kvstore.open(path, clock=clock) as db:  # no takeover needed
        assert db.get(b"child") == b"1"
        # nothing waited out a lease or retried: the kernel freed the dead
        # writer's flock, so open() slept not at all (a FakeClock notes every sleep)
        assert clock.sleeps == []
    assert os.listdir(path / "writers") == []  # its lock file was cleaned up


def test_a_writer_that_closed_leaves_the_store_free(tmp_path: Path) -> None:
    path = tmp_path / "db"
    proc = _spawn_writer(path, seconds=0.0)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "CLOSED"
    proc.wait()
    p = _cli("put", str(path), "k", "v")
    assert p.returncode == 0, p.stderr


def test_object_stores_keep_fencing_on_open() -> None:
    url = "memory://writer-lock-fences"
    old = kvstore.open(url)
    try:
        old.put(b"a", b"1")
        with kvstore.open(url) as new:  # no liveness on object stores: it fences
            with pytest.raises(kvstore.FencedError):
                old.put(b"a", b"2")
            assert new.get(b"a") == b"1"
    finally:
        old.close()
        kvstore.objstore.MemoryStore.drop("writer-lock-fences")


def test_takeover_is_a_checked_option(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="takeover"):
        kvstore.open(tmp_path / "db", takeover="yes")


BUSY_WRITER = r"""
import sys, time, kvstore
db = kvstore.open(sys.argv[1], memtable_bytes=64 << 10)
print("READY", flush=True)
end = time.monotonic() + float(sys.argv[2])
n = 0
while time.monotonic() < end:
    n += 1
    db.put(b"k%06d" % n, b"v%d" % n)
    db.put(b"last", b"%d" % n)
db.close()
print("DONE", n, flush=True)
"""


def test_readers_and_cli_reads_beside_a_busy_writer_process(tmp_path: Path) -> None:
    """One writer process commits while this process reads (open_reader, refresh)
    and runs CLI read commands: nobody fences the writer, and a reader converges
    on everything it wrote after a refresh."""
    path = tmp_path / "db"
    proc = subprocess.Popen(
        [sys.executable, "-c", BUSY_WRITER, str(path), "2.0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "READY"
    with kvstore.open_reader(path) as reader:
        seen = 0
        while proc.poll() is None:
            seq = reader.refresh()
            assert seq >= seen  # never goes back
            seen = seq
            last = reader.get(b"last")
            if last is not None:  # everything up to it is there too
                assert reader.get(b"k%06d" % int(last)) == b"v%d" % int(last)
            for argv in (("get", str(path), "last"), ("info", str(path))):
                p = _cli(*argv)
                assert p.returncode in (0, 4), p.stderr  # 4: "last" not written yet
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "FencedError" not in err
        total = int(out.split()[-1])
        reader.refresh()
        assert reader.get(b"last") == b"%d" % total
        assert len(list(reader.scan_prefix(b"k"))) == total
    with kvstore.open(path) as db:  # the writer closed: free
        assert db.get(b"last") == b"%d" % total
