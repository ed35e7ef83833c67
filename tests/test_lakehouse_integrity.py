"""Data-file integrity: a damaged data file never yields a wrong row.

The sweep flips one bit at a time, seeded, in the data files of a table of
three files that take every read path: one written by the lakehouse with a
deletion vector (read from the bytes in hand), one adopted with
``add_files`` holding dictionary pages and page indexes, one written by the
lakehouse without deletions (the last two read by Arrow's dataset reader
straight from the filesystem). Each flip goes through ``read``,
``read(where=...)``, ``scan_batches`` and a ``lakehouse.open_reader``
reader: every read gives the original rows or a CorruptionError naming the
damaged file, and verify's check of the file reports every flip.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from integrity_flips import REGIONS, flipped, flips, pick, regions
from parquet_files import PARQUET

import lakehouse
from lakehouse.cli.main import main
from lakehouse.cli.verify import _check_file
from lakehouse.data import files as datafiles
from lakehouse.data import record

T = "n.t"
SCHEMA = pa.schema([("i", pa.int64()), ("s", pa.string()), ("f", pa.float64())])
WHERE = "i >= 2500 AND i < 7000 AND s <> 'v7'"
SEED = 19


def rows(lo: int, hi: int) -> pa.Table:
    return pa.table(
        {
            "i": pa.array(range(lo, hi), pa.int64()),
            "s": pa.array([f"v{k % 50}" for k in range(lo, hi)]),
            "f": pa.array([k / 7 for k in range(lo, hi)], pa.float64()),
        }
    )


def by_i(t: pa.Table) -> pa.Table:
    return t.sort_by("i")


class Setup:
    def __init__(self, root: Path) -> None:
        self.url = str(root / "lh")
        self.lh = lakehouse.open(self.url)
        lh = self.lh
        with lh.begin() as txn:
            txn.create_namespace("n")
            txn.create_table(T, SCHEMA, PARQUET)
            txn.create_table("n.other", SCHEMA, PARQUET)
        with lh.begin() as txn:
            txn.append(T, rows(0, 3000))
        with lh.begin() as txn:
            txn.delete(T, "i % 97 = 0")
        base = lh.data_location()[0].removeprefix("file://")
        adopted = "adopted/0000000000000-dict.parquet"
        (Path(base) / "adopted").mkdir()
        pq.write_table(  # dictionary pages, several data pages, page indexes
            rows(3000, 6000),
            str(Path(base) / adopted),
            use_dictionary=True,
            data_page_size=4096,
            write_page_checksum=True,
            write_page_index=True,
        )
        with lh.begin() as txn:
            txn.add_files(T, [adopted])
        with lh.begin() as txn:
            txn.append(T, rows(6000, 9000))
        with lh.begin() as txn:
            txn.append("n.other", rows(0, 10))
        self.records = {f.path: f for f in lh.list_data_files(T)}
        self.paths = {Path(base) / p: p for p in self.records}
        self.original = {p: p.read_bytes() for p in self.paths}
        self.want = by_i(lh.read(T))
        self.want_where = by_i(lh.read(T, where=WHERE))
        self.reader = lakehouse.open_reader(self.url)
        assert self.want.num_rows == 9000 - 31 and self.want_where.num_rows > 3000

    def reads(self) -> dict[str, Any]:
        lh, r = self.lh, self.reader
        return {
            "read": lambda: lh.read(T),
            "read(where)": lambda: lh.read(T, where=WHERE),
            "scan_batches": lambda: lh.scan_batches(T).read_all(),
            "reader": lambda: r.read(T),
        }


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Any:
    s = Setup(tmp_path_factory.mktemp("integrity"))
    yield s
    s.reader.close()
    s.lh.close()


def test_every_file_records_its_checksums(setup: Setup) -> None:
    for path, rel in setup.paths.items():
        f = setup.records[rel]
        data = path.read_bytes()
        assert (f.footer_size, f.footer_crc, f.crc) == tuple(
            datafiles.checksums(data, rel).values()
        )
        assert f.size == len(data)
        decoded = record.decode_file(record.encode_file(f))
        assert (decoded.footer_size, decoded.footer_crc, decoded.crc) == (
            f.footer_size,
            f.footer_crc,
            f.crc,
        )
    kinds = {rel: regions(p.read_bytes()) for p, rel in setup.paths.items()}
    assert sum(bool(k["dictionary"]) for k in kinds.values()) == 1  # the adopted file


def sweep(setup: Setup, per_region: int, seed: int) -> Counter[tuple[str, str]]:
    """Flip, read every way, check, restore; returns outcomes by (region, outcome)."""
    outcomes: Counter[tuple[str, str]] = Counter()
    rng = random.Random(seed)
    wants = {"read(where)": setup.want_where}
    for path, region, offset, bit in flips(rng, setup.original, per_region):
        rel = setup.paths[path]
        bad = flipped(setup.original[path], offset, bit)
        path.write_bytes(bad)
        try:
            for how, read in setup.reads().items():
                try:
                    got = read()
                except lakehouse.CorruptionError as exc:
                    assert rel in str(exc), (how, region, offset, bit, str(exc))
                    outcomes[region, "error"] += 1
                    continue
                want = wants.get(how, setup.want)
                assert by_i(got).equals(want), f"wrong answer: {how} {rel} {region} @{offset}:{bit}"
                outcomes[region, "same rows"] += 1
            problem = _check_file(bad, setup.records[rel])
            assert problem is not None, f"verify missed {rel} {region} @{offset}:{bit}"
        finally:
            path.write_bytes(setup.original[path])
    return outcomes


def test_bit_flip_sweep(setup: Setup) -> None:
    """>= 1,000 flips over data pages, dictionary pages, footers and the rest."""
    outcomes = sweep(setup, per_region=260, seed=SEED)
    flipped_total = sum(outcomes.values()) // len(setup.reads())
    assert flipped_total >= 1000
    for region in REGIONS:
        assert outcomes[region, "error"] > 0, region
    # the table is whole again
    assert by_i(setup.lh.read(T)).equals(setup.want)


@pytest.mark.slow
def test_bit_flip_sweep_large(setup: Setup) -> None:
    sweep(setup, per_region=2500, seed=SEED + 1)


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    code = main([*args, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("region", ["data", "dictionary", "footer"])
def test_verify_names_the_damaged_file_and_the_lakehouse_stays_usable(
    setup: Setup, capsys: pytest.CaptureFixture[str], region: str
) -> None:
    rng = random.Random(f"{SEED}-{region}")
    candidates = [p for p in setup.paths if regions(setup.original[p])[region]]
    path = candidates[0]
    rel = setup.paths[path]
    spans = regions(setup.original[path])[region]
    a, b = spans[0]
    path.write_bytes(flipped(setup.original[path], rng.randrange(a, b), rng.randrange(8)))
    try:
        code, doc = cli_json(capsys, "verify", setup.url)
        assert code == 3 and not doc["ok"]
        assert doc["damaged_objects"] == [f"data/{rel}"]
        with pytest.raises(lakehouse.CorruptionError, match=rel.replace(".", r"\.")):
            setup.lh.read(T)
        # the other table still reads and commits, and so does this one's metadata
        before = setup.lh.read("n.other").num_rows
        with setup.lh.begin() as txn:
            txn.append("n.other", rows(100, 101))
        assert setup.lh.read("n.other").num_rows == before + 1
        assert setup.lh.table_stats(T).rows == setup.want.num_rows
    finally:
        path.write_bytes(setup.original[path])
    assert cli_json(capsys, "verify", setup.url)[0] == 0


def test_records_without_checksums_still_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records written before the checksums existed decode with None and read;
    page checksums (when the file has them) still guard them."""
    url = str(tmp_path / "old")
    with lakehouse.open(url) as lh:
        with lh.begin() as txn:
            txn.create_namespace("n")
            txn.create_table(T, SCHEMA, PARQUET)
        with monkeypatch.context() as m:
            m.setattr(datafiles, "checksums", lambda data, path: {})
            for lo in (0, 100):
                with lh.begin() as txn:
                    txn.append(T, rows(lo, lo + 100))
        files = lh.list_data_files(T)
        assert [f.crc for f in files] == [None, None]
        assert by_i(lh.read(T)).equals(rows(0, 200))
        assert by_i(lh.scan_batches(T).read_all()).equals(rows(0, 200))
    assert main(["verify", url]) == 0
    # an old-style record (no checksum keys at all) decodes
    old = record.encode_file(replace(files[0], footer_size=None, footer_crc=None, crc=None))
    assert b'"crc"' not in old and record.decode_file(old).footer_crc is None


