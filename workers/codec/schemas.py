"""Loading the Avro schemas in ``schemas/``: one named type per file, references by full name.

Each type is turned into a self-contained schema (every named type it uses defined inline at
its first use, referenced by name afterwards): that is what both fastavro and the parsing
canonical form (hence the fingerprint) need. ``schemas/history/`` holds self-contained
schemas of older versions, so records written before a schema change stay readable.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from workers.config import REPO_ROOT

SCHEMA_DIR = REPO_ROOT / "schemas"
HISTORY_DIR = SCHEMA_DIR / "history"
NAMED_KINDS = ("record", "enum", "fixed", "error")
PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})

Json = Any  # a JSON schema fragment: str | list | dict


class SchemaError(ValueError):
    """A schema file is missing, malformed or references an unknown type."""


def full_name(schema: Mapping[str, Any], namespace: str = "") -> str:
    name = str(schema["name"])
    if "." in name:
        return name
    space = str(schema.get("namespace", namespace) or "")
    return f"{space}.{name}" if space else name


def load_definitions(directory: Path = SCHEMA_DIR) -> dict[str, dict[str, Any]]:
    """Raw definitions by full name; each file must be named ``<full name>.avsc``."""
    definitions: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.avsc")):
        try:
            schema = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise SchemaError(f"{path.name}: not JSON: {exc}") from exc
        if not isinstance(schema, dict) or schema.get("type") not in NAMED_KINDS:
            raise SchemaError(f"{path.name}: must hold one named type (record, enum or fixed)")
        name = full_name(schema)
        if path.name != f"{name}.avsc":
            raise SchemaError(f"{path.name}: defines {name}, so it must be named {name}.avsc")
        definitions[name] = schema
    if not definitions:
        raise SchemaError(f"no schemas in {directory}")
    return definitions


def references(schema: Json, namespace: str = "") -> Iterator[str]:
    """Full names of the named types a definition refers to (not those it defines inline)."""
    if isinstance(schema, str):
        if schema not in PRIMITIVES:
            yield schema if "." in schema or not namespace else f"{namespace}.{schema}"
    elif isinstance(schema, list):
        for branch in schema:
            yield from references(branch, namespace)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in NAMED_KINDS:
            namespace = full_name(schema, namespace).rpartition(".")[0]
        if kind in ("record", "error"):
            for field in schema.get("fields", []):
                yield from references(field["type"], namespace)
        elif kind == "array":
            yield from references(schema["items"], namespace)
        elif kind == "map":
            yield from references(schema["values"], namespace)
        elif kind not in NAMED_KINDS:
            yield from references(kind, namespace)


def dependency_order(definitions: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Names ordered so every type comes after the types it references (cycles allowed)."""
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(name: str, via: str) -> None:
        if name not in definitions:
            raise SchemaError(f"{via} references unknown type {name}")
        if state.get(name):
            return  # done, or on the current path (a recursive type: legal in Avro)
        state[name] = "visiting"
        for ref in references(definitions[name]):
            visit(ref, name)
        state[name] = "done"
        order.append(name)

    for name in sorted(definitions):
        visit(name, name)
    return order


def inline(name: str, definitions: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The self-contained schema of ``name``: referenced types defined at first use."""
    defined: set[str] = set()

    def expand(schema: Json, namespace: str) -> Json:
        if isinstance(schema, str):
            if schema in PRIMITIVES:
                return schema
            ref = schema if "." in schema or not namespace else f"{namespace}.{schema}"
            if ref in defined:
                return ref
            if ref not in definitions:
                raise SchemaError(f"{name} references unknown type {ref}")
            return expand(dict(definitions[ref]), "")
        if isinstance(schema, list):
            return [expand(branch, namespace) for branch in schema]
        out = dict(schema)
        kind = out.get("type")
        if kind in NAMED_KINDS:
            own = full_name(out, namespace)
            defined.add(own)
            out["name"] = own
            out.pop("namespace", None)
            namespace = own.rpartition(".")[0]
        if kind in ("record", "error"):
            out["fields"] = [{**field, "type": expand(field["type"], namespace)} for field in out["fields"]]
        elif kind == "array":
            out["items"] = expand(out["items"], namespace)
        elif kind == "map":
            out["values"] = expand(out["values"], namespace)
        elif isinstance(kind, (str, list, dict)) and kind not in NAMED_KINDS and kind not in PRIMITIVES:
            out["type"] = expand(kind, namespace)
        return out

    return dict(expand(name, ""))


def load_history(directory: Path = HISTORY_DIR) -> list[dict[str, Any]]:
    """Self-contained schemas of older versions (written by ``python -m workers.codec freeze``)."""
    if not directory.is_dir():
        return []
    history = []
    for path in sorted(directory.glob("*.avsc")):
        schema = json.loads(path.read_text())
        if not isinstance(schema, dict) or schema.get("type") not in NAMED_KINDS:
            raise SchemaError(f"history/{path.name}: must hold one self-contained named type")
        history.append(schema)
    return history


def dependents(name: str, definitions: Mapping[str, Mapping[str, Any]]) -> set[str]:
    """``name`` and every type whose wire form contains it (directly or not)."""
    found = {name}
    changed = True
    while changed:
        changed = False
        for other, schema in definitions.items():
            if other not in found and found & set(references(schema)):
                found.add(other)
                changed = True
    return found
