"""Analysis of an MV's SELECT body with sqlglot's Spark dialect.

The Spark jobs run the query as written, so everything here is about deciding *whether* we may run it
(one read-only SELECT over plain warehouse tables), *what* it reads (base tables, for MV logs and
watermarks) and *how* it may be refreshed (the fast-refresh plan, see ``workers.ddl.fast``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError, TokenError
from sqlglot.optimizer.scope import Scope, traverse_scope

from workers.config import allowed_functions_from_env
from workers.ddl.constructs import check_constructs
from workers.ddl.dialect import DIALECT
from workers.ddl.errors import InvalidQueryError
from workers.ddl.fast import FastRefreshPlan, FastVerdict, plan_fast_refresh
from workers.ddl.fast_top import top_n_verdict
from workers.ddl.output_names import output_columns
from workers.ddl.plan import QueryPlan
from workers.ddl.read_names import read_names
from workers.ddl.resolve import ColumnsOf
from workers.ddl.tree.build import plan_tree

# The coordinator analyses every query on its one loop thread, and sqlglot's time grows with the
# text (~1 s at 110 KB on a small machine): a bound keeps any one DDL far below the group's
# max.poll.interval, so no query can stall the control plane. Real MV queries are far shorter.
MAX_QUERY_CHARS = 65_536

# Same rule as names in the DDL grammar: base tables live at <warehouse>/<name> and get MV logs.
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Anything that writes, changes session state or is not a query at all. Checked on every node, not just
# the root, because sqlglot nests e.g. ``WITH ... INSERT`` or ``SELECT ... INTO`` under other nodes.
_FORBIDDEN: tuple[type[exp.Expr], ...] = (
    exp.DML,
    exp.DDL,
    exp.Drop,
    exp.Alter,
    exp.Set,
    exp.Use,
    exp.Cache,
    exp.Uncache,
    exp.TruncateTable,
    exp.Command,
    exp.Describe,
    exp.LoadData,
    exp.Refresh,
    exp.Analyze,
    exp.Transaction,
    exp.Commit,
    exp.Rollback,
    exp.Pragma,
    exp.Kill,
    exp.Grant,
    exp.Revoke,
    exp.Comment,
    exp.Show,
    exp.Into,
)

_KEYWORD: dict[type[exp.Expr], str] = {
    exp.TruncateTable: "TRUNCATE",
    exp.LoadData: "LOAD DATA",
    exp.Into: "SELECT ... INTO",
    exp.Values: "VALUES",
}

# Data source names Spark accepts in ``<format>.`<path>``` (runSQLOnFiles, off in the workers).
_FILE_FORMATS = frozenset(
    {"parquet", "orc", "json", "csv", "text", "avro", "delta", "binaryfile", "xml", "jdbc", "hive", "libsvm"}
)

# sqlglot puts reprs of its internals into messages; these turn them into words.
_TOKEN_RE = re.compile(r"<Token token_type: TokenType\.(\w+), text: (.*?), line: .*?>")
_MISSING_RE = re.compile(r"Required keyword: '\w+' missing for <class '[\w.]*?(\w+)'>")


@dataclass(frozen=True)
class QueryInfo:
    """What the DDL layer knows about an MV query.

    ``fast_refresh`` is None when the query cannot be refreshed incrementally; ``fast_reason`` then says
    why, in words meant for the user (it is "" when a plan exists), ``fast_position`` where in the
    query the construct it names starts (when known), and ``fast_needs_columns`` that the base
    tables' columns (not given to this analysis) could still make it eligible.
    """

    base_tables: tuple[str, ...]
    normalized_sql: str
    fast_refresh: FastRefreshPlan | None
    fast_reason: str
    fast_position: int | None = None
    fast_needs_columns: bool = False

    @property
    def plan(self) -> QueryPlan:
        """What travels with the task (``MvSpec.plan``): the fast-refresh plan or why there is none."""
        return QueryPlan(self.fast_refresh, self.fast_reason)


def analyze_query(
    sql: str, extra_functions: Iterable[str] | None = None, columns_of: ColumnsOf | None = None
) -> QueryInfo:
    """Validate ``sql`` as one read-only SELECT that uses only allowed constructs and functions
    (``workers.ddl.constructs``) and describe it; raises ``InvalidQueryError``.

    ``extra_functions`` extends the function allow-list; None means the operator's
    ``MVS_ALLOWED_FUNCTIONS`` from the environment (so every caller honours it unchanged).
    ``columns_of`` gives a base table's columns (the coordinator reads them from the Delta log), so
    that the fast-refresh plan resolves a join's unqualified columns as Spark does; called only
    with names the query reads that passed the naming rules.
    """
    extra = allowed_functions_from_env() if extra_functions is None else tuple(extra_functions)
    # Each table's columns read once per analysis (its Delta log): the planners and ``_reading`` ask again.
    columns_of = functools.cache(columns_of) if columns_of is not None else None
    try:
        tree = parse_query(sql)
        tables = base_table_nodes(tree)
        check_constructs(tree, extra)
        base_tables = tuple(sorted({t.name.lower() for t in tables}))
        top = top_n_verdict(
            tree, sql, lambda inner: _fast_verdict(parse_query(inner), base_tables, inner, columns_of)
        )
        if top is not None:
            verdict = _reading(top, sql, tree, base_tables, columns_of)
        else:
            verdict = _fast_verdict(tree, base_tables, sql, columns_of)
        normalized = tree.sql(dialect=DIALECT)
    except RecursionError as error:  # sqlglot recurses over the tree (scopes, rendering)
        raise _too_deep() from error
    return QueryInfo(
        base_tables=base_tables,
        normalized_sql=normalized,
        fast_refresh=verdict.plan,
        fast_reason=verdict.reason,
        fast_position=verdict.position,
        fast_needs_columns=verdict.needs_columns,
    )


def _fast_verdict(
    tree: exp.Query, base_tables: tuple[str, ...], sql: str, columns_of: ColumnsOf | None
) -> FastVerdict:
    """The shape planners' plan, else the operator tree's, or why there is none."""
    verdict = plan_fast_refresh(tree, base_tables, sql, columns_of)
    if verdict.plan is None and not verdict.needs_columns and columns_of is not None:
        verdict = _tree_or(verdict, plan_tree(tree, base_tables, columns_of))
    return _reading(verdict, sql, tree, base_tables, columns_of)


def _reading(
    verdict: FastVerdict,
    sql: str,
    tree: exp.Query,
    base_tables: tuple[str, ...],
    columns_of: ColumnsOf | None,
) -> FastVerdict:
    """``verdict``'s plan with the names of the columns its runs hold (``read_names``), where every
    base table's columns are known (the coordinator's analysis); else its runs hold every column."""
    if verdict.plan is None or columns_of is None:
        return verdict
    found = {table: columns_of(table) for table in base_tables}
    columns = {table: tuple(names) for table, names in found.items() if names is not None}
    if len(columns) < len(found):
        return verdict
    return replace(verdict, plan=replace(verdict.plan, read_names=read_names(sql, tree, columns)))


def _tree_or(shape: FastVerdict, tree: FastVerdict | None) -> FastVerdict:
    """The operator tree's plan or refusal where the shape planners refused: the tree covers every
    shape, so its refusal names what is left (a shape planner's "CTEs are not supported" no longer
    holds); the shape planners' reason where the tree has nothing to say."""
    return shape if tree is None else tree


