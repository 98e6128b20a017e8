"""A normalized SELECT read as nested operators (``values``): one ``Block`` per SELECT over its
inputs, one ``Aggregate`` per derived table that groups, one ``Scan`` per table occurrence.

A block's inputs are the sources of its FROM and joins, and the tables (or derived tables) of the
EXISTS / IN / scalar subqueries in its expressions. It is linear in the inputs it inner-joins, in
the left side of a LEFT JOIN and the right side of a RIGHT JOIN (a LEFT JOIN mirrored); the others
are ``Keyed``: by the equality of one of their columns with a column of a linear input (a LEFT or
RIGHT JOIN's ON, a subquery's correlation in its WHERE, the pair of a top-level ``x IN (SELECT c
…)``), else whole. A FULL JOIN's two sides are keyed to each other by its ON equality. RIGHT and FULL
JOIN only as the block's first join (their left side one input, not a join). ``NOT IN`` is keyed
only by a correlation: its NULL semantics (one NULL in the subquery rejects every row) reach every
row.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sqlglot import exp

from workers.ddl.dialect import DIALECT
from workers.ddl.fast import check_deterministic
from workers.ddl.fast_rules import NotEligible
from workers.ddl.plan import JoinKey
from workers.ddl.tree.aggregate import split_aggregate
from workers.ddl.tree.counted import CountedSubquery, counted_left_join, counted_subquery, over_key_sets
from workers.ddl.tree.terms import column_pair, conjuncts
from workers.ddl.tree.union import union_node
from workers.ddl.tree.values import Aggregate, Block, Keyed, Node, Scan, Union, node_view, scan_view
from workers.ddl.tree.window import has_window, split_window

_INTERIOR_CLAUSES = frozenset({"expressions", "from_", "joins", "where", "hint", "order"})


def is_aggregate(select: exp.Select) -> bool:
    return select.args.get("group") is not None or any(i.find(exp.AggFunc) for i in select.expressions)


def distinct_as_group_by(select: exp.Select) -> bool:
    """A ``SELECT DISTINCT`` without aggregates made a GROUP BY of its output expressions (the same
    rows: one per distinct output row); whether it was."""
    found = select.args.get("distinct")
    if found is None:
        return False
    if found.args.get("on") is not None:
        raise NotEligible("DISTINCT ON is not supported", found)
    if is_aggregate(select):
        raise NotEligible(
            "DISTINCT over an aggregate is not yet FAST in the operator tree; use REFRESH COMPLETE", found
        )
    select.set("distinct", None)
    keys = [item.this if isinstance(item, exp.Alias) else item for item in select.expressions]
    select.set("group", exp.Group(expressions=[key.copy() for key in keys]))
    return True


def _operator(select: exp.Select) -> str:
    """What the subquery ``select`` is to its query (describe names it)."""
    parent = select.parent
    if isinstance(parent, exp.Exists):
        return "anti join (NOT EXISTS)" if isinstance(parent.parent, exp.Not) else "semi join (EXISTS)"
    if isinstance(parent, exp.Subquery) and isinstance(parent.parent, exp.In):
        return "anti join (NOT IN)" if isinstance(parent.parent.parent, exp.Not) else "semi join (IN)"
    return "scalar subquery"


@dataclass
class Builder:
    """Builds the nodes of one query, numbering their views; ``scans``: every scan built."""

    scans: list[Scan] = field(default_factory=list)
    count: int = 0

    def view(self) -> str:
        """A new interior node's view name."""
        self.count += 1
        return node_view(self.count - 1)

    def _source(self, source: exp.Expr) -> tuple[str, Node]:
        """The input a FROM / JOIN source is (its alias, node); renamed to the node's view."""
        if isinstance(source, exp.Table):
            if not source.name:
                raise NotEligible("only tables and derived tables can be read here", source)
            scan = Scan(source.name.lower(), source.alias_or_name, scan_view(len(self.scans)))
            self.scans.append(scan)
            source.set("this", exp.to_identifier(scan.view))
            return scan.alias, scan
        if isinstance(source, exp.Subquery) and isinstance(source.this, exp.Select | exp.SetOperation):
            alias = source.alias_or_name
            body = source.this
            node = self.select(body) if isinstance(body, exp.Select) else self.set_operation(body)[0]
            table = exp.Table(
                this=exp.to_identifier(node.view),
                alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True)),
            )
            source.replace(table)
            return alias, node
        raise NotEligible("only tables and derived tables can be read here", source)

    def set_operation(self, op: exp.SetOperation) -> tuple[Union | Aggregate, tuple[str, ...]]:
        """A UNION [ALL] as its node and its column names (``union.union_node``)."""
        return union_node(self, op)

    def select(self, body: exp.Select) -> Block | Aggregate:
        """A derived table's SELECT as its node."""
        if has_window(body):
            return self.window(body)
        distinct = distinct_as_group_by(body)
        having = body.args.get("having")
        if having is not None and having.find(exp.Query) is not None:
            return self.block(having_as_filter(body))  # a filter above the aggregate
        if is_aggregate(body):
            return self.aggregate(body, distinct)
        return self.block(body)

    def aggregate(self, body: exp.Select, distinct: bool) -> Aggregate:
        """A GROUP BY (or DISTINCT) recomputed by group over its input block."""
        view, input_view = self.view(), self.view()
        split = split_aggregate(body, input_view, planned=False)
        inner = body.copy()
        inner.set("expressions", split.input_items)
        inner.set("group", None)
        inner.set("having", None)
        block, over_counts = counted_left_join(self.block(inner, input_view), inner, split.sql)
        key, output = split.keys[0] if split.keys else (None, None)
        operator = "distinct" if distinct else "aggregate"
        return Aggregate(view, split.sql, block, key, output, operator, over_counts)

    def window(self, body: exp.Select) -> Aggregate:
        """A SELECT with window functions recomputed by partition over its input block."""
        view, input_view = self.view(), self.view()
        split = split_window(body, input_view)
        inner = body.copy()
        inner.set("expressions", split.input_items)
        block = self.block(inner, input_view)
        return Aggregate(view, split.sql, block, split.key, split.output, "window (PARTITION BY)")

    def block(self, select: exp.Select, view: str | None = None) -> Block:
        """One SELECT without GROUP BY over its inputs (its sources renamed to their views)."""
        view = view or self.view()
        for clause, value in select.args.items():
            if value and clause not in _INTERIOR_CLAUSES:
                shown = (
                    f"{clause.upper()} in a derived table or subquery is not yet FAST; use REFRESH COMPLETE"
                )
                raise NotEligible(shown, value if isinstance(value, exp.Expr) else None)
        select.set("order", None)
        check_deterministic(select)
        linear: dict[str, str] = {}  # alias -> view
        inputs: list[Node] = []
        keyed: list[Keyed] = []
        left_keys: list[JoinKey] = []
        source = select.args.get("from_")
        if source is None:
            raise NotEligible("a SELECT without FROM is not supported", select)
        first, node = self._source(source.this)
        inputs.append(node)
        linear[first] = node.view
        inner_ons: list[exp.Expr] = []
        for index, join in enumerate(select.args.get("joins") or []):
            side, kind = (join.args.get("side") or "").upper(), (join.args.get("kind") or "").upper()
            outer_join = side in ("LEFT", "RIGHT", "FULL") and kind in ("", "OUTER")
            if not outer_join and (side or kind not in ("", "INNER", "CROSS") or join.args.get("method")):
                shown = (
                    " ".join(w for w in (join.args.get("method") or "", side, kind) if w).upper() or "this"
                )
                raise NotEligible(
                    f"{shown} JOIN is not yet FAST in the operator tree (inner, LEFT, RIGHT and FULL "
                    "joins); use REFRESH COMPLETE",
                    join,
                )
            if side in ("RIGHT", "FULL") and index > 0:
                raise NotEligible(
                    f"{side} JOIN after another join is not yet FAST in the operator tree (its left side "
                    f"would be a join); put it first (FROM a {side} JOIN b …), join the rest in a derived "
                    "table, or use REFRESH COMPLETE",
                    join,
                )
            alias, node = self._source(join.this)
            inputs.append(node)
            ons = conjuncts(join.args.get("on"))
            if not side:
                linear[alias] = node.view
                inner_ons.extend(ons)
            elif side == "LEFT":
                pairs = [p for t in ons if (p := column_pair(t, alias, linear)) is not None]
                left_keys.extend(JoinKey(o_view, o_col, node.view, c) for c, o_view, o_col in pairs)
                keyed.append(_keyed(node.view, "left outer join", pairs[0] if pairs else None))
            else:
                left_side = (first, linear.pop(first))
                keyed.extend(_first_outer_join(side, left_side, (alias, node.view), ons, linear))
                if side == "RIGHT":  # mirrored LEFT JOIN: the FROM side keyed to the preserved side
                    k = keyed[-1]
                    if k.column is not None and k.outer_view is not None and k.outer_column is not None:
                        left_keys.append(JoinKey(k.outer_view, k.outer_column, k.view, k.column))
        window = select.find(exp.Window)  # its derived tables are views by now: in a subquery expression
        if window is not None:
            raise NotEligible(
                "window functions inside a subquery expression are not yet FAST in the operator tree; "
                "apply them in a derived table (FROM (SELECT … OVER (PARTITION BY …)) w), or use "
                "REFRESH COMPLETE",
                window,
            )
        where = select.args.get("where")
        where_terms = conjuncts(where.this if where is not None else None)
        counted: list[CountedSubquery] = []
        for nested in list(select.walk(prune=lambda n: isinstance(n, exp.Select) and n is not select)):
            if isinstance(nested, exp.Select) and nested is not select:
                keyed.extend(self._subquery(nested, linear, where_terms, inputs, counted))
        keys, filtered = _keys(where_terms + inner_ons, linear)
        lineage = tuple(_lineage(select, linear))
        return Block(
            view,
            select.sql(dialect=DIALECT),
            tuple(inputs),
            keys,
            tuple(_with_outer_keys(k, linear, where_terms) for k in keyed),
            tuple(left_keys),
            lineage,
            filtered,
            over_key_sets(select, counted),
        )

    def _subquery(
        self,
        sub: exp.Select,
        outer: dict[str, str],
        where_terms: list[exp.Expr],
        inputs: list[Node],
        counted: list[CountedSubquery] | None,
    ) -> list[Keyed]:
        """The inputs of the subquery ``sub`` (and of the subqueries in it), keyed to ``outer``'s
        linear inputs where an equality allows; appended to ``inputs``. A semi / anti join whose
        input's matching rows per key are all it reads gets ``Keyed.matches`` (``counted_subquery``), and
        how its subquery reads the key set instead is added to ``counted`` (None: a subquery of a
        subquery, keyed to it and never counted)."""
        operator = _operator(sub)
        for clause in ("limit", "offset"):
            if sub.args.get(clause):
                raise NotEligible(f"{clause.upper()} in a subquery is not yet FAST", sub.args[clause])
        check_deterministic(sub)
        sources = [sub.args["from_"].this] if sub.args.get("from_") else []
        kinds = [True]
        for join in sub.args.get("joins") or []:
            side, kind = (join.args.get("side") or "").upper(), (join.args.get("kind") or "").upper()
            kinds.append(not side and kind in ("", "INNER", "CROSS"))
            sources.append(join.this)
        own = {s.alias_or_name for s in sources}
        reachable = {a: v for a, v in outer.items() if a not in own}  # correlated columns' tables
        sub_where = sub.args.get("where")
        terms = conjuncts(sub_where.this if sub_where is not None else None)
        found: list[Keyed] = []
        aliases: list[str] = []
        for source, inner_join in zip(sources, kinds, strict=True):
            alias, node = self._source(source)
            inputs.append(node)
            aliases.append(alias)
            pair = None
            if inner_join:
                pair = next((p for t in terms if (p := column_pair(t, alias, reachable)) is not None), None)
                if pair is None and operator == "semi join (IN)":
                    pair = _in_pair(sub, alias, reachable, where_terms)
            found.append(_keyed(node.view, operator, pair))
        one = None
        if len(found) == 1:
            one = counted_subquery(sub, operator, (aliases[0], reachable), found[0], terms)
        if one is not None and counted is not None:
            found[0] = replace(found[0], matches=one.matches)
            counted.append(one)
        for nested in list(sub.walk(prune=lambda n: isinstance(n, exp.Select) and n is not sub)):
            if isinstance(nested, exp.Select) and nested is not sub:
                found.extend(self._subquery(nested, {}, [], inputs, None))  # keyed to sub, not the block
        return found


