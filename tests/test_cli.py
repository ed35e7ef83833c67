"""``python -m kvstore`` / ``kvstore``: the admin CLI, in process and as a subprocess.

In process: ``main([...])`` with capsys (stdout = the command's output, stderr
= remarks and errors). A few runs go through ``sys.executable -m kvstore`` to
prove the module entry point, exit statuses and the absence of tracebacks.
"""

from __future__ import annotations

import codecs
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kvstore
from kvstore import paths
from kvstore._validate import prefix_end
from kvstore.cli import codec
from kvstore.cli.main import main
from kvstore.cli.progress import ProgressBar
from kvstore.manifest_store import ManifestStore
from kvstore.objstore import LocalStore, MemoryStore

REPO = Path(__file__).resolve().parent.parent
BIN_KEY = b"bin\x00\xffkey"
BIN_VALUE = b"line1\nline2\\tab\t\x01"
N = 120


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err
    return code, cap.out, cap.err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code, out, _ = run(capsys, *argv, "--json")
    return code, json.loads(out)


def build(path: Path, **extra: object) -> str:
    opts: dict = {"background_compaction": False, "fsync": False, "block_bytes": 256, **extra}
    with kvstore.open(path, **opts) as db:
        for i in range(N):
            db.put(b"user/%03d" % i, b"v%d" % i, durable=False)
        db.put(BIN_KEY, BIN_VALUE)
        db.flush()
        db.put(b"user/000", b"newer")  # a second L0 SST after close
    return str(path)


@pytest.fixture
def store(tmp_path: Path) -> str:
    return build(tmp_path / "db")


def live_ssts(url: str) -> list[str]:
    m = ManifestStore(LocalStore(url)).load_latest()
    assert m is not None
    return [paths.sst_name(s.id) for s in m.all_ssts()]


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


# ---------------------------------------------------------------------------
# inspection
# ---------------------------------------------------------------------------


def test_info(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "info", store)
    assert code == 0
    assert "writer epoch" in out and "L0" in out and "KiB" in out
    code, doc = run_json(capsys, "info", store)
    assert code == 0
    assert doc["last_seq"] == N + 2 and doc["l0"]["ssts"] == 2
    assert doc["total"]["entries"] == N + 2 and doc["checkpoints"] == []
    assert doc["retention_watermark"] is None and doc["problems"] == []


def test_info_on_memory_store(capsys: pytest.CaptureFixture[str]) -> None:
    MemoryStore.drop("cli-info")
    with kvstore.open("memory://cli-info") as db:
        db.put(b"k", b"v")
        code, doc = run_json(capsys, "--json", "info", "memory://cli-info")
    assert code == 0 and doc["last_seq"] == 1 and doc["wal"]["segments"] >= 1
    MemoryStore.drop("cli-info")