def query_output_columns(sql: str) -> tuple[str, ...] | None:
    """The output column names of MV query ``sql`` (an accepted one), None when they are not
    known from the text alone (``SELECT *``): the columns of an MV whose table is not built yet."""
    try:
        return output_columns(parse_query(sql))
    except (InvalidQueryError, RecursionError):
        return None


def _too_deep() -> InvalidQueryError:
    return InvalidQueryError("query nests too deeply (parentheses, subqueries or expressions)")


def parse_query(sql: str) -> exp.Query:
    """Parse ``sql`` into exactly one read-only query tree; raises ``InvalidQueryError``."""
    if len(sql) > MAX_QUERY_CHARS:
        raise InvalidQueryError(
            f"query is {len(sql)} characters long; at most {MAX_QUERY_CHARS} are accepted"
        )
    try:
        statements = sqlglot.parse(sql, dialect=DIALECT)
    except RecursionError as error:
        raise _too_deep() from error
    except ParseError as error:
        raise _parse_error(error, sql) from error
    except TokenError as error:
        raise InvalidQueryError(f"could not parse query: {error}") from error
    found = [s for s in statements if s is not None and not isinstance(s, exp.Semicolon)]
    if not found:
        raise InvalidQueryError("query is empty; expected a SELECT")
    if len(found) > 1:
        kinds = ", ".join(_statement_keyword(s) for s in found)
        raise InvalidQueryError(
            f"query must be a single read-only SELECT; found {len(found)} statements ({kinds})"
        )
    tree = found[0]
    if not isinstance(tree, exp.Query):
        if isinstance(tree, (*_FORBIDDEN, exp.Values)):
            found_what = _statement_keyword(tree)
        else:  # sqlglot read it as a bare expression, e.g. `this is not sql`
            text = " ".join(sql.split())
            found_what = f"'{text[:40]}...'" if len(text) > 40 else f"'{text}'"
        raise InvalidQueryError(f"query must be a single read-only SELECT; found {found_what}")
    bad = next(iter(tree.find_all(*_FORBIDDEN)), None)
    if bad is not None:
        raise InvalidQueryError(f"query must be a single read-only SELECT; found {_statement_keyword(bad)}")
    return tree