def _first_outer_join(
    side: str, left: tuple[str, str], right: tuple[str, str], ons: list[exp.Expr], linear: dict[str, str]
) -> list[Keyed]:
    """``FROM l RIGHT JOIN r ON …`` (a LEFT JOIN mirrored: ``r`` linear, ``l`` keyed to it by an ON
    equality) or ``FROM l FULL JOIN r ON …`` (neither side linear: an insert on one side can take a
    NULL-padded row of the other away; each side keyed to the other by an ON equality, NULL keys
    included: a row whose key is NULL is padded, only its own change reaches it). ``left`` and
    ``right``: (alias, view); ``linear`` gains ``r`` for a RIGHT JOIN."""
    (left_alias, left_view), (right_alias, right_view) = left, right
    if side == "RIGHT":
        linear[right_alias] = right_view
        pair = next((p for t in ons if (p := column_pair(t, left_alias, linear)) is not None), None)
        return [_keyed(left_view, "right outer join", pair)]
    preserved = {left_alias: left_view}
    pair = next((p for t in ons if (p := column_pair(t, right_alias, preserved)) is not None), None)
    if pair is None:
        return [Keyed(left_view, "full outer join"), Keyed(right_view, "full outer join")]
    column, _, left_column = pair
    return [
        Keyed(left_view, "full outer join", left_column, right_view, column),
        Keyed(right_view, "full outer join", column, left_view, left_column),
    ]