def test_disabled_verification_reads_the_same(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The switch the read benchmark uses changes nothing on sound files."""
    monkeypatch.setattr(datafiles, "VERIFY", False)
    assert by_i(setup.lh.read(T)).equals(setup.want)
    assert by_i(setup.lh.read(T, where=WHERE)).equals(setup.want_where)


def _table_of_files(root: Path, n_files: int) -> tuple[Any, Path, str]:
    """A lakehouse whose table ``T`` has ``n_files`` files (1: read from the bytes in
    hand; 2 or more: Arrow's dataset reader); the last file's path and its record's."""
    lh = lakehouse.open(str(root / "lh"))
    with lh.begin() as txn:
        txn.create_namespace("n")
        txn.create_table(T, SCHEMA, PARQUET)
        txn.create_table("n.other", SCHEMA, PARQUET)
    for k in range(n_files):
        with lh.begin() as txn:
            txn.append(T, rows(k * 1000, k * 1000 + 1000))
    with lh.begin() as txn:
        txn.append("n.other", rows(0, 10))
    rel = lh.list_data_files(T)[-1].path
    return lh, Path(lh.data_location()[0].removeprefix("file://")) / rel, rel


@pytest.mark.parametrize("n_files", [1, 3])
def test_a_storage_error_reading_a_data_file_names_it(tmp_path: Path, n_files: int) -> None:
    """A data file storage cannot read (here: a directory where the file was) is a
    StorageError naming the file, not a raw OSError and not corruption, on every
    path that reads it; the lakehouse stays usable."""
    lh, path, rel = _table_of_files(tmp_path, n_files)
    path.unlink()
    path.mkdir()
    reader = lakehouse.open_reader(str(tmp_path / "lh"))
    try:
        calls = {
            "read": lambda: lh.read(T),
            "read(where)": lambda: lh.read(T, where="i >= 0"),
            "scan_batches": lambda: lh.scan_batches(T).read_all(),
            "delete": lambda: lh.delete(T, "i % 2 = 0"),
            "reader": lambda: reader.read(T),
        }
        for how, call in calls.items():
            with pytest.raises(lakehouse.StorageError) as info:
                call()
            assert rel in str(info.value), (how, str(info.value))
        assert lh.read("n.other").num_rows == 10
        with lh.begin() as txn:
            txn.append("n.other", rows(10, 11))
    finally:
        reader.close()
        lh.close()


def test_full_export_checks_what_it_copies(tmp_path: Path) -> None:
    """A full export copies each data file's bytes after checking them against
    the record (a damaged file is a CorruptionError naming it, not a copy that
    looks sound); copied and referenced files keep their recorded checksums."""
    lh, path, rel = _table_of_files(tmp_path, 2)
    original = path.read_bytes()
    want = by_i(lh.read(T))
    path.write_bytes(flipped(original, regions(original)["data"][0][0] + 40, 3))
    with pytest.raises(lakehouse.CorruptionError, match=rel.replace(".", r"\.")):
        lh.export(str(tmp_path / "full"), kind="full")
    path.write_bytes(original)
    lh.export(str(tmp_path / "full2"), kind="full")
    lh.export(str(tmp_path / "minimal"), kind="minimal")
    recorded = {f.path: f.crc for f in lh.list_data_files(T)}
    lh.close()
    with lakehouse.open(str(tmp_path / "full2")) as full:
        assert {f.path: f.crc for f in full.list_data_files(T)} == recorded
        assert by_i(full.read(T)).equals(want)
    # damage after a minimal export: the export's reads of the referenced file see it
    path.write_bytes(flipped(original, regions(original)["data"][0][0] + 40, 3))
    with lakehouse.open(str(tmp_path / "minimal")) as minimal:
        files = minimal.list_data_files(T)
        assert sorted(f.crc for f in files) == sorted(recorded.values())
        with pytest.raises(lakehouse.CorruptionError, match=rel.replace(".", r"\.")):
            minimal.read(T)
    assert main(["verify", str(tmp_path / "minimal")]) == 3


def test_add_files_refuses_a_file_damaged_before_adoption(tmp_path: Path) -> None:
    """The checksums add_files records come from the bytes it finds; a page
    damaged between the write and the adoption fails its page checksum there
    (CorruptionError naming the file, nothing committed). Whatever a flip in
    the pages does, the adopted file never reads as different rows."""
    lh, _, _ = _table_of_files(tmp_path, 1)
    base = Path(lh.data_location()[0].removeprefix("file://"))
    (base / "in").mkdir()
    good = base / "in" / "0000000000000-good.parquet"
    pq.write_table(
        rows(5000, 8000),
        str(good),
        use_dictionary=True,
        data_page_size=2048,
        write_page_checksum=True,
    )
    original = good.read_bytes()
    spans = regions(original)["data"] + regions(original)["dictionary"]
    before = by_i(lh.read(T))
    want = by_i(pa.concat_tables([before, rows(5000, 8000)]))
    rng = random.Random(SEED)
    outcomes: Counter[str] = Counter()
    for k in range(150):
        offset = pick(rng, spans)
        rel = f"in/0000000000000-flip{k}.parquet"
        (base / rel).write_bytes(flipped(original, offset, rng.randrange(8)))
        try:
            with lh.begin() as txn:
                txn.add_files(T, [rel])
        except lakehouse.CorruptionError as exc:
            assert rel in str(exc), str(exc)
            assert by_i(lh.read(T)).equals(before)  # nothing committed
            outcomes["refused"] += 1
            continue
        try:
            got = by_i(lh.read(T))
        except lakehouse.CorruptionError as exc:
            assert rel in str(exc)
            outcomes["read error"] += 1
        else:
            assert got.equals(want), f"wrong answer after adopting a flip @{offset}"
            outcomes["same rows"] += 1
        with lh.begin() as txn:
            txn.remove_files(T, [rel])
    assert outcomes["refused"] >= 130, outcomes
    with lh.begin() as txn:
        txn.add_files(T, ["in/0000000000000-good.parquet"])
    assert by_i(lh.read(T)).equals(want)
    lh.close()


def _grown(data: bytes) -> bytes:
    """``data`` with a copy of its own footer appended: a Parquet reader that finds
    the tail itself parses the same footer, at an offset the record does not have."""
    flen = int.from_bytes(data[-8:-4], "little")
    return data + data[-8 - flen :]


@pytest.mark.parametrize("n_files", [1, 3])
@pytest.mark.parametrize(
    "change", ["truncated", "extended", "grown by its own footer", "each bit of page 1"]
)
def test_every_changed_byte_of_a_file_read_whole_is_an_error(
    tmp_path: Path, n_files: int, change: str
) -> None:
    """A read of every row of a file (Arrow's dataset reader for 3 plain files, the
    bytes in hand for 1) fails on any change to the file, even one that leaves its
    rows as they were (a page header, a changed length): the whole-file checksum."""
    lh, path, rel = _table_of_files(tmp_path, n_files)
    original = path.read_bytes()
    first = regions(original)["data"][0][0]
    variants = {
        "truncated": [original[:-1]],
        "extended": [original + b"\0"],
        "grown by its own footer": [_grown(original)],
        "each bit of page 1": [
            flipped(original, o, b) for o in range(first, first + 40) for b in range(8)
        ],
    }[change]
    try:
        for bad in variants:
            path.write_bytes(bad)
            with pytest.raises(lakehouse.CorruptionError, match=rel.replace(".", r"\.")):
                lh.read(T)
        assert main(["verify", str(tmp_path / "lh")]) == 3
    finally:
        path.write_bytes(original)
    assert lh.read(T).num_rows == 1000 * n_files
    lh.close()
