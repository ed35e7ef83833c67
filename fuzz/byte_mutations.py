"""Byte mutations for the decoder fuzzers and the C-vs-Python differential tests.

A mutation is a list of operations (flip, truncate, insert, delete, a
same-length self-splice, zeroing) applied to a valid encoding by
:func:`mutate`; the strategies draw them. Shared by ``fuzz/fuzz_decoders.py``
and ``tests/test_speedups.py`` (``pythonpath`` in pyproject.toml puts this
folder on ``sys.path``).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

Op = tuple[Any, ...]
_pos = st.integers(0, 1 << 16)
flip_op = st.tuples(st.just("flip"), _pos, st.integers(1, 255))
any_op = st.one_of(
    flip_op,
    st.tuples(st.just("truncate"), _pos),
    st.tuples(st.just("insert"), _pos, st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("delete"), _pos, st.integers(1, 16)),
    st.tuples(st.just("copy"), _pos, _pos, st.integers(1, 64)),  # self-splice, same length
    st.tuples(st.just("zero"), _pos, st.integers(1, 64)),
)
flips = st.lists(flip_op, min_size=1, max_size=4)


def mutate(data: bytes, ops: list[Op]) -> bytes:
    buf = bytearray(data)
    for op in ops:
        kind = op[0]
        if kind == "flip" and buf:
            buf[op[1] % len(buf)] ^= op[2]
        elif kind == "truncate":
            del buf[op[1] % (len(buf) + 1) :]
        elif kind == "insert":
            p = op[1] % (len(buf) + 1)
            buf[p:p] = op[2]
        elif kind == "delete" and buf:
            p = op[1] % len(buf)
            del buf[p : p + op[2]]
        elif kind == "copy" and buf:
            src, dst = op[1] % len(buf), op[2] % len(buf)
            chunk = buf[src : src + op[3]][: len(buf) - dst]
            buf[dst : dst + len(chunk)] = chunk
        elif kind == "zero" and buf:
            p = op[1] % len(buf)
            n = min(op[2], len(buf) - p)
            buf[p : p + n] = bytes(n)
    return bytes(buf)
