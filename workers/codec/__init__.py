"""Avro records of mvs: schemas in ``schemas/``, single-object encoding (the only fastavro user)."""

from workers.codec.codec import (
    Codec,
    CodecError,
    DecodeError,
    decode,
    encode,
    get_codec,
    schema_fingerprint,
)
from workers.codec.schemas import SchemaError
from workers.records import Record

__all__ = [
    "Codec",
    "CodecError",
    "DecodeError",
    "Record",
    "SchemaError",
    "decode",
    "encode",
    "get_codec",
    "schema_fingerprint",
]
