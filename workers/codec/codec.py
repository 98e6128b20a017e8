"""Avro encodings of mvs records (the only place that imports fastavro).

Two wire forms, both read by ``decode``:

- Single-object encoding (Avro spec; the default): ``C3 01`` + the 8-byte little-endian
  CRC-64-AVRO fingerprint of the writer schema's parsing canonical form + the binary body.
  The fingerprint names the writer schema, so a reader decodes records written with any
  schema it knows: the current ones and those in ``schemas/history/`` (resolved to the
  current shape, so role code only ever sees current dicts).
- The Confluent wire format (with a schema registry): ``00`` + the 4-byte big-endian schema id
  the registry gave the writer schema + the same body. The codec only frames: the id comes from
  the caller (``workers.kafka.registry``), and so does the writer schema of an id it reads
  (a ``SchemaLookup``); the schema is then resolved to the current shape like a fingerprint's.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Mapping
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
from workers.codec.validate import Guard, validate, writer_guard

# A record as role code holds it: the decoded form of an Avro record, field name -> value.
from workers.records import Record

MAGIC = b"\xc3\x01"
HEADER_SIZE = len(MAGIC) + 8
NAMESPACE = "io.mvs"
CONFLUENT_MAGIC = b"\x00"
CONFLUENT_HEADER_SIZE = len(CONFLUENT_MAGIC) + 4
# The writer schema (JSON text) a registry holds under a schema id; raises if it cannot say.
SchemaLookup = Callable[[int], str]


def confluent_header(schema_id: int) -> bytes:
    return CONFLUENT_MAGIC + schema_id.to_bytes(4, "big")


def confluent_schema_id(data: bytes) -> int | None:
    """The schema id of Confluent-framed bytes; None for any other form."""
    if len(data) < CONFLUENT_HEADER_SIZE or data[:1] != CONFLUENT_MAGIC:
        return None
    return int.from_bytes(data[1:CONFLUENT_HEADER_SIZE], "big")


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
    guard: Guard  # what fastavro's writer does not check itself (see validate.writer_guard)
    header: bytes  # MAGIC + fingerprint
    is_record: bool


def schema_fingerprint(schema: Mapping[str, Any]) -> bytes:
    """CRC-64-AVRO of the parsing canonical form, in wire (little-endian) byte order."""
    return bytes.fromhex(avro_fingerprint(to_parsing_canonical_form(dict(schema)), "CRC-64-AVRO"))


def _writer(schema: dict[str, Any]) -> _Writer:
    fingerprint = schema_fingerprint(schema)
    return _Writer(
        name=full_name(schema),
        schema=schema,
        parsed=parse_schema(schema),
        fingerprint=fingerprint,
        guard=writer_guard(schema),
        header=MAGIC + fingerprint,
        is_record=schema["type"] in ("record", "error"),
    )


def _write(header: bytes, writer: _Writer, record: Mapping[str, Any]) -> bytes:
    """fastavro's compiled writer, as strict as it goes: unknown fields and missing fields without
    a default raise, and a tuple is not taken as a union branch name (tuple notation)."""
    out = io.BytesIO()
    out.write(header)
    schemaless_writer(out, writer.parsed, record, strict_allow_default=True, disable_tuple_notation=True)
    return out.getvalue()


class Codec:
    """Every schema in ``schema_dir`` (plus old versions in ``history_dir``), parsed once."""

    def __init__(self, schema_dir: Path = SCHEMA_DIR, history_dir: Path | None = HISTORY_DIR) -> None:
        self.definitions = load_definitions(schema_dir)
        self._current: dict[str, _Writer] = {
            name: _writer(inline(name, self.definitions)) for name in dependency_order(self.definitions)
        }
        # Short and full names, for encode's lookup.
        self._by_name = {**self._current, **{n.rpartition(".")[2]: w for n, w in self._current.items()}}
        self._by_fingerprint: dict[bytes, _Writer] = {w.fingerprint: w for w in self._current.values()}
        for old in load_history(history_dir) if history_dir else []:
            writer = _writer(old)
            if writer.name not in self._current:
                raise CodecError(f"history schema {writer.name} has no current version to be read as")
            self._by_fingerprint.setdefault(writer.fingerprint, writer)
        # Decoding looks the whole header up at once: (writer, reader schema or None if the same).
        self._by_header: dict[bytes, tuple[_Writer, Any]] = {
            MAGIC + fp: (w, None if self._current[w.name] is w else self._current[w.name].parsed)
            for fp, w in self._by_fingerprint.items()
        }
        # Writer schemas a registry returned (by JSON text), resolved like the headers above.
        self._by_registry_schema: dict[str, tuple[_Writer, Any]] = {}
        self._json = {name: json.dumps(w.schema) for name, w in self._current.items()}

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

    def schema_json(self, record_type: str) -> str:
        """``schema`` as the JSON text a registry is given (the same str object every call)."""
        return self._json[self.resolve(record_type)]

    def fingerprint(self, record_type: str) -> bytes:
        return self._current[self.resolve(record_type)].fingerprint

    def validate(self, record_type: str, record: object) -> None:
        """Raise ``CodecError`` naming the first field that does not match the schema."""
        name = self.resolve(record_type)
        problem = validate(record, self._current[name].schema, name.rpartition(".")[2])
        if problem:
            raise CodecError(f"invalid {name}: {problem}")

    def encode(self, record_type: str, record: Mapping[str, Any], schema_id: int | None = None) -> bytes:
        """Single-object bytes of ``record`` (Confluent-framed with ``schema_id``, the id a registry
        gave ``schema_json(record_type)``); ``CodecError`` names the first field that does not
        match the schema. Fast path: the guard, then fastavro's compiled writer; the validator
        runs only when one of them refuses the record, to say why."""
        writer = self._by_name.get(record_type) or self._current[self.resolve(record_type)]
        if not writer.is_record:
            raise CodecError(f"{writer.name} is not a record type; only records are encoded on their own")
        header = writer.header if schema_id is None else confluent_header(schema_id)
        failure: Exception | None = None
        if writer.guard(record):
            try:
                return _write(header, writer, record)
            except Exception as exc:  # fastavro raises TypeError, ValueError, AttributeError...
                failure = exc
        self.validate(writer.name, record)
        if failure is None:  # the guard is stricter than the schema (a Mapping, an int subclass)
            try:
                return _write(header, writer, record)
            except Exception as exc:
                failure = exc
        raise CodecError(f"invalid {writer.name}: {type(failure).__name__}: {failure}") from failure

    def decode(self, data: bytes, schemas: SchemaLookup | None = None) -> tuple[str, Record]:
        """(full type name, record in the current shape); ``DecodeError`` says why it is unreadable.
        Confluent-framed bytes need ``schemas`` (what raises from it propagates: not the record's fault)."""
        found = self._by_header.get(data[:HEADER_SIZE])
        start = HEADER_SIZE
        if found is None:
            schema_id = confluent_schema_id(data)
            if schema_id is None:
                raise DecodeError(self._unreadable_header(data))
            found, start = self._registry_writer(schema_id, schemas), CONFLUENT_HEADER_SIZE
        writer, reader = found
        body = io.BytesIO(data)
        body.seek(start)
        try:
            record = schemaless_reader(body, writer.parsed, reader)
        except Exception as exc:  # fastavro raises EOFError, ValueError, IndexError... on bad bodies
            problem = f"{type(exc).__name__}: {exc}"
            raise DecodeError(f"corrupt or truncated {writer.name} body: {problem}") from exc
        if body.tell() != len(data):
            raise DecodeError(f"{len(data) - body.tell()} trailing bytes after the {writer.name} body")
        if not isinstance(record, dict):
            raise DecodeError(f"{writer.name} is not a record type")
        return writer.name, record

    def _registry_writer(self, schema_id: int, schemas: SchemaLookup | None) -> tuple[_Writer, Any]:
        """(writer, reader or None) of a registry's schema id: a known fingerprint's when the
        registry's schema is one this codec knows, else parsed once and read as the current type."""
        if schemas is None:
            raise DecodeError(
                f"Confluent wire format (schema id {schema_id}) but no schema registry is configured"
                " (MVS_SCHEMA_REGISTRY_URL)"
            )
        text = schemas(schema_id)
        found = self._by_registry_schema.get(text)
        if found is not None:
            return found
        try:
            schema = json.loads(text)
            fingerprint = schema_fingerprint(schema)
        except Exception as exc:  # not JSON, or not an Avro schema fastavro can canonicalize
            raise DecodeError(f"schema id {schema_id}: the registry's schema is unreadable: {exc}") from exc
        found = self._by_header.get(MAGIC + fingerprint)
        if found is None:
            name = full_name(schema) if isinstance(schema, dict) and "name" in schema else "?"
            if name not in self._current:
                raise DecodeError(f"schema id {schema_id} is {name}, not an mvs record type")
            try:
                writer = _writer(schema)
            except Exception as exc:
                raise DecodeError(f"schema id {schema_id}: cannot parse {name}: {exc}") from exc
            found = (writer, self._current[name].parsed)
        self._by_registry_schema[text] = found
        return found

    @staticmethod
    def _unreadable_header(data: bytes) -> str:
        if len(data) < HEADER_SIZE:
            return f"truncated: {len(data)} bytes is shorter than the {HEADER_SIZE}-byte header"
        if data[:2] != MAGIC:
            return f"bad magic {data[:2].hex()}: not Avro single-object encoding (c301)"
        return f"unknown schema fingerprint {data[2:HEADER_SIZE].hex()}"


_lock = threading.Lock()
_codec: Codec | None = None


def get_codec() -> Codec:
    """The process-wide codec over ``schemas/``, loaded on first use."""
    global _codec
    with _lock:
        if _codec is None:
            _codec = Codec()
        return _codec


def encode(record_type: str, record: Mapping[str, Any], schema_id: int | None = None) -> bytes:
    return get_codec().encode(record_type, record, schema_id)


def decode(data: bytes, schemas: SchemaLookup | None = None) -> tuple[str, Record]:
    return get_codec().decode(data, schemas)