def _with_outer_keys(keyed: Keyed, linear: dict[str, str], where_terms: list[exp.Expr]) -> Keyed:
    """``keyed`` with its outer input's own WHERE conditions as ``Keyed.outer_keys``: the conjuncts
    that read that input's columns only (no subquery). Not for a FULL JOIN's sides (each pads the
    other's rows: a key without an outer row still reaches the block)."""
    aliases = {view: alias for alias, view in linear.items()}
    alias = aliases.get(keyed.outer_view or "")
    if keyed.null_keys or alias is None or keyed.outer_view is None or keyed.outer_column is None:
        return keyed
    own = [
        term.copy()
        for term in where_terms
        if term.find(exp.Query) is None
        and (columns := list(term.find_all(exp.Column)))
        and all(c.table == alias for c in columns)
    ]
    if not own:
        return keyed
    query = (
        exp.select(exp.column(keyed.outer_column, table=alias, quoted=True))
        .from_(exp.to_table(keyed.outer_view).as_(alias, quoted=True))
        .where(exp.and_(*own))
    )
    return replace(keyed, outer_keys=query.sql(dialect=DIALECT))


def _keyed(view: str, operator: str, pair: tuple[str, str, str] | None) -> Keyed:
    if pair is None:
        return Keyed(view, operator)
    column, outer_view, outer_column = pair
    return Keyed(view, operator, column, outer_view, outer_column)


