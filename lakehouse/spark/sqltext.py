"""Spark SQL text respelled for the lakehouse's own parser (:mod:`lakehouse.data.sql`).

A condition such as ``lhs.read(where=)`` or ``lhs.write(mode="overwrite", where=)``
is Spark SQL, but the driver also gives it to the lakehouse's parser (to prune
files, or to delete the rows an overwrite replaces). The two read string
literals differently: Spark unescapes backslashes (``'a\\\\'`` is ``a\\``,
``'o\\'b'`` is ``o'b``) and reads ``"x"`` as a string; the lakehouse's dialect
has no backslash escapes (``'a\\'`` is ``a\\``, ``''`` a quote) and reads ``"x"``
as a column name. :func:`lakehouse_text` keeps every token of the text as it is
except string literals, which it requotes in the lakehouse's spelling of the
value Spark reads::

    name = 'o\\'b' AND tag = "a\\\\"      (Spark)
    name = 'o''b' AND tag = 'a\\'         (lakehouse: the same two values)

sqlglot's Spark tokenizer finds the literals and their values;
:func:`uncertain_strings` lists those whose value it cannot vouch for: an
escape outside ``\\\\ \\' \\" \\n \\t \\r \\% \\_`` (octal, ``\\u``, ``\\0``...),
a raw, hex or other special string, a backslash while the session sets
``spark.sql.parser.escapedStringLiterals`` (Spark then keeps backslashes), a
``"..."`` literal while ``spark.sql.ansi.doubleQuotedIdentifiers`` makes it a name.
Callers never carry those over: pruning skips the conjunct, an overwrite's
``where`` is refused with a ValueError.
"""

from __future__ import annotations

from typing import Any

from sqlglot.errors import SqlglotError
from sqlglot.tokenizer_core import Token, TokenType

__all__ = ["canonical", "lakehouse_text", "uncertain_strings"]

#: Spark's escapes (ParserUtils.unescapeSQLString) whose value sqlglot reads the same
_ESCAPES = {
    "\\": "\\",
    "'": "'",
    '"': '"',
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "%": "\\%",  # Spark keeps the backslash of \% and \_ (for LIKE)
    "_": "\\_",
}

#: token types of string literals other than a plain '...' / "..." (raw, hex, byte...)
_OTHER_STRINGS = frozenset(
    t for t in TokenType if t.name.endswith("_STRING") and t is not TokenType.STRING
)


def _tokens(text: str) -> list[Token] | None:
    """sqlglot's Spark tokens of ``text``; None when it does not tokenize."""
    from sqlglot.dialects.spark import Spark

    try:
        return list(Spark().tokenize(text))
    except SqlglotError:
        return None


def _spark_value(raw: str, escaped: bool) -> str | None:
    """The value Spark reads from the literal ``raw`` (quotes included); None when
    it is not one of the plain forms this module knows exactly."""
    if len(raw) < 2 or raw[0] not in "'\"" or raw[-1] != raw[0]:
        return None
    body = raw[1:-1]
    if escaped:  # spark.sql.parser.escapedStringLiterals: no unescaping at all
        return body
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            value = _ESCAPES.get(body[i + 1 : i + 2])
            if value is None:
                return None
            out.append(value)
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _conf_true(spark: Any, key: str) -> bool:
    try:
        return str(spark.conf.get(key, "false")).strip().lower() == "true"
    except Exception:  # an unreadable setting: assume the unusual reading
        return True


def canonical(text: str) -> str | None:
    """Spark SQL ``text`` whose string literals sqlglot splits as Spark does: a doubled
    quote inside a literal (``'o''b'``, Spark's ``o'b``; sqlglot reads two literals,
    ``'o' 'b'``, which concatenate to ``ob``) respelled with a backslash (``'o\\'b'``).
    None when the text does not tokenize."""
    tokens = _tokens(text)
    if tokens is None:
        return None
    parts: list[str] = []
    at = i = 0
    while i < len(tokens):
        first = tokens[i]
        quote = text[first.start]
        j = i
        if first.token_type is TokenType.STRING and quote in "'\"":
            while (
                j + 1 < len(tokens)
                and tokens[j + 1].token_type is TokenType.STRING
                and tokens[j + 1].start == tokens[j].end + 1
                and text[tokens[j + 1].start] == quote
            ):
                j += 1
        if j > i:  # pieces with nothing between: one literal to Spark
            bodies = [text[t.start + 1 : t.end] for t in tokens[i : j + 1]]
            parts += [text[at : first.start], quote, ("\\" + quote).join(bodies), quote]
            at = tokens[j].end + 1
        i = j + 1
    parts.append(text[at:])
    return "".join(parts)


def uncertain_strings(spark: Any, text: str) -> set[int] | None:
    """Start offsets (in ``text``) of the string literals of Spark SQL ``text``
    whose value sqlglot may read differently from ``spark``; None when the text
    does not tokenize. An empty set: every literal's value is the one Spark reads."""
    tokens = _tokens(text)
    if tokens is None:
        return None
    confs: dict[str, bool] = {}

    def conf(key: str) -> bool:
        if key not in confs:
            confs[key] = _conf_true(spark, key)
        return confs[key]

    out: set[int] = set()
    for tok in tokens:
        if tok.token_type in _OTHER_STRINGS:
            out.add(tok.start)
        elif tok.token_type is TokenType.STRING:
            raw = text[tok.start : tok.end + 1]
            escaped = "\\" in raw and conf("spark.sql.parser.escapedStringLiterals")
            named = raw[:1] == '"' and conf("spark.sql.ansi.doubleQuotedIdentifiers")
            if named or _spark_value(raw, escaped) != tok.text:
                out.add(tok.start)
    return out


def lakehouse_text(text: str) -> str | None:
    """Spark SQL ``text`` with every string literal requoted for the lakehouse's
    parser (the value sqlglot's Spark tokenizer reads; check it with
    :func:`uncertain_strings` when ``text`` comes from a user). None when the
    text does not tokenize or holds a raw, hex or other special string literal."""
    from lakehouse.data.sql import string_literal, string_values

    tokens = _tokens(text)
    if tokens is None:
        return None
    parts: list[str] = []
    values: list[str] = []
    at = 0
    for tok in tokens:
        if tok.token_type in _OTHER_STRINGS:
            return None
        if tok.token_type is TokenType.STRING:
            parts.append(text[at : tok.start])
            parts.append(string_literal(tok.text))
            values.append(tok.text)
            at = tok.end + 1
    parts.append(text[at:])
    out = "".join(parts)
    # the lakehouse must read exactly these values: adjacent literals ('a' 'b', which
    # Spark concatenates) would run together as one ('a''b'): not carried over
    if values and string_values(out) != values:
        return None
    return out
