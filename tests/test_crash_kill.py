"""Kill -9 crash tests: a writer subprocess is SIGKILLed at random moments.

Each trial starts ``tests/crash_writer.py`` on its own directory, lets it run
for a random 0.05-0.6 s after the store is open, kills it with SIGKILL and
reopens the store in this process. Checked after every kill:

* every acknowledged put / overwrite / delete (from the writer's ack log) is
  reflected: puts present with their exact value, overwrites at the acked
  version or a later one, acked deletes absent;
* no WriteBatch is partial: for every batch found, all its keys are present
  with values naming the same batch size;
* no value is garbled (every value is exactly what the writer would write for
  its key) and no key appears that the writer never wrote.

Some trials run the writer several times on the same directory, killing it
again, sometimes while it is still inside ``kvstore.open`` (crash during
recovery), before the final check. Some trials add concurrent writer threads
(group commit).
"""

from __future__ import annotations

import importlib.util
import random
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import kvstore

WRITER = Path(__file__).with_name("crash_writer.py")
_spec = importlib.util.spec_from_file_location("crash_writer", WRITER)
assert _spec is not None and _spec.loader is not None
crash_writer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(crash_writer)

pytestmark = pytest.mark.slow

SEED = 20240611
N_SINGLE = 44  # trials: one writer run, killed, checked
N_REPEATED = 10  # trials: several runs and kills on one directory, then checked


@dataclass
class Acks:
    puts: set[bytes] = field(default_factory=set)
    batches: dict[bytes, int] = field(default_factory=dict)
    overwrites: dict[bytes, int] = field(default_factory=dict)
    deletes: set[bytes] = field(default_factory=set)
    delete_started: set[bytes] = field(default_factory=set)
    lines: int = 0

    def read(self, path: Path) -> None:
        if not path.exists():
            return
        data = path.read_bytes()
        for line in data.split(b"\n")[:-1]:  # a line is written with one os.write
            parts = line.split(b" ")
            kind = parts[0]
            self.lines += kind != b"X"
            if kind == b"P":
                self.puts.add(parts[1])
            elif kind == b"B":
                self.batches[parts[1]] = int(parts[2])
            elif kind == b"O":
                self.overwrites[parts[1]] = max(self.overwrites.get(parts[1], 0), int(parts[2]))
            elif kind == b"X":
                self.delete_started.add(parts[1])
            elif kind == b"D":
                self.deletes.add(parts[1])
            else:
                raise AssertionError(f"bad ack line {line!r}")


_KEY = re.compile(rb"^r\d{3}/t\d+/(p/\d{7}|d/\d{7}|o/\d{2}|b/\d{7}/\d{2})$")


def check_store(directory: Path, acks: Acks) -> dict[str, int]:
    """Open the store (recovery), check every invariant, close it."""
    # no background compaction: it could merge the SSTs counted below meanwhile
    with kvstore.open(
        directory, memtable_bytes=crash_writer.MEMTABLE_BYTES, background_compaction=False
    ) as db:
        items = list(db.scan())
        problems: list[str] = []
        found: dict[bytes, bytes] = dict(items)
        assert len(found) == len(items), "scan returned a key twice"
        batches: dict[bytes, list[int]] = {}
        for key, value in items:
            if key == b"zz/check":  # written by an earlier check
                if value != b"ok":
                    problems.append(f"garbled check value {value!r}")
                continue
            if not _KEY.match(key):
                problems.append(f"unexpected key {key!r}")
                continue
            parsed = crash_writer.parse_value(value)
            if parsed is None or parsed[0] != key:
                problems.append(f"garbled value for {key!r}: {value[:60]!r}...")
                continue
            _, version, _ = parsed
            kind = key.split(b"/")[2]
            if kind in (b"p", b"d") and version != 0:
                problems.append(f"{key!r} has version {version}")
            if kind == b"b":
                base = key[:-2]
                batches.setdefault(base, []).append(version)
        for key in acks.puts:
            if key in acks.delete_started:  # deleted, or maybe deleted
                continue
            if key not in found:
                problems.append(f"acknowledged put {key!r} is missing")
        for key in acks.deletes:
            if key in found:
                problems.append(f"acknowledged delete of {key!r} is not reflected")
        for key, version in acks.overwrites.items():
            got = crash_writer.parse_value(found[key]) if key in found else None
            if got is None or got[1] < version:
                problems.append(
                    f"overwrite {key!r}: acknowledged v{version}, found "
                    f"{None if got is None else got[1]}"
                )
        for base in acks.batches:
            if base not in batches:
                problems.append(f"acknowledged batch {base!r} is missing")
        for base, sizes in batches.items():
            n = sizes[0]
            if len(sizes) != n or any(s != n for s in sizes):
                problems.append(f"partial batch {base!r}: {len(sizes)} keys found, sizes {sizes}")
        assert not problems, "\n".join(problems[:30]) + f"\n({len(problems)} problems)"
        # the recovered store takes writes and keeps them
        db.put(b"zz/check", b"ok")
        stats = db.stats()
        ssts = stats["l0_ssts"] + stats["sorted_runs"]
        return {"keys": len(items), "batches": len(batches), "ssts": ssts}