def test_info_beside_a_live_writer_counts_unflushed_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A live journal is preallocated: info says its size is on disk, and counts records."""
    with kvstore.open(tmp_path / "db", background_compaction=False) as db:
        for i in range(3):
            db.put(b"k%d" % i, b"v")
        code, out, _ = run(capsys, "info", str(tmp_path / "db"))
        assert code == 0 and "on disk, 3 records not yet in an SST" in out, out
        code, doc = run_json(capsys, "info", str(tmp_path / "db"))
        assert doc["wal"]["unflushed_records"] == 3 and doc["last_seq"] == 3
        db.flush()
        code, doc = run_json(capsys, "info", str(tmp_path / "db"))
        assert doc["wal"]["unflushed_records"] == 0 and doc["last_seq"] == 3


def test_manifest(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "manifest", store)
    assert code == 0 and "manifest #" in out and "last flushed seq" in out
    assert "bin\\x00\\xffkey" in out  # key ranges escaped
    code, doc = run_json(capsys, "manifest", store)
    latest = doc["id"]
    assert code == 0 and len(doc["l0"]) == 2 and doc["last_flushed_seq"] == N + 2
    code, doc = run_json(capsys, "manifest", store, "--id", "1")
    assert code == 0 and doc["id"] == 1 and doc["l0"] == [] and latest > 1
    code, _, err = run(capsys, "manifest", store, "--id", "9999")
    assert code == 1 and "no manifest #9999" in err


# ---------------------------------------------------------------------------
# keys and values
# ---------------------------------------------------------------------------


def test_get_put_delete(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "get", store, "user/001") == (0, "v1\n", "")
    assert run(capsys, "get", store, "user/000")[1] == "newer\n"
    code, out, err = run(capsys, "get", store, "nope")
    assert (code, out) == (4, "") and "not found: nope" in err
    code, doc = run_json(capsys, "get", store, "nope")
    assert code == 4 and doc == {"found": False, "key": "nope", "value": None}

    code, out, _ = run(capsys, "put", store, "greeting", "hello world")
    assert code == 0 and "seq" in out
    code, doc = run_json(capsys, "get", store, "greeting")
    assert doc == {"found": True, "key": "greeting", "value": "hello world"}

    code, doc = run_json(capsys, "delete", store, "greeting")
    assert code == 0 and doc["deleted"] is True and doc["seq"] > N
    assert run(capsys, "get", store, "greeting")[0] == 4
    epoch = ManifestStore(LocalStore(store)).load_latest().writer_epoch  # type: ignore[union-attr]
    code, doc = run_json(capsys, "delete", store, "greeting")
    assert code == 0 and doc == {"deleted": False, "seq": None, "key": "greeting"}
    # deleting nothing did not open the store as a writer (which fences a running one)
    assert ManifestStore(LocalStore(store)).load_latest().writer_epoch == epoch  # type: ignore[union-attr]


def test_binary_is_escaped_and_hex_round_trips(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "scan", store, "--prefix", "bin")
    assert code == 0
    assert out == "bin\\x00\\xffkey\tline1\\nline2\\\\tab\\t\\x01\n"  # one line, no raw bytes
    code, out, _ = run(capsys, "get", store, "--hex", BIN_KEY.hex())
    assert (code, out) == (0, BIN_VALUE.hex() + "\n")
    code, doc = run_json(capsys, "get", store, BIN_KEY.hex(), "--hex")
    assert doc == {"found": True, "key_hex": BIN_KEY.hex(), "value_hex": BIN_VALUE.hex()}
    code, doc = run_json(capsys, "scan", store, "--prefix", "bin")  # text mode, JSON
    assert doc["items"] == [{"key_hex": BIN_KEY.hex(), "value": BIN_VALUE.decode()}]

    assert run(capsys, "put", store, "--hex", "00ff10", "0x de ad be ef")[0] == 0
    code, out, _ = run(capsys, "get", store, "--hex", "00ff10")
    assert out == "deadbeef\n"
    code, out, _ = run(capsys, "scan", store, "--hex", "--prefix", "00")
    assert out == "00ff10\tdeadbeef\n"

    assert run(capsys, "put", store, "multi", "a\nb")[0] == 0
    assert run(capsys, "get", store, "multi", "--raw")[1] == "a\nb"


def test_scan_options(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "scan", store, "--prefix", "user/", "--keys-only")
    assert code == 0 and out.splitlines() == [f"user/{i:03d}" for i in range(N)]
    code, out, _ = run(capsys, "scan", store, "--start", "user/010", "--end", "user/013")
    assert out == "user/010\tv10\nuser/011\tv11\nuser/012\tv12\n"
    code, out, err = run(capsys, "scan", store, "--prefix", "user/", "--limit", "2", "--reverse")
    assert out == f"user/{N - 1}\tv{N - 1}\nuser/{N - 2}\tv{N - 2}\n" and "--limit" in err
    code, doc = run_json(capsys, "scan", store, "--prefix", "user/", "--start", "user/118")
    assert code == 0 and doc["count"] == 2 and doc["truncated"] is False
    assert [i["key"] for i in doc["items"]] == ["user/118", "user/119"]
    code, doc = run_json(capsys, "scan", store, "--limit", "3")
    assert doc["count"] == 3 and doc["truncated"] is True and doc["encoding"] == "text"
    code, doc = run_json(capsys, "scan", store, "--prefix", "zzz")
    assert doc == {"items": [], "count": 0, "truncated": False, "encoding": "text"}


def test_reads_never_fence_a_running_writer(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    with kvstore.open(store, background_compaction=False, fsync=False) as db:
        db.put(b"live", b"1")
        assert run(capsys, "get", store, "live") == (0, "1\n", "")
        assert run(capsys, "scan", store, "--prefix", "live")[0] == 0
        for cmd in ("info", "manifest", "verify"):
            assert run(capsys, cmd, store)[0] == 0, cmd
        assert run(capsys, "checkpoint", "list", store)[0] == 0
        db.put(b"live", b"2")  # still the writer
    assert run(capsys, "get", store, "live")[1] == "2\n"


def test_writes_refuse_a_running_writer_unless_takeover(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db = kvstore.open(store, background_compaction=False, fsync=False)
    try:
        code, _, err = run(capsys, "put", store, "k", "from the cli")
        assert code == 1 and "is being written by pid" in err and "--takeover" in err
        db.put(b"k", b"still the app's")  # refused without a word to the app
        assert run(capsys, "put", store, "k", "from the cli", "--takeover")[0] == 0
        with pytest.raises(kvstore.FencedError):
            db.put(b"k", b"from the app")
    finally:
        db.close()
    assert run(capsys, "get", store, "k")[1] == "from the cli\n"


# ---------------------------------------------------------------------------
# maintenance
# ---------------------------------------------------------------------------


def test_compact_and_gc(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = run_json(capsys, "compact", store)
    assert code == 0
    assert doc["before"]["l0_ssts"] == 2 and doc["after"]["l0_ssts"] == 0
    assert doc["after"]["sorted_runs"] == 1
    code, out, _ = run(capsys, "gc", store)  # default grace: nothing old enough yet
    assert code == 0 and "deleted 0 SSTs" in out and "--grace 0" in out
    assert run_json(capsys, "gc", store)[1]["grace_seconds"] == 60  # the grace it used
    code, doc = run_json(capsys, "gc", store, "--grace", "0")
    assert code == 0 and doc["deleted"]["ssts"] == 2 and doc["pending_ssts"] == 0
    assert len(os.listdir(Path(store) / "sst")) == 1
    assert run(capsys, "get", store, "user/000")[1] == "newer\n"
    assert run(capsys, "verify", store)[0] == 0


def test_a_writer_wal_dir_is_found_through_the_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A writer with wal_dir= left acknowledged writes in its journal only: the CLI
    reads and writes with that journal without being told, and refuses a
    --wal-dir that does not exist instead of leaving the writes behind."""
    url, wal = str(tmp_path / "db"), tmp_path / "wal"
    db = kvstore.open(url, wal_dir=wal, background_flush=False, background_compaction=False)
    db.put(b"unflushed", b"1")
    db.abandon()  # a crash: nothing flushed, nothing closed
    assert run(capsys, "get", url, "unflushed") == (0, "1\n", "")
    code, _, err = run(capsys, "put", url, "k", "v", "--wal-dir", str(tmp_path / "typo"))
    assert code == 1 and "does not exist" in err
    assert not (tmp_path / "typo").exists()
    assert run(capsys, "put", url, "k", "v")[0] == 0  # with the recorded journal
    with kvstore.open(url, wal_dir=wal) as db:
        assert (db.get(b"unflushed"), db.get(b"k")) == (b"1", b"v")


