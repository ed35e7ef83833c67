"""kvstore.clock: the real clock, seeded entropy and the fake clock for tests."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kvstore.clock import Clock, FakeClock


def test_real_clock_reads_the_system_clocks() -> None:
    c = Clock()
    assert abs(c.time() - time.time()) < 5
    before = time.monotonic()
    m = c.monotonic()
    assert before <= m <= time.monotonic()
    started = time.monotonic()
    c.sleep(0.01)
    assert time.monotonic() - started >= 0.009


def test_unseeded_entropy_differs_and_has_the_right_shape() -> None:
    a, b = Clock(), Clock()
    ta, tb = a.token_hex(8), b.token_hex(8)
    assert len(ta) == len(tb) == 16 and ta != tb
    int(ta, 16)
    assert 0 <= a.getrandbits(10) < 1024
    assert 0.0 <= a.random() < 1.0


def test_a_seed_repeats_every_random_value() -> None:
    def draw(c: Clock) -> tuple[str, int, float, str]:
        return c.token_hex(8), c.getrandbits(64), c.random(), c.token_hex(3)

    assert draw(Clock(seed=42)) == draw(Clock(seed=42))
    assert draw(Clock(seed=42)) != draw(Clock(seed=43))
    tok = Clock(seed=1).token_hex(4)
    assert len(tok) == 8 and int(tok, 16) >= 0
    assert Clock(seed=1).token_hex(0) == ""
    assert Clock(seed=1).getrandbits(0) == 0


def test_seeded_token_hex_keeps_leading_zeros() -> None:
    # every token has exactly 2 * nbytes digits, whatever the value drawn
    c = Clock(seed=5)
    assert all(len(c.token_hex(1)) == 2 for _ in range(500))


def test_fake_clock_moves_only_when_told(monkeypatch: pytest.MonkeyPatch) -> None:
    c = FakeClock(start=1000.0)
    assert c.time() == 1000.0 and c.monotonic() == 1000.0
    assert c.time() == 1000.0  # no drift
    c.advance(2.5)
    assert c.time() == 1002.5 and c.monotonic() == 1002.5

    def real_sleep(seconds: float) -> None:
        raise AssertionError(f"FakeClock.sleep slept for real ({seconds} s)")

    monkeypatch.setattr(time, "sleep", real_sleep)
    c.sleep(3600)  # returns at once, an hour later on the fake clock
    assert c.time() == 4602.5
    assert c.sleeps == [3600]
    c.sleep(-1)  # no time passes
    assert c.time() == 4602.5
    with pytest.raises(ValueError):
        c.advance(-1)


def test_fake_clock_defaults_and_seed() -> None:
    c = FakeClock()
    assert c.time() == 1_700_000_000.0
    assert c.token_hex(8) == FakeClock().token_hex(8) == Clock(seed=0).token_hex(8)
    assert FakeClock(seed=3).token_hex(8) != FakeClock(seed=4).token_hex(8)
    assert isinstance(c, Clock)
    assert "FakeClock" in repr(c)


def test_fake_clock_is_thread_safe() -> None:
    c = FakeClock(start=0.0)

    def work() -> None:
        for _ in range(1000):
            c.sleep(0.001)
            c.advance(0.001)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert c.monotonic() == pytest.approx(8.0)
    assert len(c.sleeps) == 4000


def test_clock_module_imports_only_the_standard_library() -> None:
    import ast
    import sys

    import kvstore.clock as mod

    assert mod.__file__ is not None
    with open(mod.__file__) as f:
        tree = ast.parse(f.read())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    assert names <= set(sys.stdlib_module_names) | {"__future__"}


# -- the parts that take a clock ------------------------------------------------------


def test_reader_refreshes_on_the_clock_it_was_given(tmp_path: Path) -> None:
    import kvstore

    clock = FakeClock()
    with kvstore.open(tmp_path, fsync=False) as db:
        db.put(b"k", b"1")
        reader = kvstore.open_reader(tmp_path, refresh_interval=10.0, clock=clock)
        db.put(b"k", b"2")
        clock.advance(9.0)
        assert reader.get(b"k") == b"1"  # 9 s of fake time: not due yet
        clock.advance(1.0)
        assert reader.get(b"k") == b"2"
        db.put(b"k", b"3")
        assert reader.get(b"k") == b"2"  # the interval starts again at the refresh
        reader.close()


def test_writer_record_takes_time_and_nonce_from_the_clock() -> None:
    from kvstore.objstore.writer_lock import WriterRecord

    a = WriterRecord.mine(FakeClock(start=1234.5, seed=9))
    b = WriterRecord.mine(FakeClock(start=1234.5, seed=9))
    assert a.opened_ms == 1_234_500 and a.nonce == b.nonce and len(a.nonce) == 16
    assert WriterRecord.mine().nonce != WriterRecord.mine().nonce  # real: unpredictable
    assert "(10 s ago)" in a.describe(FakeClock(start=1244.5))


def test_lakehouse_takes_one_clock_for_time_sleeps_and_ids() -> None:
    import lakehouse
    from lakehouse.errors import TransactionExpired

    def run(name: str) -> tuple[str, int, str]:
        clock = FakeClock(seed=3)
        with lakehouse.open(f"memory://{name}", clock=clock, transaction_ttl=10.0) as lh:
            clock.advance(5.0)
            with lh.begin() as txn:
                txn.create_namespace("ns")
            created = lh.version_info(lh.version).created_ms
            txn = lh.begin()
            txn.create_namespace("other")
            clock.advance(11.0)  # past the TTL on the fake clock: expired at once
            with pytest.raises(TransactionExpired):
                txn.commit()
            return lh.definition.id, created, txn.id

    first, second = run("clock-a"), run("clock-b")
    assert first == second  # the same seed and fake time: the same ids and times
    assert first[1] == 1_700_000_005_000


def test_lakehouse_options_keep_callables_and_refuse_two_seeds() -> None:
    import lakehouse

    now = [1000.0]
    with lakehouse.open("memory://clock-c", clock=lambda: now[0], seed=1) as lh:
        assert lh.version_info(0).created_ms == 1_000_000
    with pytest.raises(ValueError, match="seed the Clock"):
        lakehouse.open("memory://clock-d", clock=FakeClock(), seed=1)
    with pytest.raises(TypeError):
        lakehouse.open("memory://clock-e", clock=3)