class Child:
    def __init__(self, directory: Path, acklog: Path, run: int, seed: int, threads: int) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(WRITER),
                str(directory),
                str(acklog),
                "--run",
                str(run),
                "--seed",
                str(seed),
                "--threads",
                str(threads),
                "--max-seconds",
                "30",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def wait_for(self, word: bytes, timeout: float = 20.0) -> None:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                _, err = self.proc.communicate()
                raise AssertionError(
                    f"writer exited before {word!r} "
                    f"(rc={self.proc.returncode}):\n{err.decode()[-3000:]}"
                )
            if line.strip() == word:
                return
        raise AssertionError(f"writer did not print {word!r} in {timeout}s")

    def kill(self) -> bytes:
        """SIGKILL the writer; returns the rest of its stdout."""
        if self.proc.poll() is not None:
            _, err = self.proc.communicate()
            raise AssertionError(
                f"writer died on its own (rc={self.proc.returncode}):\n{err.decode()[-3000:]}"
            )
        self.proc.send_signal(signal.SIGKILL)
        out, _ = self.proc.communicate(timeout=20)
        assert self.proc.returncode == -signal.SIGKILL
        return out


def run_and_kill(
    directory: Path, acklog: Path, run: int, rng: random.Random, *, threads: int, during_open: bool
) -> bool:
    """One writer run, SIGKILLed; True if it was killed before the store was open."""
    child = Child(directory, acklog, run, rng.randrange(1 << 30), threads)
    try:
        child.wait_for(b"OPENING")
        if during_open:
            time.sleep(rng.uniform(0.0, 0.03))  # usually inside recovery
        else:
            acked = acklog.stat().st_size if acklog.exists() else 0
            child.wait_for(b"READY")
            # the kill lands at a random time after the first acknowledged write
            # (a slow first fsync must not make a trial acknowledge nothing)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and (
                not acklog.exists() or acklog.stat().st_size <= acked
            ):
                time.sleep(0.005)
            time.sleep(rng.uniform(0.05, 0.6))
        rest = child.kill()
        return during_open and b"READY" not in rest
    finally:
        if child.proc.poll() is None:
            child.proc.kill()
            child.proc.communicate()


def test_kill_single(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    total_acks = 0
    flushed = 0  # trials in which the writer flushed memtables (SSTs besides recovery's)
    with_threads = 0
    started = time.monotonic()
    for trial in range(N_SINGLE):
        d = tmp_path / f"t{trial:03d}"
        acklog = tmp_path / f"t{trial:03d}.ack"
        threads = rng.choice([0, 0, 2, 4])
        with_threads += threads > 0
        run_and_kill(d, acklog, 0, rng, threads=threads, during_open=False)
        acks = Acks()
        acks.read(acklog)
        total_acks += acks.lines
        flushed += check_store(d, acks)["ssts"] >= 2
        # reopen once more: the store opened by the check must reopen cleanly
        with kvstore.open(d) as db:
            assert db.get(b"zz/check") == b"ok"
    print(
        f"{N_SINGLE} kill trials, {total_acks} acknowledged writes, "
        f"{with_threads} with threads, {flushed} with flushes, "
        f"{time.monotonic() - started:.1f}s"
    )
    assert with_threads >= 5
    assert total_acks > 20 * N_SINGLE, "the writer acknowledged too few writes to test much"
    assert flushed >= N_SINGLE // 2, f"only {flushed} trials flushed memtables"


def test_kill_repeated(tmp_path: Path) -> None:
    """Kill, restart (recovering), kill again - sometimes during recovery - then check."""
    rng = random.Random(SEED + 1)
    total_runs = 0
    killed_in_open = 0
    for trial in range(N_REPEATED):
        d = tmp_path / f"r{trial:03d}"
        acklog = tmp_path / f"r{trial:03d}.ack"
        threads = rng.choice([0, 3])
        runs = rng.randint(3, 5)
        for run in range(runs):
            # the first run must write something for later recoveries to replay
            during_open = run > 0 and rng.random() < 0.5
            killed_in_open += run_and_kill(
                d, acklog, run, rng, threads=threads, during_open=during_open
            )
            total_runs += 1
            if run == 1 and rng.random() < 0.3:
                acks = Acks()
                acks.read(acklog)
                check_store(d, acks)  # recovery by this process in between
        acks = Acks()
        acks.read(acklog)
        check_store(d, acks)
    print(f"{total_runs} runs, {killed_in_open} killed inside kvstore.open")
    assert total_runs >= 3 * N_REPEATED
    assert killed_in_open >= 3, "no kill landed inside kvstore.open (recovery)"
