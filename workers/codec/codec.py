"""Avro single-object encoding of mvs records (the only place that imports fastavro).

Wire form (Avro spec, "Single-object encoding"): ``C3 01`` + the 8-byte little-endian
CRC-64-AVRO fingerprint of the writer schema's parsing canonical form + the binary body.
The fingerprint names the writer schema, so a reader decodes records written with any
schema it knows: the current ones and those in ``schemas/history/`` (resolved to the
current shape, so role code only ever sees current dicts).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint as avro_fingerprint
from fastavro.schema import to_parsing_canonical_form

from workers.codec.schemas import (
    HISTORY_DIR,
    SCHEMA_DIR,
    dependency_order,
    full_name,
    inline,
    load_definitions,
    load_history,
)
from workers.codec.validate import validate

MAGIC = b"\xc3\x01"
HEADER_SIZE = len(MAGIC) + 8
NAMESPACE = "io.mvs"


class CodecError(ValueError):
    """A record cannot be encoded (unknown type, or it does not match its schema)."""


class DecodeError(ValueError):
    """Bytes that are not a readable mvs record; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class _Writer:
    name: str
    schema: dict[str, Any]  # self-contained JSON schema
    parsed: Any  # fastavro's parsed form of ``schema``
    fingerprint: bytes


def schema_fingerprint(schema: Mapping[str, Any]) -> bytes:
    """CRC-64-AVRO of the parsing canonical form, in wire (little-endian) byte order."""
    return bytes.fromhex(avro_fingerprint(to_parsing_canonical_form(dict(schema)), "CRC-64-AVRO"))


def _writer(schema: dict[str, Any]) -> _Writer:
    return _Writer(full_name(schema), schema, parse_schema(schema), schema_fingerprint(schema))


class Codec:
    """Every schema in ``schema_dir`` (plus old versions in ``history_dir``), parsed once."""

    def __init__(self, schema_dir: Path = SCHEMA_DIR, history_dir: Path | None = HISTORY_DIR) -> None:
        self.definitions = load_definitions(schema_dir)
        self._current: dict[str, _Writer] = {
            name: _writer(inline(name, self.definitions)) for name in dependency_order(self.definitions)
        }
        self._by_fingerprint: dict[bytes, _Writer] = {w.fingerprint: w for w in self._current.values()}
        for old in load_history(history_dir) if history_dir else []:
            writer = _writer(old)
            if writer.name not in self._current:
                raise CodecError(f"history schema {writer.name} has no current version to be read as")
            self._by_fingerprint.setdefault(writer.fingerprint, writer)

    @property
    def names(self) -> tuple[str, ...]:
        """Full names of the current types, dependencies first."""
        return tuple(self._current)

    def record_names(self) -> tuple[str, ...]:
        return tuple(n for n, w in self._current.items() if w.schema["type"] in ("record", "error"))

    def resolve(self, record_type: str) -> str:
        """Full name of a type given by full or short name (``DdlEvent`` → ``io.mvs.DdlEvent``)."""
        name = record_type if "." in record_type else f"{NAMESPACE}.{record_type}"
        if name not in self._current:
            raise CodecError(f"unknown record type {record_type!r}")
        return name

    def schema(self, record_type: str) -> dict[str, Any]:
        """The self-contained JSON schema currently written for ``record_type``."""
        return self._current[self.resolve(record_type)].schema

    def fingerprint(self, record_type: str) -> bytes:
        return self._current[self.resolve(record_type)].fingerprint

    def validate(self, record_type: str, record: object) -> None:
        """Raise ``CodecError`` naming the first field that does not match the schema."""
        name = self.resolve(record_type)
        problem = validate(record, self._current[name].schema, name.rpartition(".")[2])
        if problem:
            raise CodecError(f"invalid {name}: {problem}")

    def encode(self, record_type: str, record: Mapping[str, Any]) -> bytes:
        name = self.resolve(record_type)
        writer = self._current[name]
        if writer.schema["type"] not in ("record", "error"):
            raise CodecError(f"{name} is not a record type; only records are encoded on their own")
        self.validate(name, record)
        out = io.BytesIO()
        out.write(MAGIC)
        out.write(writer.fingerprint)
        # Not strict: validate() already refused unknown and missing required fields, and
        # fastavro writes an absent field's default (null) then.
        schemaless_writer(out, writer.parsed, record)
        return out.getvalue()

    def decode(self, data: bytes) -> tuple[str, dict[str, Any]]:
        """(full type name, record in the current shape); ``DecodeError`` says why it is unreadable."""
        if len(data) < HEADER_SIZE:
            raise DecodeError(f"truncated: {len(data)} bytes is shorter than the {HEADER_SIZE}-byte header")
        if data[:2] != MAGIC:
            raise DecodeError(f"bad magic {data[:2].hex()}: not Avro single-object encoding (c301)")
        fp = data[2:HEADER_SIZE]
        writer = self._by_fingerprint.get(fp)
        if writer is None:
            raise DecodeError(f"unknown schema fingerprint {fp.hex()}")
        current = self._current[writer.name]
        body = io.BytesIO(data[HEADER_SIZE:])
        try:
            reader = None if current is writer else current.parsed
            record = schemaless_reader(body, writer.parsed, reader)
        except Exception as exc:  # fastavro raises EOFError, ValueError, IndexError... on bad bodies
            problem = f"{type(exc).__name__}: {exc}"
            raise DecodeError(f"corrupt or truncated {writer.name} body: {problem}") from exc
        if body.tell() != len(data) - HEADER_SIZE:
            extra = len(data) - HEADER_SIZE - body.tell()
            raise DecodeError(f"{extra} trailing bytes after the {writer.name} body")
        if not isinstance(record, dict):
            raise DecodeError(f"{writer.name} is not a record type")
        return writer.name, record


_lock = threading.Lock()
_codec: Codec | None = None


def get_codec() -> Codec:
    """The process-wide codec over ``schemas/``, loaded on first use."""
    global _codec
    with _lock:
        if _codec is None:
            _codec = Codec()
        return _codec


def encode(record_type: str, record: Mapping[str, Any]) -> bytes:
    return get_codec().encode(record_type, record)


def decode(data: bytes) -> tuple[str, dict[str, Any]]:
    return get_codec().decode(data)
