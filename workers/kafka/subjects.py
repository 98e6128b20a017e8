"""``mvs schemas apply``: register every topic's value schema (``schemas/``) in the schema registry.

Each declared topic with a value schema gets the subject ``<physical topic>-value`` with BACKWARD
compatibility (a consumer with the new schema reads every record already written: what
``schemas/history`` promises mvs's own readers). A local change the registry refuses is reported
with the fields it names: the registry says where (``/fields/3/type/1``), this module says which
field that is (``error``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workers.codec import Codec, get_codec, schema_fingerprint
from workers.config import Settings
from workers.kafka.errors import BusError
from workers.kafka.registry import INCOMPATIBLE, SchemaRegistry, registry_for, value_subject
from workers.topics import topics

COMPATIBILITY = "BACKWARD"
NAMED_KINDS = (None, "record", "error", "enum", "fixed")
# Apicurio's RuleViolationException text: "... list of diff types: [<what> at /fields/3/type, ...]".
_DIFFS = re.compile(r"list of diff types: \[(.*)\]\s*$", re.S)
_AT = re.compile(r"(?:^|,\s*)(.*?) at (/[^\s,\]]*)")


@dataclass(frozen=True)
class SubjectResult:
    subject: str
    record_type: str
    state: str  # "registered" (a new version), "unchanged", "incompatible"
    schema_id: int | None = None
    problem: str | None = None

    def __str__(self) -> str:
        if self.problem:
            return f"{self.subject:<36} {self.state:<12} {self.problem}"
        return f"{self.subject:<36} {self.state:<12} id {self.schema_id}  {self.record_type}"


class SchemasReport(list[SubjectResult]):
    @property
    def incompatible(self) -> list[SubjectResult]:
        return [r for r in self if r.state == "incompatible"]

    def __str__(self) -> str:
        return "\n".join(str(result) for result in self)


def field_path(schema: Any, pointer: str) -> str:
    """The dotted field names a JSON pointer into ``schema`` passes through:
    ``/fields/3/type/1/fields/0/type`` → ``error.code``; the pointer itself if it names no field."""
    node, names = schema, []
    parts = [part for part in pointer.split("/") if part]
    try:
        for part in parts:
            node = node[int(part)] if isinstance(node, list) else node[part]
            # A field has a name and a type; a named type's "type" is its kind (record, enum, fixed).
            is_field = isinstance(node, dict) and "name" in node and node.get("type") not in NAMED_KINDS
            if is_field and part.isdigit():
                names.append(str(node["name"]))
    except (KeyError, IndexError, ValueError, TypeError):
        return pointer
    return ".".join(names) or pointer


def name_fields(message: str, schema: Mapping[str, Any]) -> str:
    """The registry's incompatibility message, each diff prefixed by the field it is about."""
    found = _DIFFS.search(message)
    if not found:
        return message
    diffs = []
    for what, at in _AT.findall(found[1]):
        field = field_path(schema, at)
        # Avro's compatibility check reports READER_FIELD_MISSING_DEFAULT_VALUE as the field's name.
        if what.strip() == field.rpartition(".")[2]:
            what = "added without a default (older records do not have it)"
        diffs.append(f"field {field!r}: {what.strip()}")
    return "; ".join(diffs) or message


def _same(registered: str | None, fingerprint: bytes) -> bool:
    if registered is None:
        return False
    try:
        return schema_fingerprint(json.loads(registered)) == fingerprint
    except Exception:  # a registered schema mvs cannot read: register ours over it
        return False


def apply_subject(registry: SchemaRegistry, subject: str, record_type: str, codec: Codec) -> SubjectResult:
    schema_json = codec.schema_json(record_type)
    existing = registry.registered(subject)
    if existing is not None:
        registry.set_compatibility(subject, COMPATIBILITY)  # before a new version is judged
    try:
        schema_id = registry.id_for(subject, schema_json)
    except BusError as exc:
        if exc.code != str(INCOMPATIBLE):
            raise
        problem = name_fields(str(exc), codec.schema(record_type))
        return SubjectResult(subject, record_type, "incompatible", problem=problem)
    if existing is None:
        registry.set_compatibility(subject, COMPATIBILITY)
    state = "unchanged" if _same(existing, codec.fingerprint(record_type)) else "registered"
    return SubjectResult(subject, record_type, state, schema_id)


def apply_schemas(
    settings: Settings, *, registry: SchemaRegistry | None = None, codec: Codec | None = None
) -> SchemasReport:
    """Register the value schema of every declared topic (templates' instances register on first
    use, by their producers); the report lists each subject, incompatible ones with their fields."""
    registry = registry or registry_for(settings)
    if registry is None:
        raise BusError("no schema registry: set MVS_SCHEMA_REGISTRY_URL", misconfigured=True)
    codec = codec or get_codec()
    report = SchemasReport()
    for spec in sorted(topics().values(), key=lambda s: s.name):
        if spec.value_schema is None:
            continue
        subject = value_subject(settings.topic(spec.name))
        report.append(apply_subject(registry, subject, spec.value_schema, codec))
    return report
