"""Checking a Python value against a self-contained Avro schema, with a path-named message.

fastavro's own validation reports whole schemas; role code needs "TaskRecord.mv.trigger.kind:
'DAILY' is not one of EVERY|ON_CHANGE|...", so this walks the schema itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

INT_RANGE = (-(2**31), 2**31 - 1)
LONG_RANGE = (-(2**63), 2**63 - 1)


def _is_int(value: object, bounds: tuple[int, int]) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and bounds[0] <= value <= bounds[1]


def _primitive(value: object, kind: str) -> bool:
    checks: dict[str, bool] = {
        "null": value is None,
        "boolean": isinstance(value, bool),
        "int": _is_int(value, INT_RANGE),
        "long": _is_int(value, LONG_RANGE),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "double": isinstance(value, (int, float)) and not isinstance(value, bool),
        "string": isinstance(value, str),
        "bytes": isinstance(value, (bytes, bytearray)),
    }
    return checks[kind]


def _describe(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "|".join(_describe(s) for s in schema)
    kind = schema["type"]
    return str(schema["name"]) if kind in ("record", "enum", "fixed", "error") else str(kind)


def validate(value: object, schema: Any, path: str, named: dict[str, Any] | None = None) -> str | None:
    """None if ``value`` matches ``schema``, else "<path>: <what is wrong>"."""
    if named is None:
        # A later reference may point at a definition inside a branch this value skips (null).
        named = {}
        _collect(schema, named)
    if isinstance(schema, str):
        if schema in named:
            return validate(value, named[schema], path, named)
        return None if _primitive(value, schema) else f"{path}: {value!r} is not a {schema}"
    if isinstance(schema, list):
        return _union(value, schema, path, named)
    kind = schema["type"]
    if kind in ("record", "error"):
        return _record(value, schema, path, named)
    if kind == "enum":
        if isinstance(value, str) and value in schema["symbols"]:
            return None
        return f"{path}: {value!r} is not one of {'|'.join(schema['symbols'])}"
    if kind == "array":
        if not isinstance(value, (list, tuple)):
            return f"{path}: expected a list, got {type(value).__name__}"
        for i, item in enumerate(value):
            problem = validate(item, schema["items"], f"{path}[{i}]", named)
            if problem:
                return problem
        return None
    if kind == "map":
        if not isinstance(value, Mapping):
            return f"{path}: expected a dict, got {type(value).__name__}"
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path}: map key {key!r} is not a string"
            problem = validate(item, schema["values"], f"{path}[{key!r}]", named)
            if problem:
                return problem
        return None
    if kind == "fixed":
        ok = isinstance(value, (bytes, bytearray)) and len(value) == schema["size"]
        return None if ok else f"{path}: expected {schema['size']} bytes"
    return validate(value, kind, path, named)  # {"type": "long", ...} and similar wrappers


def _collect(schema: Any, named: dict[str, Any]) -> None:
    if isinstance(schema, list):
        for branch in schema:
            _collect(branch, named)
    elif isinstance(schema, dict):
        kind = schema["type"]
        if kind in ("record", "error", "enum", "fixed"):
            named.setdefault(schema["name"], schema)
        for field in schema.get("fields", []) if kind in ("record", "error") else []:
            _collect(field["type"], named)
        for key in ("items", "values"):
            if key in schema:
                _collect(schema[key], named)
        if not isinstance(kind, str):
            _collect(kind, named)


def _record(value: object, schema: Mapping[str, Any], path: str, named: dict[str, Any]) -> str | None:
    if not isinstance(value, Mapping):
        return f"{path}: expected a dict for {schema['name']}, got {type(value).__name__}"
    fields = {field["name"]: field for field in schema["fields"]}
    unknown = sorted(str(k) for k in value if k not in fields)
    if unknown:
        return f"{path}: unknown field(s) {', '.join(unknown)}"
    for name, field in fields.items():
        if name not in value:
            if "default" in field:
                continue
            return f"{path}.{name}: missing required field"
        problem = validate(value[name], field["type"], f"{path}.{name}", named)
        if problem:
            return problem
    return None


def _union(value: object, branches: list[Any], path: str, named: dict[str, Any]) -> str | None:
    problems = [validate(value, branch, path, named) for branch in branches]
    if None in problems:
        return None
    if value is not None:
        # An optional field: the error inside the one non-null branch is the useful one.
        real = [p for b, p in zip(branches, problems, strict=True) if b != "null"]
        if len(real) == 1:
            return real[0]
    return f"{path}: {value!r} matches none of {_describe(branches)}"
