"""Codec: schemas, single-object encoding, validation, frozen fixtures, old writer schemas."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from tests.support.paths import AVRO_FIXTURES as FIXTURES
from workers.codec import Codec, CodecError, DecodeError, SchemaError, get_codec, schema_fingerprint
from workers.codec.schemas import SCHEMA_DIR, dependents, load_definitions
from workers.codec.validate import validate, writer_guard

RECORD_TYPES = sorted(p.stem for p in FIXTURES.glob("*.json"))


def sample(name: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / f"{name}.json").read_text()))


def test_every_record_type_has_a_frozen_fixture() -> None:
    names = {n.rpartition(".")[2] for n in get_codec().record_names()}
    assert names == set(RECORD_TYPES)
    assert {
        "DdlEvent",
        "TaskRecord",
        "ManagerCommand",
        "MaintainerCommand",
        "Heartbeat",
        "RunRecord",
    } <= names


@pytest.mark.parametrize("name", RECORD_TYPES)
def test_round_trip(name: str) -> None:
    codec = get_codec()
    data = codec.encode(name, sample(name))
    assert codec.decode(data) == (f"io.mvs.{name}", sample(name))


@pytest.mark.parametrize("name", RECORD_TYPES)
def test_frozen_fixture_still_decodes(name: str) -> None:
    # Fails when a schema change makes records already on the bus unreadable:
    # freeze the old schema first (python -m workers.codec freeze TYPE).
    record_type, record = get_codec().decode((FIXTURES / f"{name}.bin").read_bytes())
    assert record_type == f"io.mvs.{name}"
    assert record == sample(name)


def test_single_object_header() -> None:
    codec = get_codec()
    data = codec.encode("Trigger", {"kind": "ON_DEMAND"})
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == codec.fingerprint("io.mvs.Trigger")


def test_fingerprint_matches_the_avro_reference_vector() -> None:
    # From Avro's share/test/data/schema-tests.txt (a signed Java long, little-endian on the wire).
    schema = {"type": "record", "name": "foo", "fields": [{"name": "f1", "type": "boolean"}]}
    assert int.from_bytes(schema_fingerprint(schema), "little", signed=True) == 7843277075252814651


def test_optional_fields_default_to_null() -> None:
    codec = get_codec()
    _, record = codec.decode(codec.encode("Trigger", {"kind": "ON_DEMAND"}))
    assert record == {"kind": "ON_DEMAND", "interval_ms": None}


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r.update(action="EXPLODE"), "DdlEvent.action: 'EXPLODE' is not one of CREATE_MV|"),
        (lambda r: r.pop("event_id"), "DdlEvent.event_id: missing required field"),
        (lambda r: r.update(colour="red"), "DdlEvent: unknown field(s) colour"),
        (
            lambda r: r["mv"]["trigger"].update(kind="DAILY"),
            "DdlEvent.mv.trigger.kind: 'DAILY' is not one of",
        ),
        (lambda r: r["mv"].update(base_tables=["a", 1]), "DdlEvent.mv.base_tables[1]: 1 is not a string"),
        (lambda r: r.update(issued_at="now"), "DdlEvent.issued_at: 'now' is not a long"),
        (lambda r: r.update(schema_version=2**40), "DdlEvent.schema_version: 1099511627776 is not a int"),
        (lambda r: r.update(mv="x"), "DdlEvent.mv: expected a dict for io.mvs.MvSpec, got str"),
    ],
)
def test_encode_names_the_bad_field(mutate: Any, message: str) -> None:
    record = sample("DdlEvent")
    mutate(record)
    assert message in refusal("DdlEvent", record)


def refusal(record_type: str, record: dict[str, Any]) -> str:
    """The message of the CodecError encoding ``record`` raises."""
    with pytest.raises(CodecError) as exc:
        get_codec().encode(record_type, record)
    return str(exc.value)


def test_map_values_are_checked() -> None:
    record = sample("TaskRecord")
    record["checkpoint"] = {"sales": "17"}
    with pytest.raises(CodecError, match=r"TaskRecord.checkpoint\['sales'\]: '17' is not a long"):
        get_codec().encode("TaskRecord", record)


def test_unknown_and_non_record_types_are_refused() -> None:
    with pytest.raises(CodecError, match="unknown record type"):
        get_codec().encode("Nope", {})
    with pytest.raises(CodecError, match="not a record type"):
        get_codec().encode("TaskState", {})


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xc3\x01\x00", "truncated: 3 bytes"),
        (b"\x01\x01" + bytes(8) + b"\x00", "bad magic 0101"),
        (b"\x00\x01" + bytes(8) + b"\x00", "Confluent wire format (schema id 16777216) but no"),
        (b"\xc3\x01" + bytes(8) + b"\x00", "unknown schema fingerprint 0000000000000000"),
    ],
)
def test_decode_errors(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as exc:
        get_codec().decode(data)
    assert reason in exc.value.reason


def test_truncated_body_and_trailing_bytes() -> None:
    data = get_codec().encode("DdlEvent", sample("DdlEvent"))
    with pytest.raises(DecodeError, match="corrupt or truncated io.mvs.DdlEvent body"):
        get_codec().decode(data[:-5])
    with pytest.raises(DecodeError, match="2 trailing bytes after the io.mvs.DdlEvent body"):
        get_codec().decode(data + b"\x00\x00")


def test_schema_files_follow_the_conventions() -> None:
    for name, schema in load_definitions().items():
        assert schema["namespace"] == "io.mvs" and schema.get("doc"), name
        for field in schema.get("fields", []):
            assert field.get("doc"), f"{name}.{field['name']} has no doc"
            if isinstance(field["type"], list):
                assert field["type"][0] == "null" and field["default"] is None, f"{name}.{field['name']}"


def test_dependents_finds_containing_types() -> None:
    found = dependents("io.mvs.Trigger", load_definitions())
    assert {
        "io.mvs.Trigger",
        "io.mvs.MvSpec",
        "io.mvs.DdlEvent",
        "io.mvs.TaskRecord",
        "io.mvs.ManagerCommand",
    } <= found
    assert "io.mvs.Heartbeat" not in found


def _copy_schemas(tmp_path: Path) -> Path:
    directory = tmp_path / "schemas"
    shutil.copytree(SCHEMA_DIR, directory, ignore=shutil.ignore_patterns("history"))
    return directory


def test_old_writer_schema_in_history_is_read_into_the_current_shape(tmp_path: Path) -> None:
    directory = _copy_schemas(tmp_path)
    old = Codec(directory, None)
    old_bytes = old.encode("MvLogSpec", {"base_table": "sales", "purge_interval_ms": 5})
    # Freeze the old wire form, then add a field (with a default) to the schema.
    history = directory / "history"
    history.mkdir()
    (history / "io.mvs.MvLogSpec.v1.avsc").write_text(json.dumps(old.schema("MvLogSpec")))
    path = directory / "io.mvs.MvLogSpec.avsc"
    schema = json.loads(path.read_text())
    schema["fields"].append({"name": "retain_ms", "type": ["null", "long"], "default": None, "doc": "new"})
    path.write_text(json.dumps(schema))

    without_history = Codec(directory, None)
    with pytest.raises(DecodeError, match="unknown schema fingerprint"):
        without_history.decode(old_bytes)
    new = Codec(directory, history)
    assert new.decode(old_bytes) == (
        "io.mvs.MvLogSpec",
        {"base_table": "sales", "purge_interval_ms": 5, "retain_ms": None},
    )
    assert new.fingerprint("MvLogSpec") != old.fingerprint("MvLogSpec")


def test_schema_loading_errors(tmp_path: Path) -> None:
    directory = _copy_schemas(tmp_path)
    (directory / "io.mvs.Trigger.avsc").rename(directory / "Trigger.avsc")
    with pytest.raises(SchemaError, match="must be named io.mvs.Trigger.avsc"):
        Codec(directory, None)
    (directory / "Trigger.avsc").unlink()
    with pytest.raises(SchemaError, match="references unknown type io.mvs.Trigger"):
        Codec(directory, None)


def _set_path(record: dict[str, Any], path: str, value: object) -> None:
    *parents, last = path.split(".")
    for step in parents:
        record = record[step][0] if isinstance(record[step], list) else record[step]
    record[last] = value


# fastavro's compiled writer on its own writes each of these without complaint (checked when the fast
# path was built): the codec's guard must refuse them, and the message name the field.
@pytest.mark.parametrize(
    ("record_type", "path", "value", "message"),
    [
        ("DdlEvent", "schema_version", True, "DdlEvent.schema_version: True is not a int"),
        ("DdlEvent", "issued_at", False, "DdlEvent.issued_at: False is not a long"),
        ("DdlEvent", "issued_at", 1.5, "DdlEvent.issued_at: 1.5 is not a long"),
        ("DdlEvent", "issued_at", 2.0, "DdlEvent.issued_at: 2.0 is not a long"),
        ("DdlEvent", "schema_version", 2**31, "DdlEvent.schema_version: 2147483648 is not a int"),
        ("DdlResult", "accepted", 1, "DdlResult.accepted: 1 is not a boolean"),
        ("DdlResult", "accepted", "yes", "DdlResult.accepted: 'yes' is not a boolean"),
        ("DdlResult", "accepted", None, "DdlResult.accepted: None is not a boolean"),
        ("DdlResult", "task_id", ("string", "mv:x"), "DdlResult.task_id: ('string', 'mv:x') is not a string"),
        ("TaskRecord", "checkpoint", {"sales": True}, "TaskRecord.checkpoint['sales']: True is not a long"),
        ("Heartbeat", "statuses.epoch", 3.0, "Heartbeat.statuses[0].epoch: 3.0 is not a long"),
        ("Heartbeat", "full", "false", "Heartbeat.full: 'false' is not a boolean"),
        ("Heartbeat", "removed", "mv:a", "Heartbeat.removed: expected a list, got str"),
        ("Heartbeat", "removed", {"mv:a": 1}, "Heartbeat.removed: expected a list, got dict"),
        ("Heartbeat", "removed", {"mv:a"}, "Heartbeat.removed: expected a list, got set"),
    ],
)
def test_what_the_compiled_writer_would_accept_is_refused(
    record_type: str, path: str, value: object, message: str
) -> None:
    record = sample(record_type)
    _set_path(record, path, value)
    assert message in refusal(record_type, record)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r["statuses"][0].update(colour="red"), "Heartbeat.statuses[0]: unknown field(s) colour"),
        (lambda r: r["statuses"][0].pop("epoch"), "Heartbeat.statuses[0].epoch: missing required field"),
        (lambda r: r["statuses"][0].update(task_id=7), "Heartbeat.statuses[0].task_id: 7 is not a string"),
        (
            lambda r: r["statuses"][0].update(state="LATE"),
            "Heartbeat.statuses[0].state: 'LATE' is not one of",
        ),
        (
            lambda r: r["statuses"][0]["last_run"].update(x=1),
            "Heartbeat.statuses[0].last_run: unknown field(s) x",
        ),
        (
            lambda r: r["statuses"][0]["last_run"].update(started_at=True),
            "Heartbeat.statuses[0].last_run.started_at: True is not a long",
        ),
        (
            lambda r: r["statuses"][0].update(error={"code": 1}),
            "Heartbeat.statuses[0].error.message: missing required field",
        ),
        (lambda r: r.update(removed=[b"mv:a"]), "Heartbeat.removed[0]: b'mv:a' is not a string"),
        (lambda r: r["statuses"][0].update(checkpoint={1: 2}), "Heartbeat.statuses[0].checkpoint: map key 1"),
    ],
)
def test_what_the_compiled_writer_refuses_is_named_as_before(mutate: Any, message: str) -> None:
    record = sample("Heartbeat")
    mutate(record)
    assert message in refusal("Heartbeat", record)


def test_values_the_fast_path_leaves_to_the_validator_still_encode() -> None:
    # Valid Avro the guard does not take on trust (an int subclass, a read-only mapping): the
    # validator accepts them, and they encode exactly as their plain equivalents.
    class Epoch(int):
        pass

    codec = get_codec()
    plain = sample("MaintainerCommand")
    unusual = MappingProxyType({**plain, "epoch": Epoch(plain["epoch"])})
    assert codec.encode("MaintainerCommand", unusual) == codec.encode("MaintainerCommand", plain)


def test_writer_guard_of_recursive_types_and_wide_unions() -> None:
    node = {
        "type": "record",
        "name": "io.mvs.Node",
        "fields": [
            {"name": "value", "type": "long"},
            {"name": "next", "type": ["null", "io.mvs.Node"], "default": None},
            {"name": "tag", "type": ["null", "string", "long"], "default": None},
        ],
    }
    guard = writer_guard(node)
    assert guard({"value": 1, "next": {"value": 2, "next": None}})
    assert not guard({"value": 1, "next": {"value": True, "next": None}})  # checked at any depth
    # A union of several types: the writer picks the branch by its own rules, so the validator decides.
    assert not guard({"value": 1, "tag": "x"})
    assert validate({"value": 1, "tag": "x"}, node, "Node") is None
