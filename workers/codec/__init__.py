"""Avro records of mvs: schemas in ``schemas/``, single-object encoding or the Confluent wire format
(the only fastavro user)."""

from workers.codec.codec import (
    Codec,
    CodecError,
    DecodeError,
    SchemaLookup,
    confluent_schema_id,
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
    "SchemaLookup",
    "confluent_schema_id",
    "decode",
    "encode",
    "get_codec",
    "schema_fingerprint",
]
