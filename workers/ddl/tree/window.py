"""A SELECT with window functions, split into its input block and the window SELECT over it.

``SELECT t.k, t.v, SUM(t.v) OVER (PARTITION BY t.k ORDER BY t.d) AS run FROM t JOIN u … WHERE …``
becomes the input block ``SELECT t.k AS __mvs_w0, t.v AS __mvs_w1, t.d AS __mvs_w2 FROM t JOIN u …
WHERE …`` (every column the select list reads, one input column each) and the window SELECT
``SELECT __mvs_w0 AS k, __mvs_w1 AS v, SUM(__mvs_w1) OVER (PARTITION BY __mvs_w0 ORDER BY __mvs_w2)
AS run FROM <input>``: a node recomputed for the partitions its input's change reaches (keyed by a
column every window partitions by). Without such a column every change reaches every row: refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from workers.ddl.dialect import DIALECT
from workers.ddl.fast_rules import NotEligible

_P = "__mvs_w"


@dataclass(frozen=True)
class SplitWindow:
    """The input block's select items, the window SELECT's SQL over ``input_view``, and its key: the
    input column every window partitions by, with its output name (None when not an output)."""

    input_items: list[exp.Expr]
    sql: str
    key: str
    output: str | None


def has_window(select: exp.Select) -> bool:
    """A window function in ``select``'s own list (not in a subquery of it)."""
    return any(w.parent_select is select for w in select.find_all(exp.Window))


def split_window(select: exp.Select, input_view: str) -> SplitWindow:
    """``select`` (qualified, no GROUP BY) as its input block's items and the window SELECT over
    ``input_view``; NotEligible for what is not yet FAST."""
    if select.args.get("distinct") is not None:
        raise NotEligible(
            "DISTINCT over window functions is not yet FAST; select the window in a derived table and "
            "DISTINCT over it, or use REFRESH COMPLETE",
            select.args["distinct"],
        )
    if select.args.get("group") is not None or any(
        a.parent_select is select and not a.find_ancestor(exp.Window) for a in select.find_all(exp.AggFunc)
    ):
        raise NotEligible(
            "window functions over an aggregate (GROUP BY) are not yet FAST in the operator tree; "
            "aggregate in a derived table and apply the window over it, or use REFRESH COMPLETE",
            select,
        )
    windows = [w for w in select.find_all(exp.Window) if w.parent_select is select]
    columns: dict[str, str] = {}  # a column's SQL -> its input column

    def input_column(column: exp.Column) -> exp.Column:
        text = column.sql(dialect=DIALECT)
        if text not in columns:
            columns[text] = f"{_P}{len(columns)}"
        return exp.column(columns[text], quoted=True)

    items: list[exp.Expr] = []
    sources: dict[str, exp.Column] = {}
    for item in select.expressions:
        name = item.alias_or_name
        inner = item.this if isinstance(item, exp.Alias) else item
        for column in inner.find_all(exp.Column):
            sources.setdefault(column.sql(dialect=DIALECT), column)
        rewritten = inner.transform(lambda n: input_column(n) if isinstance(n, exp.Column) else n)
        items.append(exp.alias_(rewritten, name, quoted=True))
    key = _common_partition(windows, columns)
    if key is None:
        raise NotEligible(
            "a window without a PARTITION BY column (shared by every window of its SELECT) reaches "
            "every row on any change, so it is not FAST; partition it (PARTITION BY a column), or use "
            "REFRESH COMPLETE",
            next((w for w in windows if not w.args.get("partition_by")), windows[0]),
        )
    output = next(
        (
            i.alias_or_name
            for i, item in zip(select.expressions, items, strict=True)
            if isinstance(item.this, exp.Column) and item.this.name == key
        ),
        None,
    )
    input_items: list[exp.Expr] = [
        exp.alias_(sources[text].copy(), name, quoted=True) for text, name in columns.items()
    ]
    if not input_items:
        input_items = [exp.alias_(exp.true(), f"{_P}row", quoted=True)]
    sql = exp.select(*items).from_(exp.to_table(input_view)).sql(dialect=DIALECT)
    return SplitWindow(input_items, sql, key, output)


def _common_partition(windows: list[exp.Window], columns: dict[str, str]) -> str | None:
    """The input column (of ``columns``) every window partitions by, if any."""
    common: set[str] | None = None
    for window in windows:
        keys = {
            columns[p.sql(dialect=DIALECT)]
            for p in window.args.get("partition_by") or []
            if isinstance(p, exp.Column)
        }
        common = keys if common is None else common & keys
    return min(common) if common else None