def _in_pair(
    sub: exp.Select, alias: str, outer: dict[str, str], where_terms: list[exp.Expr]
) -> tuple[str, str, str] | None:
    """``x IN (SELECT alias.c …)`` as a top-level AND term of the block's WHERE (where NULL and
    false both reject): the pair (c, x's view, x)."""
    found = sub.parent.parent if isinstance(sub.parent, exp.Subquery) else None
    if not isinstance(found, exp.In) or not any(found is t for t in where_terms):
        return None
    chosen = sub.expressions[0] if len(sub.expressions) == 1 else None
    chosen = chosen.this if isinstance(chosen, exp.Alias) else chosen
    x = found.this
    if not (isinstance(chosen, exp.Column) and chosen.table == alias):
        return None
    if not (isinstance(x, exp.Column) and x.table in outer):
        return None
    return chosen.name, outer[x.table], x.name


def _keys(terms: list[exp.Expr], views: dict[str, str]) -> tuple[tuple[JoinKey, ...], bool]:
    """The equalities of columns of two linear inputs among ``terms`` (top-level AND terms of WHERE
    and inner ON conditions), and whether any other term filters."""
    keys: list[JoinKey] = []
    filtered = False
    for term in terms:
        left, right = (term.this, term.expression) if isinstance(term, exp.EQ) else (None, None)
        if (
            isinstance(left, exp.Column)
            and isinstance(right, exp.Column)
            and left.table in views
            and right.table in views
            and left.table != right.table
        ):
            keys.append(JoinKey(views[left.table], left.name, views[right.table], right.name))
        else:
            filtered = True
    return tuple(keys), filtered


def _lineage(select: exp.Select, linear: dict[str, str]) -> list[tuple[str, str, str]]:
    """The output columns that are a linear input's column: (output, input view, column)."""
    found = []
    for item in select.expressions:
        inner = item.this if isinstance(item, exp.Alias) else item
        if isinstance(inner, exp.Column) and inner.table in linear:
            found.append((item.alias_or_name, linear[inner.table], inner.name))
    return found


_HAVING = "__mvs_having"


def having_as_filter(select: exp.Select) -> exp.Select:
    """``SELECT … GROUP BY … HAVING c`` where ``c`` has a subquery, as a filter above the aggregate:
    ``SELECT outputs FROM (SELECT …, c's aggregates as hidden columns GROUP BY …) WHERE c'``, so the
    subquery is an input of the filter's block (keyed or whole) and the aggregate a node below it."""
    having = select.args["having"]
    body = select.copy()
    body.set("having", None)
    hidden: dict[str, str] = {}

    def lift(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Subquery):
            return node.copy()  # its own aggregates stay (a copy: not descended into)
        if isinstance(node, exp.AggFunc):
            text = node.sql(dialect=DIALECT)
            if text not in hidden:
                hidden[text] = f"__mvs_h{len(hidden)}"
                body.append("expressions", exp.alias_(node.copy(), hidden[text], quoted=True))
            return exp.column(hidden[text], table=_HAVING, quoted=True)
        if isinstance(node, exp.Column):
            raise NotEligible("a column outside an aggregate in HAVING with a subquery is not yet FAST", node)
        return node

    condition = having.this.transform(lift)
    outputs = [exp.column(i.alias_or_name, table=_HAVING, quoted=True) for i in select.expressions]
    source = exp.Subquery(this=body, alias=exp.TableAlias(this=exp.to_identifier(_HAVING)))
    return exp.select(*outputs).from_(source).where(condition)
