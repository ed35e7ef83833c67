"""Bytes <-> command-line text, and small formatting helpers.

Keys and values are arbitrary bytes; a terminal is not. The rules:

* **input**, text mode: the argument's bytes exactly as the OS passed them
  (``os.fsencode``, so even non-UTF-8 argv bytes survive); ``--hex``: hex
  digits (spaces, ``:`` and a leading ``0x`` are ignored).
* **output**, text mode: valid UTF-8 shows its printable characters as they
  are; everything else is escaped like a Python bytes literal without the
  quotes (``\\n``, ``\\t``, ``\\x00``, ``\\\\`` for a backslash, and a
  non-printable character as its UTF-8 bytes ``\\xNN``), so a key can never
  break a line or move the cursor. Bytes that are not valid UTF-8 show every
  byte outside printable ASCII as ``\\xNN``; ``--hex``: lowercase hex.
* **JSON**, text mode: ``"key": "<exact string>"`` when the bytes are valid
  UTF-8, otherwise ``"key_hex": "..."`` instead; ``--hex``: ``"key_hex"``
  always. A consumer never has to undo an escape.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

_HEX_JUNK = re.compile(r"[\s:]")
_SIMPLE_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: printable ASCII bytes shown as themselves, and the simple escapes
_ASCII = {
    **{b: chr(b) for b in range(0x20, 0x7F) if b != 0x5C},
    **{ord(k): v for k, v in _SIMPLE_ESCAPES.items()},
}


class InputError(ValueError):
    """A key, value or bound given on the command line is malformed (usage error)."""


def parse_bytes(text: str, *, hex_mode: bool, what: str) -> bytes:
    if not hex_mode:
        return os.fsencode(text)
    digits = _HEX_JUNK.sub("", text)
    if digits[:2].lower() == "0x":
        digits = digits[2:]
    try:
        return bytes.fromhex(digits)
    except ValueError:
        raise InputError(f"{what} is not valid hex: {text!r}") from None


def parse_key(text: str, *, hex_mode: bool, what: str = "KEY") -> bytes:
    key = parse_bytes(text, hex_mode=hex_mode, what=what)
    if not key:
        raise InputError(f"{what} must not be empty")
    return key


def escape(data: bytes) -> str:
    """Printable text for any bytes; reversible (see the module docstring)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:  # not text: show bytes, as a bytes literal would
        return "".join(_ASCII.get(b) or f"\\x{b:02x}" for b in data)
    if text.isprintable() and "\\" not in text:
        return text
    out: list[str] = []
    for ch in text:
        if ch in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        else:  # its UTF-8 bytes, so the escape reads back as a bytes literal
            out.extend(f"\\x{b:02x}" for b in ch.encode())
    return "".join(out)


def show(data: bytes, *, hex_mode: bool) -> str:
    """One key or value for a human."""
    return data.hex() if hex_mode else escape(data)


def json_bytes(doc: dict[str, Any], field: str, data: bytes | None, *, hex_mode: bool) -> None:
    """Store ``data`` in ``doc`` as ``field`` (exact UTF-8) or ``field_hex``."""
    if data is None:
        doc[field] = None
        return
    if not hex_mode:
        try:
            doc[field] = data.decode("utf-8")
            return
        except UnicodeDecodeError:
            pass
    doc[f"{field}_hex"] = data.hex()


def human_bytes(n: int | float) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_ms(ms: int | None) -> str:
    """Epoch milliseconds as UTC time, or 'never'/'unknown'."""
    if ms is None:
        return "never"
    if ms <= 0:
        return "unknown"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))
    except (OverflowError, OSError, ValueError):  # beyond what the platform can show
        return f"{ms} ms after the epoch"


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"
