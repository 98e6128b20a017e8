"""A small, lazy tokenizer for the statement head (everything before ``AS <query>``).

It is lazy on purpose: the SELECT body after ``AS`` belongs to sqlglot, so we must never try to tokenize
it with our far simpler rules (it may hold double quotes, operators, comments we do not model).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from workers.ddl.errors import DdlSyntaxError


class Kind(enum.Enum):
    WORD = "word"  # bare identifier or keyword
    QUOTED = "quoted"  # `backquoted` identifier
    NUMBER = "number"  # digits, optionally with a fraction (rejected later with a clear message)
    STRING = "string"  # 'single quoted'
    SYMBOL = "symbol"  # any other single character
    END = "end"


@dataclass(frozen=True)
class Token:
    kind: Kind
    text: str  # the value: identifier/string contents without quotes, or the raw characters
    pos: int  # offset of the first character in the scanned text
    end: int  # offset just past the last character

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind is Kind.WORD else ""

    def is_word(self, *words: str) -> bool:
        return self.kind is Kind.WORD and self.upper in words

    def is_symbol(self, symbol: str) -> bool:
        return self.kind is Kind.SYMBOL and self.text == symbol

    def describe(self) -> str:
        """How the token reads in an error message."""
        if self.kind is Kind.END:
            return "end of statement"
        if self.kind is Kind.STRING:
            return f"'{self.text}'"
        if self.kind is Kind.QUOTED:
            return f"`{self.text}`"
        return f"'{self.text}'"


class Lexer:
    """Scans ``source[start:stop]`` on demand; token positions are offsets into ``source``.

    Scanning a slice of the whole statement (rather than a copy) keeps every error position absolute,
    also for the interval inside a quoted ``'30 seconds'``.
    """

    def __init__(self, source: str, start: int = 0, stop: int | None = None) -> None:
        self._source = source
        self._pos = start
        self._stop = len(source) if stop is None else stop
        self._buffer: list[Token] = []

    def peek(self, ahead: int = 0) -> Token:
        while len(self._buffer) <= ahead:
            self._buffer.append(self._scan())
        return self._buffer[ahead]

    def next(self) -> Token:
        token = self.peek()
        self._buffer.pop(0)
        return token

    def _error(self, message: str, position: int) -> DdlSyntaxError:
        return DdlSyntaxError(message, position, self._source)

    def _skip_space_and_comments(self) -> None:
        src, stop = self._source, self._stop
        while self._pos < stop:
            ch = src[self._pos]
            if ch.isspace():
                self._pos += 1
            elif src.startswith("--", self._pos, stop):
                newline = src.find("\n", self._pos, stop)
                self._pos = stop if newline < 0 else newline + 1
            elif src.startswith("/*", self._pos, stop):
                close = src.find("*/", self._pos + 2, stop)
                if close < 0:
                    raise self._error("unterminated /* comment", self._pos)
                self._pos = close + 2
            else:
                return

    def _scan(self) -> Token:
        self._skip_space_and_comments()
        src, start = self._source, self._pos
        if start >= self._stop:
            return Token(Kind.END, "", self._stop, self._stop)
        ch = src[start]
        if ch.isalpha() or ch == "_":
            end = start
            while end < self._stop and (src[end].isalnum() or src[end] == "_"):
                end += 1
            return self._emit(Kind.WORD, src[start:end], start, end)
        if ch.isdigit():
            end = start
            while end < self._stop and (src[end].isdigit() or src[end] == "."):
                end += 1
            return self._emit(Kind.NUMBER, src[start:end], start, end)
        if ch in "`'":
            close = src.find(ch, start + 1, self._stop)
            if close < 0:
                what = "backquoted name" if ch == "`" else "string"
                raise self._error(f"unterminated {what}", start)
            kind = Kind.QUOTED if ch == "`" else Kind.STRING
            return self._emit(kind, src[start + 1 : close], start, close + 1)
        return self._emit(Kind.SYMBOL, ch, start, start + 1)

    def _emit(self, kind: Kind, text: str, start: int, end: int) -> Token:
        self._pos = end
        return Token(kind, text, start, end)