def test_compact_progress_bar(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    live = sum((Path(store) / name).stat().st_size for name in live_ssts(store))
    code, out, err = run(capsys, "compact", store, "--progress")
    assert code == 0 and "after:" in out
    assert err.startswith("\rcompact [") and err.endswith("\n")
    last = err.rstrip().rsplit("\r", 1)[-1]
    total = codec.human_bytes(live)
    assert "100%" in last and f"{total}/{total}" in last, (last, live)
    # without --progress, and stderr not a terminal: no bar
    code, _, err = run(capsys, "compact", store)
    assert code == 0 and "compact [" not in err
    buf = io.StringIO()
    bar = ProgressBar(0, buf, enabled=True, label="x", width=4, interval=0)
    bar.update(10, 40)  # a total that grows as the work runs
    bar.update(40, 80)
    assert bar.render().startswith("x [##..]  50%")


def test_checkpoints(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "checkpoint", "list", store)
    assert code == 0 and "no checkpoints" in out
    code, doc = run_json(capsys, "checkpoint", "create", store, "before")
    assert code == 0 and doc["name"] == "before" and doc["seq"] == N + 2
    code, _, err = run(capsys, "checkpoint", "create", store, "before")
    assert code == 1 and "already exists" in err
    code, doc = run_json(capsys, "checkpoint", "create", store, "tmp", "--expires-in", "3600")
    assert code == 0 and doc["expires_ms"] is not None
    assert run(capsys, "put", store, "user/001", "changed")[0] == 0

    code, out, _ = run(capsys, "checkpoint", "list", store)
    assert code == 0 and "before" in out and "tmp" in out and "NAME" in out
    code, doc = run_json(capsys, "checkpoint", "list", store)
    assert [c["name"] for c in doc["checkpoints"]] == ["before", "tmp"]
    assert run(capsys, "get", store, "user/001", "--checkpoint", "before")[1] == "v1\n"
    assert run(capsys, "get", store, "user/001")[1] == "changed\n"
    code, _, err = run(capsys, "scan", store, "--checkpoint", "nope")
    assert code == 1 and "no checkpoint named 'nope'" in err

    code, _, err = run(capsys, "checkpoint", "delete", store, "nope")
    assert code == 1 and "no checkpoint named 'nope'" in err
    assert run(capsys, "checkpoint", "delete", store, "tmp")[0] == 0
    code, doc = run_json(capsys, "checkpoint", "list", store)
    assert [c["name"] for c in doc["checkpoints"]] == ["before"]
    assert run(capsys, "checkpoint", "create", store, "bad\nname")[0] == 2


# ---------------------------------------------------------------------------
# verify
# ---------------------------------------------------------------------------


def test_verify_healthy(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "verify", store)
    assert code == 0 and "OK: no damage found" in out and err == ""  # no TTY, no bar
    code, doc = run_json(capsys, "verify", store)
    assert code == 0 and doc["ok"] is True and doc["problems"] == []
    checked = doc["checked"]
    assert checked["ssts"] == 2 and checked["entries"] == N + 2 and checked["blocks"] > 2
    assert checked["manifests"] >= 3


def test_verify_finds_a_flipped_byte_in_an_sst(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = live_ssts(store)[-1]
    flip_byte(Path(store) / victim, 10)  # inside the first data block
    code, out, err = run(capsys, "verify", store)
    assert code == 3
    assert victim in out and "checksum mismatch" in out and victim in err
    code, doc = run_json(capsys, "verify", store)
    assert code == 3 and doc["ok"] is False and doc["damaged_objects"] == [victim]
    # a read that meets the damage says so, without a traceback
    code, _, err = run(capsys, "scan", store)
    assert code == 3 and "corrupt" in err and "kvstore verify" in err


def test_verify_checks_checkpoint_ssts_and_wal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = build(tmp_path / "db")
    crashed = tmp_path / "crashed"
    with kvstore.open(url, background_compaction=False, fsync=False) as db:
        db.create_checkpoint("cp")
        db.put(b"a", b"1")
        db.compact()  # the checkpoint alone now keeps the old SSTs
        db.put(b"wal", b"only")  # durable, in the WAL only
        shutil.copytree(url, crashed)  # what a crash would leave
    m = ManifestStore(LocalStore(crashed)).load_latest()
    assert m is not None
    live = {s.id for s in m.all_ssts()}
    cp = ManifestStore(LocalStore(crashed)).load(int(m.checkpoints["cp"]["manifest_id"]))
    pinned = [paths.sst_name(s.id) for s in cp.all_ssts() if s.id not in live]
    code, doc = run_json(capsys, "verify", str(crashed))
    assert code == 0 and len(pinned) == 2
    assert doc["checked"]["ssts"] == len(live) + 2 and doc["checked"]["wal_records"] == 1
    flip_byte(crashed / pinned[0], 10)
    wal = sorted((crashed / "wal").iterdir())[-1]
    flip_byte(wal, wal.stat().st_size - 3)  # the last frame's payload
    code, doc = run_json(capsys, "verify", str(crashed))
    damaged = doc["damaged_objects"]
    assert code == 3 and damaged == sorted([pinned[0], f"wal/{wal.name}"])


def test_verify_progress_bar(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "verify", store, "--progress")
    assert code == 0 and "verify [" in err and "100%" in err and err.endswith("\n")
    buf = io.StringIO()
    bar = ProgressBar(2048, buf, enabled=True, label="x", width=10, interval=0)
    bar.advance(1024, "a.sst")
    assert "[#####.....]  50%" in buf.getvalue() and "a.sst" in buf.getvalue()
    bar.close()
    silent = io.StringIO()
    ProgressBar(10, silent, enabled=False).advance(5)
    assert silent.getvalue() == ""


# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["info"],
        ["manifest"],
        ["get", "k"],
        ["scan"],
        ["verify"],
        ["checkpoint", "list"],
        ["put", "k", "v"],
        ["delete", "k"],
        ["compact"],
        ["gc"],
        ["checkpoint", "create", "x"],
    ],
)
def test_missing_store_is_not_created(
    tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    cmd, *rest = argv
    if cmd == "checkpoint":
        full = [cmd, rest[0], str(missing), *rest[1:]]
    else:
        full = [cmd, str(missing), *rest]
    code, _, err = run(capsys, *full)
    assert code == 1 and f"no kvstore at {missing}" in err
    assert not missing.exists()
    empty = tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    full = [str(empty) if a == str(missing) else a for a in full]
    code, _, err = run(capsys, *full)
    assert code == 1 and "no manifest found" in err and os.listdir(empty) == []


def test_put_create(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"file://{tmp_path / 'new'}"
    assert run(capsys, "put", url, "k", "v", "--create")[0] == 0
    assert run(capsys, "get", url, "k")[1] == "v\n"


def test_usage_errors(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys)
    assert code == 2 and "COMMAND" in err
    code, _, err = run(capsys, "frobnicate")
    assert code == 2 and "invalid choice" in err
    code, _, err = run(capsys, "get", store, "")
    assert code == 2 and "must not be empty" in err
    code, _, err = run(capsys, "get", store, "--hex", "xyz")
    assert code == 2 and "not valid hex" in err
    code, _, err = run(capsys, "scan", store, "--limit", "-1")
    assert code == 2
    code, _, err = run(capsys, "gc", store, "--grace", "soon")
    assert code == 2 and "seconds" in err
    code, out, err = run(capsys, "get", "--json", store)
    assert code == 2 and json.loads(out)["error"]["exit_code"] == 2
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "FENCES" in out
    code, out, _ = run(capsys, "put", "--help")
    assert code == 0 and "fences" in out


def test_escape() -> None:
    assert codec.escape(b"plain text") == "plain text"
    assert codec.escape("héllo".encode()) == "héllo"
    assert codec.escape(b"a\\b\n\t\r\x00\x7f\xff") == "a\\\\b\\n\\t\\r\\x00\\x7f\\xff"
    assert codec.escape("\u200b".encode()) == "\\xe2\\x80\\x8b"  # its UTF-8 bytes
    # not UTF-8 as a whole: bytes, never characters that happen to decode
    assert codec.escape(bytes.fromhex("deadbeef")) == "\\xde\\xad\\xbe\\xef"
    for data in (b"a\xe2\x80\xaeb", bytes(range(256)), "x\u0301\u202e\n".encode()):
        text = codec.escape(data)  # reads back as a bytes literal
        assert text.isprintable() and codecs.escape_decode(text.encode())[0] == data
    assert codec.parse_bytes("0x0A ff:10", hex_mode=True, what="K") == b"\n\xff\x10"
    assert prefix_end(b"a\xff") == b"b" and prefix_end(b"\xff") is None
    assert codec.human_bytes(512) == "512 B" and codec.human_bytes(3 << 20) == "3.0 MiB"


def test_bench_delegates(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import kvstore.bench.__main__ as bench_main

    seen: list[list[str]] = []

    def fake_main(argv: list[str]) -> int:
        seen.append(list(argv))
        return 0

    monkeypatch.setattr(bench_main, "main", fake_main)
    assert main(["bench", "--quick", "--stores", "kvstore"]) == 0
    assert main(["--json", "bench", "--quick"]) == 0
    assert seen == [["--quick", "--stores", "kvstore"], ["--json", "--quick"]]
    monkeypatch.undo()
    code, out, _ = run(capsys, "bench", "--help")
    assert code == 0 and "kvstore.bench" in out


# ---------------------------------------------------------------------------
# as a real program
# ---------------------------------------------------------------------------


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvstore", *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


def test_subprocess(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    p = cli("put", url, "k", "v", "--create", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["seq"] == 1
    p = cli("get", url, "k")
    assert (p.returncode, p.stdout) == (0, "v\n")
    p = cli("--json", "info", url)
    assert p.returncode == 0 and json.loads(p.stdout)["last_seq"] == 1
    p = cli("verify", url, "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["ok"]
    missing = tmp_path / "missing"
    p = cli("scan", str(missing))
    assert p.returncode == 1 and "no kvstore at" in p.stderr and "Traceback" not in p.stderr
    assert not missing.exists()
    p = cli("get", url)
    assert p.returncode == 2 and "usage:" in p.stderr


def test_subprocess_verify_corruption(store: str) -> None:
    victim = live_ssts(store)[0]
    flip_byte(Path(store) / victim, 10)
    p = cli("verify", store)
    assert p.returncode == 3 and victim in p.stdout and victim in p.stderr
    assert "Traceback" not in p.stderr and "verify [" not in p.stderr  # not a TTY


@pytest.mark.s3
def test_s3_with_storage_options(
    s3_url: tuple[str, dict], s3_client: object, capsys: pytest.CaptureFixture[str]
) -> None:
    url, options = s3_url
    opts = [arg for k, v in options.items() for arg in ("-o", f"{k}={v}")]
    code, _, err = run(capsys, "info", url, *opts)
    assert code == 1 and "no kvstore at" in err
    bucket = url.split("/")[2]
    assert "Contents" not in s3_client.list_objects_v2(Bucket=bucket)  # type: ignore[attr-defined]
    assert run(capsys, "put", url, "k", "v", "--create", *opts)[0] == 0
    assert run(capsys, "get", url, "k", *opts)[1] == "v\n"
    code, doc = run_json(capsys, "verify", url, *opts)
    assert code == 0 and doc["ok"] and doc["checked"]["ssts"] == 1


def test_a_hole_in_the_wal_is_reported_by_verify_and_info(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The newest manifest is lost after it retired the WAL segment holding some
    writes: verify and info exit 3 naming the hole (they said OK before)."""
    path = tmp_path / "db"
    db = kvstore.open(path, background_flush=False, background_compaction=False)
    for i in range(10):
        db.put(b"k%d" % i, b"v")
        if i in (3, 6):
            db.flush()
    newest = db.manifest.id
    db.abandon()  # a crash
    os.remove(path / paths.manifest_name(newest))
    code, doc = run_json(capsys, "verify", str(path))
    assert code == 3 and doc["damaged_objects"] == ["wal/"], doc
    assert "seq 5 on are missing" in json.dumps(doc)
    code, doc = run_json(capsys, "info", str(path))
    assert code == 3 and any("seq 5 on are missing" in p for p in doc["problems"])
    code, _, err = run(capsys, "get", str(path), "k0")
    assert code == 3 and "missing" in err


def test_scan_json_stays_one_document_when_it_meets_damage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "db"
    with kvstore.open(path, fsync=False, block_bytes=256, compression="none") as db:
        for i in range(200):
            db.put(b"k%03d" % i, b"v" * 40, durable=False)
        db.compact()
    victim = live_ssts(str(path))[0]
    data = (path / victim).read_bytes()
    flip_byte(path / victim, data.index(b"k150"))  # a block in the middle
    code, out, err = run(capsys, "scan", str(path), "--json")
    doc = json.loads(out)  # one valid document, not a fragment and a second one
    assert code == 3 and doc["error"]["type"] == "corruption" and doc["truncated"] is True
    assert 0 < doc["count"] == len(doc["items"]) < 200 and "stopped after" in err


def test_global_options_before_bench_and_huge_or_infinite_expiry(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["-o", "a=b", "bench", "--help"]) == 0
    assert main(["--wal-dir", "/tmp", "--json", "bench", "--help"]) == 0
    capsys.readouterr()
    for text in ("1e300", "inf", "nan"):
        code, _, err = run(capsys, "checkpoint", "create", store, "c", "--expires-in", text)
        assert code == 2 and "--expires-in" in err
    with kvstore.open(store) as db:
        for bad in (float("inf"), float("nan")):
            with pytest.raises(ValueError, match="finite"):
                db.create_checkpoint("c", expires_in=bad)
        db.create_checkpoint("far", expires_in=1e300)  # absurd but representable
    code, out, _ = run(capsys, "checkpoint", "list", store)
    assert code == 0 and "far" in out
    assert codec.human_ms(10**30).endswith("ms after the epoch")


def test_put_reads_the_value_from_standard_input(
    store: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    big = bytes(range(256)) * 2048  # 512 KiB of binary: too big for a command line
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(big)))
    assert run(capsys, "put", store, "blob")[0] == 0
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"00ff 10\n")))
    assert (
        run(
            capsys,
            "put",
            store,
            "--hex",
            "6b",
        )[0]
        == 0
    )
    with kvstore.open_reader(store) as r:
        assert r.get(b"blob") == big and r.get(b"k") == b"\x00\xff\x10"


def test_checkpoint_list_marks_expired_checkpoints(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with kvstore.open(store, background_compaction=False) as db:
        db.create_checkpoint("soon", expires_in=0.001)
        db.create_checkpoint("later", expires_in=3600)
    code, out, _ = run(capsys, "checkpoint", "list", store)
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert code == 0 and "(expired)" in lines["soon"] and "(expired)" not in lines["later"]


def test_write_commands_refuse_to_leave_a_lost_wal_behind_unless_told(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, wal = str(tmp_path / "db"), tmp_path / "wal"
    db = kvstore.open(url, wal_dir=wal, background_flush=False, background_compaction=False)
    db.put(b"only-in-the-journal", b"1")
    db.abandon()  # a crash; then the machine with the journal is gone
    shutil.rmtree(wal)
    code, _, err = run(capsys, "put", url, "k", "v")
    assert code == 1 and "accept_wal_loss" in err
    assert run(capsys, "put", url, "k", "v", "--accept-wal-loss")[0] == 0
    assert run(capsys, "get", url, "k")[1] == "v\n"
