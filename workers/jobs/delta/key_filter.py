"""Filters that narrow a table to the rows a set of keys can match, in a form Delta skips data files by
(their min/max statistics): the keys' values as IN lists when they are few, else the ranges they span.

A filter selects a superset of the rows NULL-safely equal to some key row, so the caller still
matches exactly afterwards (a join, a MERGE condition): what it saves is reading and rewriting the
files no key can be in. In a MERGE's ON clause a predicate on the target alone is what Delta prunes
the target's files by, so a run's MERGE touches the files of its keys, not every file of the MV.
Only columns whose type keeps values exact as literals are narrowed (floating point is not).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DateType, DecimalType, IntegralType, StringType, StructType

from workers.jobs.spark.columns import col, q

# Key types whose values survive the trip through the driver exactly as literals.
LITERAL_TYPES = (IntegralType, StringType, DecimalType, DateType)


def _ref(alias: str | None, name: str) -> Column:
    return col(alias, name) if alias else F.col(q(name))


def among(reference: str, values: Collection[object], dtype: DataType) -> Column:
    """``reference`` (a column as Spark SQL text, of ``dtype``: one of ``LITERAL_TYPES``) ``IN (values)``,
    ``OR … IS NULL`` for a NULL value. One SQL expression, parsed in one call however many values: a
    literal Column per value costs a gateway round trip each, and a run lists thousands of keys."""
    present = [sql_literal(dtype, v) for v in values if v is not None]
    found = F.expr(f"{reference} IN ({', '.join(present)})") if present else F.lit(False)
    return found | F.expr(f"{reference} IS NULL") if None in values else found


# Integer literals typed as their column (no cast on the column, which Delta's file skipping needs).
_INTEGER_SUFFIX = {"tinyint": "Y", "smallint": "S", "int": "", "bigint": "L"}


def sql_literal(dtype: DataType, value: object) -> str:
    """``value`` (not None) as a Spark SQL literal of ``dtype`` (one of ``LITERAL_TYPES``), exactly."""
    if isinstance(dtype, IntegralType):
        return f"{int(value)}{_INTEGER_SUFFIX[dtype.simpleString()]}"  # type: ignore[call-overload]
    if isinstance(dtype, StringType):  # backslash escapes (Spark's default string literals)
        return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(dtype, DateType):
        assert isinstance(value, date)
        return f"DATE'{value.isoformat()}'"
    assert isinstance(value, Decimal) and isinstance(dtype, DecimalType)
    return f"CAST('{value:f}' AS {dtype.simpleString()})"


@dataclass(frozen=True)
class _Narrowed:
    """One column's part of a filter: its values (an IN list) or the range they span."""

    column: str
    dtype: DataType
    values: frozenset[object] | None = None  # None: the range low..high (NULLs when ``nulls``)
    low: object = None
    high: object = None
    nulls: bool = False

    def on(self, alias: str | None) -> Column:
        column = _ref(alias, self.column)
        if self.values is not None:
            return among(f"{alias}.{q(self.column)}" if alias else q(self.column), self.values, self.dtype)
        if self.low is None:  # every key value is NULL
            return column.isNull()
        inside = column.between(F.lit(self.low).cast(self.dtype), F.lit(self.high).cast(self.dtype))
        return inside | column.isNull() if self.nulls else inside


@dataclass(frozen=True)
class KeyFilter:
    """A filter on a table's columns, computed once from the keys, usable under any alias."""

    parts: tuple[_Narrowed, ...]
    # Every pair narrowed: the filter alone finds the IN-listed rows, no join is needed to narrow.
    complete: bool

    def on(self, alias: str | None = None) -> Column:
        """The predicate on the table's columns (``alias.column`` when ``alias`` is given)."""
        return reduce(lambda a, b: a & b, [p.on(alias) for p in self.parts])


