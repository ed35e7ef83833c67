"""Wrong URLs get a clear error and create nothing (issue 13, item 5)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import kvstore
from kvstore.objstore import local_path, open_store

REPO = Path(__file__).resolve().parent.parent


def test_file_url_with_a_host_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="absolute path"):
        kvstore.open("file://rel/x")
    assert not os.path.exists("/rel")
    assert not (tmp_path / "rel").exists()
    with pytest.raises(ValueError, match="absolute path"):
        kvstore.open_reader("file://rel/x")


def test_file_urls_that_name_a_path(tmp_path: Path) -> None:
    assert local_path(f"file://{tmp_path}/a") == f"{tmp_path}/a"
    assert local_path(f"file://localhost{tmp_path}/b") == f"{tmp_path}/b"
    assert local_path("rel/dir") == "rel/dir"
    assert local_path("s3://bucket/x") is None
    with kvstore.open(f"file://localhost{tmp_path}/b") as db:
        db.put(b"k", b"v")
    with kvstore.open_reader(str(tmp_path / "b")) as r:
        assert r.get(b"k") == b"v"


@pytest.mark.parametrize("url", ["ftp://host/x", "http://example.invalid/x", "sftp://h/x"])
def test_unsupported_schemes_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match="unsupported scheme"):
        kvstore.open(url)
    with pytest.raises(ValueError, match="unsupported scheme"):
        kvstore.open_reader(url)


def test_ftp_url_prints_no_ignored_exception() -> None:
    """It used to raise a TypeError while building the filesystem, and its __del__
    then printed an 'Exception ignored' traceback."""
    code = (
        "import kvstore\n"
        "try:\n"
        "    kvstore.open('ftp://host/x')\n"
        "except ValueError as exc:\n"
        "    print('refused:', exc)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert p.returncode == 0 and p.stdout.startswith("refused:")
    assert p.stderr == ""
    p = subprocess.run(
        [sys.executable, "-m", "kvstore", "info", "ftp://host/x"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert p.returncode == 1 and "unsupported scheme" in p.stderr
    assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr


def test_a_regular_file_is_not_a_store(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_bytes(b"not a store")
    with pytest.raises(NotADirectoryError, match="is a file"):
        kvstore.open(f)
    with pytest.raises(NotADirectoryError, match="is a file"):
        kvstore.open_reader(f)
    with pytest.raises(NotADirectoryError, match="not a directory"):
        kvstore.open(f / "sub")
    assert f.read_bytes() == b"not a store"


def test_open_reader_on_an_empty_directory_says_there_is_no_store(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="no kvstore"):
        kvstore.open_reader(empty)
    assert os.listdir(empty) == []  # and created nothing
    with pytest.raises(FileNotFoundError, match="no kvstore"):
        kvstore.open_reader("memory://nothing-here-" + os.urandom(4).hex())
    with pytest.raises(FileNotFoundError, match="does not exist"):
        kvstore.open_reader(tmp_path / "missing")


def test_open_store_still_accepts_object_store_urls() -> None:
    store = open_store("s3://bucket/prefix", {"anon": True})
    assert store.describe().startswith("s3://") or "bucket/prefix" in store.describe()
