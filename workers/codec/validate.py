"""Checking a Python value against a self-contained Avro schema.

Two checks. ``writer_guard`` compiles, once per schema, the few checks fastavro's compiled writer
does not make itself (it writes ``True`` or ``1.5`` as a long, 2**40 as an int, ``"abc"`` as an
array of strings, truthiness as a boolean): guard plus writer refuse every record ``validate``
refuses, at a fraction of its cost. ``validate`` walks the schema and names the bad field
("TaskRecord.mv.trigger.kind: 'DAILY' is not one of EVERY|ON_CHANGE|..."): the codec runs it only
when the fast path refused a record, to say why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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


Guard = Callable[[Any], bool]
_MISSING = object()
# What the writer leaves unchecked per primitive (None: it refuses every wrong value itself).
# ``type(v) is int`` leaves out bool (and int subclasses, which then take the validator's path).
_PRIMITIVE_GUARDS: dict[str, Guard | None] = {
    "null": lambda v: v is None,
    "boolean": lambda v: v is True or v is False,
    "int": lambda v: type(v) is int and INT_RANGE[0] <= v <= INT_RANGE[1],
    "long": lambda v: type(v) is int and LONG_RANGE[0] <= v <= LONG_RANGE[1],
    "float": lambda v: type(v) is float or type(v) is int,
    "double": lambda v: type(v) is float or type(v) is int,
    "bytes": lambda v: type(v) is bytes or type(v) is bytearray,
    "string": None,  # the writer raises TypeError for anything but str
}


def writer_guard(schema: Any) -> Guard:
    """A check that, with fastavro's writer (``strict_allow_default``, ``disable_tuple_notation``),
    refuses what ``validate`` refuses. Stricter where that is cheaper (a dict, not any Mapping): a
    value it refuses is looked at by ``validate``, which has the last word."""
    named: dict[str, Any] = {}
    _collect(schema, named)
    guard = _GuardCompiler(named).compile(schema)
    return guard if guard is not None else lambda v: True


class _GuardCompiler:
    def __init__(self, named: dict[str, Any]) -> None:
        self._named = named
        self._records: dict[str, Guard | None] = {}

    def compile(self, schema: Any) -> Guard | None:
        if isinstance(schema, str):
            if schema in self._named:
                return self.compile(self._named[schema])
            return _PRIMITIVE_GUARDS[schema]
        if isinstance(schema, list):
            return self._union(schema)
        kind = schema["type"]
        if kind in ("record", "error"):
            return self._record(schema)
        if kind == "enum":
            return None  # the writer raises ValueError for a symbol not in the list
        if kind == "array":
            return _sequence_of(self.compile(schema["items"]))
        if kind == "map":
            return _dict_of(self.compile(schema["values"]))  # keys: the writer refuses non-str
        if kind == "fixed":
            return _PRIMITIVE_GUARDS["bytes"]  # the writer checks the size
        return self.compile(kind)  # {"type": "long", ...} and similar wrappers

    def _union(self, branches: list[Any]) -> Guard | None:
        others = [b for b in branches if b != "null"]
        if len(others) != 1:
            # The writer picks among several branches by its own rules: leave those to validate().
            return lambda v: False
        inner = self.compile(others[0])
        if inner is None or len(branches) == 1:
            return inner  # the writer refuses a value matching neither null nor the branch
        return lambda v: v is None or inner(v)

    def _record(self, schema: Mapping[str, Any]) -> Guard | None:
        name = str(schema["name"])
        if name in self._records:
            compiled = self._records[name]
            # None: still being compiled (a field of its own type): look it up when called.
            return compiled or (lambda v: (self._records[name] or _is_dict)(v))
        self._records[name] = None
        fields: list[tuple[str, Guard]] = []
        for field in schema["fields"]:
            guard = self.compile(field["type"])
            if guard is not None:
                fields.append((field["name"], guard))

        def record(value: Any) -> bool:
            # Unknown and missing fields: the writer refuses them (``strict_allow_default``).
            if type(value) is not dict:
                return False
            for name, guard in fields:
                item = value.get(name, _MISSING)
                if item is not _MISSING and not guard(item):
                    return False
            return True

        self._records[name] = record
        return record


def _is_dict(value: Any) -> bool:
    return type(value) is dict


def _sequence_of(items: Guard | None) -> Guard:
    if items is None:
        return lambda v: type(v) is list or type(v) is tuple
    return lambda v: (type(v) is list or type(v) is tuple) and all(map(items, v))


def _dict_of(values: Guard | None) -> Guard:
    if values is None:
        return _is_dict
    return lambda v: type(v) is dict and all(map(values, v.values()))