def key_filter(
    schema: StructType,
    pairs: Sequence[tuple[str, str]],
    keys: DataFrame,
    *,
    limit: int,
    ranges: bool = False,
    rows: int | None = None,
) -> KeyFilter | None:
    """A filter on the columns ``f`` of a table of ``schema``, true for every row NULL-safely equal on
    all pairs ``(f, k)`` to a row of ``keys``: IN lists of the values when ``keys`` has at most
    ``limit`` rows (``keys`` held on the driver: no Spark job); else, with ``ranges``, each column
    between its smallest and largest key value (one Spark job); else None. Pairs whose column type
    is not literal-exact or differs from the key's are left out (None when no pair is left).
    ``rows``: ``keys``' rows (or more), when known: past ``limit`` no values are collected (a job
    when ``keys`` is not a local relation)."""
    mine = {f.name: f.dataType for f in schema.fields}
    theirs = {f.name: f.dataType for f in keys.schema.fields}
    usable = [
        (f, k) for f, k in pairs if mine.get(f) == theirs.get(k) and isinstance(mine.get(f), LITERAL_TYPES)
    ]
    if not usable:
        return None
    complete = len(usable) == len(pairs)
    listable = rows is None or rows <= limit
    found = keys.select(*[_ref(None, k) for _, k in usable]).limit(limit + 1).collect() if listable else []
    if listable and len(found) <= limit:
        listed = [
            _Narrowed(f, mine[f], values=frozenset(row[i] for row in found))
            for i, (f, _) in enumerate(usable)
        ]
        return KeyFilter(tuple(listed), complete)
    if not ranges:
        return None
    spans = keys.agg(
        *[
            agg
            for _, k in usable
            for agg in (F.min(_ref(None, k)), F.max(_ref(None, k)), F.max(_ref(None, k).isNull()))
        ]
    ).collect()[0]
    spanned = [
        _Narrowed(f, mine[f], low=spans[3 * i], high=spans[3 * i + 1], nulls=bool(spans[3 * i + 2]))
        for i, (f, _) in enumerate(usable)
    ]
    return KeyFilter(tuple(spanned), complete=False)


def narrowed_by_values(
    frame: DataFrame, pairs: Sequence[tuple[str, str]], keys: DataFrame, limit: int, rows: int | None = None
) -> DataFrame | None:
    """``frame`` filtered by the IN lists of ``keys``' values (``key_filter``): a superset of the
    rows NULL-safely equal to a row of ``keys``, read with a filter Delta skips files by instead of a
    broadcast semi-join (a job). None when a pair's column cannot be listed exactly, or ``keys`` has
    more than ``limit`` rows (or ``rows``, ``key_filter``'s bound, does)."""
    found = key_filter(frame.schema, pairs, keys, limit=limit, rows=rows)
    if found is None or not found.complete:
        return None
    return frame.where(found.on())


# Key types whose values are ordered the same on the driver as by Spark, and have a distance.
RANGE_TYPES = (IntegralType, DateType)


def value_spans(points: Sequence[int], most: int) -> list[tuple[int, int]]:
    """At most ``most`` inclusive ranges (low, high) of ``points`` together holding every one of them,
    split where consecutive distinct points are furthest apart (ties: the earlier gap)."""
    ordered = sorted(set(points))
    if not ordered:
        return []
    widest = sorted(range(1, len(ordered)), key=lambda i: ordered[i - 1] - ordered[i])[: max(0, most - 1)]
    cuts = sorted(widest)
    return [(ordered[lo], ordered[hi - 1]) for lo, hi in zip([0, *cuts], [*cuts, len(ordered)], strict=True)]


def key_ranges(reference: str, dtype: DataType, values: Sequence[object], most: int) -> Column | None:
    """``reference`` (a column as Spark SQL text, of ``dtype``) within one of at most ``most`` ranges
    spanning the non-NULL ``values`` (``value_spans``), or NULL when a value is: a superset of the
    rows NULL-safely equal to a value, and a filter Delta skips data files by (a table clustered by the
    column keeps far fewer files than the values' one min..max span, e.g. inserted keys at the top of
    the key range and deleted ones at its bottom). One SQL expression, as ``among``'s (a Column per
    bound cost ~6 gateway round trips a range: 1,400 in one TPC-H SF 1 Q13 run). None when the type
    has no such order, or there is no non-NULL value."""
    if not isinstance(dtype, RANGE_TYPES):
        return None
    dates = isinstance(dtype, DateType)
    points = [v.toordinal() if dates else v for v in values if v is not None]  # type: ignore[attr-defined]
    spans = value_spans(points, most)  # type: ignore[arg-type]
    if not spans:
        return None

    def value(point: int) -> str:
        return sql_literal(dtype, date.fromordinal(point) if dates else point)

    within = " OR ".join(f"{reference} BETWEEN {value(lo)} AND {value(hi)}" for lo, hi in spans)
    nulls = f" OR {reference} IS NULL" if None in values else ""
    return F.expr(f"({within}{nulls})")