def base_table_nodes(tree: exp.Query) -> list[exp.Table]:
    """Every reference to a real table (not a CTE) in ``tree``, checked against the naming rules."""
    try:
        scopes = traverse_scope(tree)
    except OptimizeError as error:
        raise InvalidQueryError(f"invalid query: {error}") from error
    tables: list[exp.Table] = []
    for scope in scopes:
        tables.extend(_scope_base_tables(scope))
    if not tables:
        raise InvalidQueryError("query must read at least one table (SELECT ... FROM <table>)")
    names = {t.name.lower() for t in tables}
    for cte in tree.find_all(exp.CTE):
        if cte.alias.lower() in names:
            # Legal Spark, but which `sales` a reader means is a trap, and renaming for runs would be too.
            raise InvalidQueryError(
                f"CTE name '{cte.alias}' is also the name of a table the query reads; rename the CTE"
            )
    return tables


def _scope_base_tables(scope: Scope) -> list[exp.Table]:
    found: list[exp.Table] = []
    for table in scope.tables:
        source = scope.sources.get(table.alias_or_name)
        if isinstance(source, Scope):
            continue  # a CTE reference
        if not isinstance(table.this, exp.Identifier):
            raise InvalidQueryError(
                f"table-valued function {table.this.sql(dialect=DIALECT)} is not supported; "
                "materialized views read warehouse tables"
            )
        if _is_path(table):
            raise InvalidQueryError(
                f"reading files by path ({table.sql(dialect=DIALECT)}) is not allowed; "
                "materialized views read warehouse tables"
            )
        if table.args.get("db") is not None or table.args.get("catalog") is not None:
            raise InvalidQueryError(
                f"qualified table name {table.sql(dialect=DIALECT)} is not supported; "
                "refer to warehouse tables by plain name"
            )
        if not _NAME_RE.fullmatch(table.name):
            raise InvalidQueryError(
                f"invalid table name '{table.name}': names must start with a letter or underscore "
                "and contain only letters, digits and underscores"
            )
        found.append(table)
    return found


def _is_path(table: exp.Table) -> bool:
    """``parquet.`/data```, ``delta.`s3://…```, ``json.`x```: Spark's "run SQL on files" syntax."""
    qualifier = str(table.args["db"].name).lower() if table.args.get("db") is not None else ""
    return qualifier in _FILE_FORMATS or any(c in table.name for c in "/:\\")


def _statement_keyword(node: exp.Expr) -> str:
    """The keyword a user would recognise for ``node`` ("INSERT", "DROP", "SHOW"…)."""
    if isinstance(node, exp.Command):
        return str(node.this).upper()
    if isinstance(node, exp.Select) and node.args.get("into") is not None:
        return _KEYWORD[exp.Into]
    if isinstance(node, exp.Query):
        return "SELECT"
    return _KEYWORD.get(type(node), type(node).__name__.upper())


def _parse_error(error: ParseError, sql: str) -> InvalidQueryError:
    """Turn sqlglot's first error into a one-line message with an offset into ``sql``."""
    if not error.errors:
        return InvalidQueryError(f"could not parse query: {error}")
    first = error.errors[0]
    description = _TOKEN_RE.sub(
        lambda m: "end of query" if m.group(1) == "SENTINEL" else f"'{m.group(2)}'",
        str(first.get("description", "syntax error")),
    )
    description = _MISSING_RE.sub(lambda m: f"incomplete {m.group(1).upper()}", description)
    highlight = str(first.get("highlight") or "")
    line, col = int(first.get("line") or 1), int(first.get("col") or 1)
    lines = sql.split("\n")
    line_start = sum(len(text) + 1 for text in lines[: line - 1])
    # sqlglot's column is the 1-based *end* of the offending token.
    position = max(0, min(len(sql), line_start + col - len(highlight)))
    near = f" near '{highlight}'" if highlight else ""
    return InvalidQueryError(f"could not parse query: {description}{near}", position)
