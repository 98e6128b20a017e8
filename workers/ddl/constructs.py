"""Allow-list of what an MV query may contain, checked on sqlglot's tree at the coordinator and in `mvs sql`.

Every node of the tree must be a query construct from ``_ALLOWED_NODES`` (SELECT and its clauses, set
operations, joins, subqueries, CTEs, window specs, operators, literals, columns…) or a function call
whose name is on the allow-list of ``workers.ddl.allowlist``. Anything else is refused by name, so a
construct sqlglot learns later (or one we never thought of) is refused until someone allows it.

sqlglot turns the functions it knows into typed nodes (``lower(x)`` → ``exp.Lower``) and the others into
``exp.Anonymous`` with the name as written. An anonymous call is checked by its name; a typed node by
its class, which must be one that an allowed name parses to. The worker checks Spark's own parse of the
same text again (``workers.jobs.spark.guard``), so a difference between the two parsers can only refuse.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from workers.ddl.allowlist import BUILTIN_FUNCTIONS, allowed_functions, refusal
from workers.ddl.dialect import DIALECT
from workers.ddl.errors import InvalidQueryError

# Query structure, operators and literals: none of these call code or read anything but their inputs.
_ALLOWED_NODES: frozenset[type[exp.Expr]] = frozenset(
    {
        # statements, clauses and relations (tables are checked in workers.ddl.query)
        exp.Select, exp.From, exp.Join, exp.Where, exp.Group, exp.Having, exp.Order, exp.Ordered,
        exp.Limit, exp.Offset, exp.Subquery, exp.Union, exp.Intersect, exp.Except, exp.With, exp.CTE,
        exp.Table, exp.TableAlias, exp.Values, exp.Tuple, exp.Distinct, exp.Rollup, exp.Cube,
        exp.GroupingSets, exp.Hint, exp.JoinHint, exp.Sort, exp.Distribute, exp.Cluster,
        exp.TableSample, exp.Pivot,
        # windows and aggregate modifiers
        exp.Window, exp.WindowSpec, exp.Filter, exp.IgnoreNulls, exp.RespectNulls, exp.WithinGroup,
        # names, literals, types
        exp.Identifier, exp.Column, exp.Star, exp.Alias, exp.Literal, exp.Boolean, exp.Null,
        exp.DataType, exp.DataTypeParam, exp.Interval, exp.Var, exp.HexString, exp.Paren,
        exp.AtTimeZone, exp.FromTimeZone,
        exp.Bracket, exp.Dot, exp.Lambda, exp.PropertyEQ,
        # a JSON path literal (get_json_object(s, '$.a[0]')) as sqlglot takes it apart
        exp.JSONPath, *exp.JSONPathPart.__subclasses__(),
        # operators
        exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv, exp.Neg, exp.DPipe,
        exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ,
        exp.And, exp.Or, exp.Not, exp.Is, exp.In, exp.Between, exp.Like, exp.ILike, exp.Escape,
        exp.Any, exp.All, exp.BitwiseAnd, exp.BitwiseOr, exp.BitwiseXor, exp.BitwiseNot,
        exp.BitwiseLeftShift, exp.BitwiseRightShift,
    }
)  # fmt: skip

# Typed function nodes that come from syntax rather than a call by name (CAST(x AS t), CASE, …).
_SYNTAX_FUNCTIONS: frozenset[type[exp.Expr]] = frozenset(
    {
        exp.Cast, exp.TryCast, exp.Case, exp.If, exp.Extract, exp.Trim, exp.Substring, exp.StrPosition,
        exp.Exists, exp.CurrentDate, exp.CurrentTimestamp, exp.TimeStrToTime, exp.RegexpLike,
    }
)  # fmt: skip

# Constructs refused with a sentence of their own (the rest get a generic one).
_REFUSED: dict[type[exp.Expr], str] = {
    exp.QueryTransform: "script transforms (TRANSFORM ... USING) run a program: not allowed",
    exp.Lateral: "LATERAL VIEW and lateral table functions are not allowed (call generators in SELECT)",
    exp.Version: "time travel (VERSION/TIMESTAMP AS OF) is not allowed: runs read pinned versions",
    exp.Placeholder: "query parameters are not allowed",
    exp.Parameter: "query parameters and ${...} substitutions are not allowed",
}


def check_constructs(tree: exp.Query, extra_functions: Iterable[str] = ()) -> None:
    """Refuse (``InvalidQueryError``) the first node of ``tree`` that is not on the allow-lists."""
    names = allowed_functions(extra_functions)
    typed = _typed_classes(BUILTIN_FUNCTIONS) | _typed_classes(names - BUILTIN_FUNCTIONS)
    for node in tree.walk():
        if type(node) in _ALLOWED_NODES and not isinstance(node, exp.Dot):
            continue
        if isinstance(node, exp.Func):
            _check_function(node, names, typed)
        elif isinstance(node, exp.Dot) and isinstance(node.expression, exp.Func):
            raise InvalidQueryError(
                f"qualified function name {node.sql(dialect=DIALECT)} is not allowed; "
                "call built-in functions by plain name"
            )
        elif not isinstance(node, exp.Dot):
            raise InvalidQueryError(_REFUSED.get(type(node)) or _generic_refusal(node))


def _check_function(node: exp.Func, names: frozenset[str], typed: frozenset[type[exp.Expr]]) -> None:
    if isinstance(node, exp.Anonymous | exp.AnonymousAggFunc):
        if str(node.name).lower() not in names:
            raise InvalidQueryError(refusal(str(node.name)))
    elif type(node) not in typed and type(node) not in _SYNTAX_FUNCTIONS:
        raise InvalidQueryError(refusal(node.sql_names()[0]))


def _generic_refusal(node: exp.Expr) -> str:
    text = " ".join(node.sql(dialect=DIALECT).split())
    shown = text if len(text) <= 60 else text[:57] + "..."
    return f"{type(node).__name__} ({shown}) is not allowed in an MV query"


@functools.cache
def _typed_classes(names: frozenset[str]) -> frozenset[type[exp.Expr]]:
    """The sqlglot node classes that calls of ``names`` parse to (so ``lcase(x)`` and ``lower(x)`` both
    allow ``exp.Lower``): the class of the name's builder, else found by parsing a call of the name with
    0 to 3 arguments; once per set of names."""
    found: set[type[exp.Expr]] = set()
    builders = sqlglot.Dialect.get_or_raise(DIALECT).parser_class.FUNCTIONS
    for name in names:
        owner = getattr(builders.get(name.upper()), "__self__", None)  # Func.from_arg_list: the class
        if isinstance(owner, type) and issubclass(owner, exp.Func):
            found.add(owner)
            continue
        for args in ("a", "", "a, b", "a, b, c"):
            try:
                select = sqlglot.parse_one(f"SELECT {name}({args})", dialect=DIALECT)
            except (ParseError, TokenError, ValueError, TypeError, IndexError, AttributeError):
                continue
            items = select.expressions if isinstance(select, exp.Select) else []
            call = items[0].unalias() if items else None
            if isinstance(call, exp.Func) and not isinstance(call, exp.Anonymous | exp.AnonymousAggFunc):
                found.add(type(call))
    return frozenset(found)
