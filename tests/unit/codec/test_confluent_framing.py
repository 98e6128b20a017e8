"""The Confluent wire format in the codec: framing, writer schemas given by id, old versions, errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.paths import AVRO_FIXTURES as FIXTURES
from workers.codec import DecodeError, confluent_schema_id, get_codec
from workers.codec.schemas import HISTORY_DIR


def sample(name: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / f"{name}.json").read_text()))


def test_framing_is_magic_zero_then_the_big_endian_id_then_the_same_body() -> None:
    codec = get_codec()
    single = codec.encode("DdlEvent", sample("DdlEvent"))
    framed = codec.encode("DdlEvent", sample("DdlEvent"), schema_id=0x01020304)
    assert framed[:5] == b"\x00\x01\x02\x03\x04"
    assert framed[5:] == single[10:]  # only the header differs
    assert confluent_schema_id(framed) == 0x01020304
    assert confluent_schema_id(single) is None and confluent_schema_id(b"\x00\x01") is None


def test_a_framed_record_decodes_with_the_schema_its_id_names() -> None:
    codec = get_codec()
    asked: list[int] = []

    def lookup(schema_id: int) -> str:
        asked.append(schema_id)
        return codec.schema_json("TaskRecord")

    data = codec.encode("TaskRecord", sample("TaskRecord"), schema_id=7)
    assert codec.decode(data, lookup) == ("io.mvs.TaskRecord", sample("TaskRecord"))
    assert asked == [7]


def test_a_registry_schema_formatted_differently_is_still_the_known_writer() -> None:
    codec = get_codec()
    pretty = json.dumps(json.loads(codec.schema_json("Heartbeat")), indent=4, sort_keys=True)
    data = codec.encode("Heartbeat", sample("Heartbeat"), schema_id=3)
    assert codec.decode(data, lambda _: pretty) == ("io.mvs.Heartbeat", sample("Heartbeat"))


def test_an_older_writer_schema_from_the_registry_is_read_into_the_current_shape() -> None:
    # The frozen TaskRecord fixture was written with an older schema (schemas/history): the same
    # body under a registry id whose schema is that old one decodes like the single-object record.
    codec = get_codec()
    frozen = (FIXTURES / "TaskRecord.bin").read_bytes()
    old = HISTORY_DIR / f"io.mvs.TaskRecord.{frozen[2:10].hex()}.avsc"
    assert frozen[2:10] != codec.fingerprint("TaskRecord") and old.exists()
    data = b"\x00" + (11).to_bytes(4, "big") + frozen[10:]
    decoded = codec.decode(data, lambda _: old.read_text())
    assert decoded == codec.decode(frozen) == ("io.mvs.TaskRecord", sample("TaskRecord"))


@pytest.mark.parametrize(
    ("schema_text", "reason"),
    [
        (
            '{"type": "record", "name": "x.Other", "fields": []}',
            "schema id 5 is x.Other, not an mvs record type",
        ),
        ("not json", "schema id 5: the registry's schema is unreadable"),
    ],
)
def test_a_schema_id_that_is_not_an_mvs_type_is_undecodable(schema_text: str, reason: str) -> None:
    data = b"\x00\x00\x00\x00\x05" + b"\x02"
    with pytest.raises(DecodeError) as refused:
        get_codec().decode(data, lambda _: schema_text)
    assert reason in refused.value.reason


def test_what_the_lookup_raises_is_not_turned_into_a_decode_error() -> None:
    # A registry that is away is not the record's fault: the caller reads it again later.
    data = get_codec().encode("DdlResult", sample("DdlResult"), schema_id=9)

    def away(_: int) -> str:
        raise ConnectionError("registry away")

    with pytest.raises(ConnectionError):
        get_codec().decode(data, away)
