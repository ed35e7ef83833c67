"""A cursor over the tokens of a statement sqlglot leaves unparsed.

sqlglot parses ``SHOW ...``, ``CALL ...``, ``CREATE SCHEMA ... WITH
DBPROPERTIES`` and ``ALTER TABLE ... UNSET TBLPROPERTIES`` as an
``exp.Command`` whose text it keeps. Their grammar is a few keywords, a name
and a parenthesised list, so :class:`Words` walks the tokens of sqlglot's own
Spark tokenizer (quoting and string escapes as Spark reads them) instead of
matching text. Runs on the driver; raises ValueError naming what it expected.
"""

from __future__ import annotations

import sqlglot
from sqlglot.dialects.spark import Spark
from sqlglot.tokenizer_core import Token, TokenType

_NAME_TYPES = (TokenType.VAR, TokenType.IDENTIFIER)
_VALUE_TYPES = (TokenType.STRING, TokenType.NUMBER, TokenType.TRUE, TokenType.FALSE)


class Words:
    """Tokens of ``text`` consumed front to back; ``what`` names the statement in errors."""

    def __init__(self, text: str, what: str) -> None:
        try:
            self.tokens: list[Token] = Spark().tokenize(text)
        except sqlglot.errors.SqlglotError as exc:
            raise ValueError(f"{what}: {exc}") from None
        self.i = 0
        self.what = what
        self.text = text

    def rest(self) -> str:
        """The text not consumed yet."""
        return "" if self.at_end() else self.text[self.tokens[self.i].start :].strip()

    def at_end(self) -> bool:
        return self.i >= len(self.tokens)

    def peek(self) -> str:
        """The next token's text, upper-cased when it is a word ("" at the end)."""
        if self.at_end():
            return ""
        tok = self.tokens[self.i]
        return (
            tok.text
            if tok.token_type in (TokenType.STRING, TokenType.IDENTIFIER)
            else tok.text.upper()
        )

    def accept(self, *words: str) -> bool:
        """Consume ``words`` (keywords, upper case) when the next tokens are exactly they."""
        end = self.i + len(words)
        if end > len(self.tokens):
            return False
        for tok, word in zip(self.tokens[self.i : end], words):
            if (
                tok.token_type in (TokenType.STRING, TokenType.IDENTIFIER)
                or tok.text.upper() != word
            ):
                return False
        self.i = end
        return True

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            raise self.error(" ".join(words))

    def name(self) -> str:
        """A possibly qualified name (``ns.t``, ```ns`.`t```), quotes removed."""
        return ".".join(self.name_parts())

    def name_parts(self) -> list[str]:
        """The parts of a possibly qualified name (a quoted part may hold dots)."""
        parts = [self._part()]
        while not self.at_end() and self.tokens[self.i].token_type == TokenType.DOT:
            self.i += 1
            parts.append(self._part())
        return parts

    def _part(self) -> str:
        if self.at_end():
            raise self.error("a name")
        tok = self.tokens[self.i]
        if tok.token_type in (TokenType.STRING, TokenType.NUMBER) or not tok.text[:1].strip():
            raise self.error("a name")
        if tok.token_type not in _NAME_TYPES and not tok.text.replace("_", "").isalnum():
            raise self.error("a name")
        self.i += 1
        return tok.text

    def string(self) -> str:
        if self.at_end() or self.tokens[self.i].token_type != TokenType.STRING:
            raise self.error("a quoted string")
        self.i += 1
        return self.tokens[self.i - 1].text

    def _key_or_value(self) -> str:
        if self.at_end():
            raise self.error("a property")
        tok = self.tokens[self.i]
        if tok.token_type in _VALUE_TYPES:
            self.i += 1
            return (
                tok.text.lower()
                if tok.token_type in (TokenType.TRUE, TokenType.FALSE)
                else tok.text
            )
        return self.name()

    def _punct(self, kind: TokenType, text: str) -> bool:
        if not self.at_end() and self.tokens[self.i].token_type == kind:
            self.i += 1
            return True
        return False

    def properties(self) -> dict[str, str]:
        """``('k' = 'v', k2 = 'v2', ...)``: keys and values as strings."""
        out: dict[str, str] = {}
        if not self._punct(TokenType.L_PAREN, "("):
            raise self.error("(")
        while True:
            key = self._key_or_value()
            self._punct(TokenType.EQ, "=")
            out[key] = self._key_or_value()
            if self._punct(TokenType.COMMA, ","):
                continue
            if self._punct(TokenType.R_PAREN, ")"):
                return out
            raise self.error(", or )")

    def keys(self) -> list[str]:
        """``('k', k2, ...)``."""
        out: list[str] = []
        if not self._punct(TokenType.L_PAREN, "("):
            raise self.error("(")
        while True:
            out.append(self._key_or_value())
            if self._punct(TokenType.COMMA, ","):
                continue
            if self._punct(TokenType.R_PAREN, ")"):
                return out
            raise self.error(", or )")

    def end(self) -> None:
        if not self.at_end():
            raise self.error("the end of the statement")

    def error(self, expected: str) -> ValueError:
        found = "the end" if self.at_end() else repr(self.tokens[self.i].text)
        return ValueError(f"{self.what}: expected {expected}, found {found}")
