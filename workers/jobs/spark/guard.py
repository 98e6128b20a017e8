"""The worker's own check of an MV query, on Spark's plans, before it runs (defense in depth).

The coordinator already refused anything outside the allow-list on sqlglot's reading of the text
(``workers.ddl.constructs``). A worker must not rely on that: an event may come from another producer,
and two parsers can read one text differently. So the text is read again by Spark's own parser, and
only then run, and its analyzed plan is checked once more:

1. parsed plan: only allow-listed plan nodes; every function call (``UnresolvedFunction``) a plain
   name on the allow-list (``workers.ddl.allowlist`` plus ``Settings.allowed_functions``); every table
   a plain name of a base table the run registered (or a CTE), never the MV's own table; no script
   transforms, table-valued functions, lateral joins, time travel, ``IDENTIFIER()``, parameters.
2. analyzed plan (what Spark will really execute, above the pinned base views): no reflection or
   user-defined expression of any kind, no script transform, and no leaf but the run's views.

A refusal is ``QueryRefused`` (code 1001, permanent). Plans are walked with an explicit stack, so a
deeply nested query cannot overflow Python's stack either.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Any

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from workers.ddl.allowlist import allowed_functions, refusal
from workers.jobs.errors import JobError

__all__ = ["QueryRefused", "check_expression", "check_parsed", "guarded_sql"]

_MAX_NODES = 50_000  # far above any real MV query; bounds the walk of a hostile one
# The SQL confs that change how Spark's parser reads a text: a parse accepted under other values of
# them is checked again (``check_parsed``'s memo of accepted parses).
_PARSER_CONFS = (
    "spark.sql.ansi.enabled",
    "spark.sql.ansi.enforceReservedKeywords",
    "spark.sql.ansi.doubleQuotedIdentifiers",
    "spark.sql.parser.quotedRegexColumnNames",
    "spark.sql.parser.escapedStringLiterals",
    "spark.sql.legacy.setopsPrecedence.enabled",
)
_ACCEPTED_LIMIT = 4096  # parses (and analyzed plans) remembered as accepted; a memo starts over past it
_accepted: set[tuple[object, ...]] = set()
_expressions: set[tuple[object, ...]] = set()
_accepted_lock = threading.Lock()
# Analyzed plans checked, per process: a run checks one text several times (a node's rows at the
# watermark and at the pinned versions, each delta term) over views of the same names, every run
# again, and each walk is a few py4j calls per plan node (0.1-0.2 s for a TPC-H query, more on a
# loaded machine).
# Keyed by what else the walk's outcome depends on (``_resolution``): what the session's names resolve
# to (its temporary functions, its temp views, its database, case sensitivity) and its parser confs.
# A UDF registered under a builtin's name is not listed, and is allowed by that name either way.
_analyzed: set[tuple[object, ...]] = set()

# Parsed (unresolved) and analyzed logical plan nodes a read-only MV query is made of (simple names).
_PLAN_NODES = frozenset(
    {
        "Project", "Filter", "Aggregate", "Join", "Union", "Intersect", "Except", "Distinct",
        "Deduplicate", "Sort", "GlobalLimit", "LocalLimit", "Offset", "Tail", "SubqueryAlias",
        "UnresolvedRelation", "UnresolvedWith", "UnresolvedHaving", "WithWindowDefinition",
        "UnresolvedHint", "ResolvedHint", "RepartitionByExpression", "Repartition", "Sample", "Pivot",
        "Unpivot", "LocalRelation", "UnresolvedInlineTable", "ResolvedInlineTable",
        "UnresolvedSubqueryColumnAliases", "OneRowRelation", "Window", "Expand", "WithCTE",
        "CTERelationDef", "CTERelationRef", "View", "Generate",
    }
)  # fmt: skip
# Leaves a query may end in (the analyzed plan is not walked below the run's own views).
_LEAVES = frozenset({"View", "LocalRelation", "OneRowRelation", "CTERelationRef", "ResolvedInlineTable"})

_REFUSED_PLANS = {
    "ScriptTransformation": "script transforms (TRANSFORM ... USING) run a program: not allowed",
    "UnresolvedTableValuedFunction": "table-valued functions are not allowed; MVs read warehouse tables",
    "LateralJoin": "LATERAL subqueries and lateral table functions are not allowed",
    "RelationTimeTravel": "time travel (VERSION/TIMESTAMP AS OF) is not allowed: runs read pinned versions",
    "PlanWithUnresolvedIdentifier": "IDENTIFIER(...) is not allowed; name tables directly",
}
# Expressions refused wherever they appear (the analyzed names cover what the parser never creates).
_REFUSED_EXPRESSIONS = {
    "CallMethodViaReflection": "reflection calls Java code, which an MV query may not run",
    "NamedParameter": "query parameters are not allowed",
    "PosParameter": "query parameters are not allowed",
    "UnresolvedTableValuedFunction": "table-valued functions are not allowed; MVs read warehouse tables",
    "LateralSubquery": "LATERAL subqueries are not allowed",
}
_USER_DEFINED = "org.apache.spark.sql.catalyst.expressions.UserDefinedExpression"
_SUBQUERY = "org.apache.spark.sql.catalyst.expressions.SubqueryExpression"


class QueryRefused(JobError):
    """The MV query uses something an MV may not run; permanent (the query must change)."""

    code = 1001
    retryable = False


def guarded_sql(
    session: SparkSession,
    query: str,
    *,
    tables: Collection[str],
    mv_name: str,
    extra_functions: Iterable[str] = (),
) -> DataFrame:
    """``session.sql(query)`` after both checks; ``tables`` are the temp views the run registered
    (named like the base tables). Raises QueryRefused."""
    confs = _parser_confs(session)  # read once for both checks' memos (a call per conf)
    _parsed_once(session, query, tables, mv_name, extra_functions, confs)
    frame = session.sql(query)
    names = allowed_functions(extra_functions)
    wanted = frozenset(t.lower() for t in tables)
    memo = (query, wanted, names, _resolution(session, wanted, confs))
    _checked_once(_analyzed, memo, lambda: _check_analyzed(session, frame, tables, names))
    return frame


def _checked_once(
    accepted: set[tuple[object, ...]], memo: tuple[object, ...], check: Callable[[], None]
) -> None:
    """``check()`` unless it passed before for ``memo`` (what its outcome depends on): remembered
    once it passes, in ``accepted``, which starts over past ``_ACCEPTED_LIMIT``."""
    with _accepted_lock:
        if memo in accepted:
            return
    check()
    with _accepted_lock:
        if len(accepted) >= _ACCEPTED_LIMIT:
            accepted.clear()
        accepted.add(memo)


def _resolution(
    session: SparkSession, tables: Collection[str], parser_confs: tuple[str | None, ...]
) -> tuple[object, ...]:
    """What decides how ``session`` resolves a text's names besides the text: its temporary functions
    (a UDF registered since), which of ``tables`` are its temp views (a name that is not one reads a
    catalog table), its current database and case sensitivity; and its parser confs. A few py4j
    calls, not a few per plan node."""
    catalog: Any = session._jsparkSession.sessionState().catalog()  # noqa: SLF001 - no PySpark API
    # Each list joined on the JVM, one call: iterated here, it cost 3-4 calls an element (a run's
    # session has a temp view per base and per node: ~170 calls in one TPC-H SF 1 Q13 run).
    functions = sorted(str(catalog.listTemporaryFunctions().mkString(_SEPARATOR)).split(_SEPARATOR))
    listed = str(catalog.listLocalTempViews("*").mkString(_SEPARATOR)).split(_SEPARATOR)
    views = sorted(n for v in listed if (n := _unquoted(v).lower()) in tables)
    database = str(catalog.getCurrentDatabase())
    case = session.conf.get("spark.sql.caseSensitive", None)
    return tuple(functions), tuple(views), database, case, parser_confs


# Joins the names a catalog lists: NUL, which no base table, view or function name holds in practice
# (a name holding one would only split into parts: the key stays a function of the names).
_SEPARATOR = "\u0000"


def _unquoted(identifier: str) -> str:
    """A temp view's name from the quoted form a catalog lists it in (a temp view has no database;
    a doubled backtick inside stands for one)."""
    if len(identifier) >= 2 and identifier[0] == identifier[-1] == "`":
        return identifier[1:-1].replace("``", "`")
    return identifier


def _parser_confs(session: SparkSession) -> tuple[str | None, ...]:
    return tuple(session.conf.get(key, None) for key in _PARSER_CONFS)


def check_parsed(
    session: SparkSession,
    query: str,
    *,
    tables: Collection[str],
    mv_name: str,
    extra_functions: Iterable[str] = (),
) -> None:
    """Check Spark's parse of ``query`` (step 1 above); raises QueryRefused. A text accepted once
    for the same tables, MV, functions and parser confs is not walked again: the walk is a few py4j
    calls per plan node (0.3-0.7 s a query on a loaded machine), and a run checks one text once per
    term of its delta rules, each run again."""
    _parsed_once(session, query, tables, mv_name, extra_functions, _parser_confs(session))


def _parsed_once(
    session: SparkSession,
    query: str,
    tables: Collection[str],
    mv_name: str,
    extra_functions: Iterable[str],
    parser_confs: tuple[str | None, ...],
) -> None:
    names = allowed_functions(extra_functions)
    wanted = {t.lower() for t in tables}
    if mv_name.lower() in wanted:
        raise QueryRefused(f"the query reads the MV's own table {mv_name}")
    memo = (query, frozenset(wanted), mv_name.lower(), names, parser_confs)
    _checked_once(_accepted, memo, lambda: _check_parse(session, query, wanted, mv_name, names))


def _check_parse(
    session: SparkSession, query: str, wanted: set[str], mv_name: str, names: frozenset[str]
) -> None:
    jvm_session: Any = session._jsparkSession  # noqa: SLF001 - Spark's parser has no Python API
    try:
        plan = jvm_session.sessionState().sqlParser().parsePlan(query)
    except (Py4JError, PySparkException) as error:
        raise _parse_refusal(error) from error
    relations: list[str] = []
    ctes: set[str] = set()
    for node, kind, name in _walk(session, plan):
        _check_node(node, kind, name, names)
        if name == "UnresolvedRelation":
            relations.append(_dotted(node.multipartIdentifier()))
        elif name == "UnresolvedWith":
            ctes.update(_cte_names(node))
    for relation in relations:
        _check_relation(relation, wanted, ctes, mv_name)


def check_expression(session: SparkSession, text: str, *, extra_functions: Iterable[str] = ()) -> None:
    """Check Spark's parse of one expression of an MV query (e.g. its WHERE, applied on its own).
    An expression accepted once under the same functions and parser confs is not walked again (a
    FAST run checks its expressions each run: ~200 py4j calls of TPC-H Q6's ~1,000)."""
    names = allowed_functions(extra_functions)
    memo = (text, names, _parser_confs(session))
    _checked_once(_expressions, memo, lambda: _check_expression(session, text, names))


def _check_expression(session: SparkSession, text: str, names: frozenset[str]) -> None:
    jvm_session: Any = session._jsparkSession  # noqa: SLF001
    try:
        root = jvm_session.sessionState().sqlParser().parseExpression(text)
    except (Py4JError, PySparkException) as error:
        raise _parse_refusal(error) from error
    for node, kind, name in _walk(session, root, kind="expression"):
        _check_node(node, kind, name, names)


def _check_analyzed(
    session: SparkSession, frame: DataFrame, tables: Collection[str], names: frozenset[str]
) -> None:
    wanted = {t.lower() for t in tables}
    user_defined = _java_class(session, _USER_DEFINED)
    plan = frame._jdf.queryExecution().analyzed()  # noqa: SLF001
    for node, kind, name in _walk(session, plan, stop_at_views=wanted):
        if kind == "plan":
            if name in _REFUSED_PLANS or name.endswith("ScriptTransformation"):
                raise QueryRefused(_REFUSED_PLANS.get(name, _REFUSED_PLANS["ScriptTransformation"]))
            if name == "View" and not (node.isTempView() and _view_name(node) in wanted):
                raise QueryRefused(f"the query reads {_view_name(node)}, which is not one of its base tables")
            if node.children().isEmpty() and name not in _LEAVES:
                raise QueryRefused(f"the query reads from {name}; MVs read warehouse tables only")
        elif name in _REFUSED_EXPRESSIONS:
            raise QueryRefused(f"{name}: {_REFUSED_EXPRESSIONS[name]}")
        elif "UDF" in name or "UDAF" in name or user_defined.isInstance(node):
            udf = _udf_name(node)
            if udf is None or udf.lower() not in names:  # only a UDF the operator allowed by name
                raise QueryRefused(refusal(udf or name))


def _walk(
    session: SparkSession, root: Any, stop_at_views: Collection[str] = (), kind: str = "plan"
) -> Iterator[tuple[Any, str, str]]:
    """(node, "plan" | "expression", simple class name) for every node under ``root``, depth first,
    into expressions, subquery plans, CTE definitions and WINDOW clauses; not below a temp ``View``
    whose name is in ``stop_at_views`` (the run's pinned base data, built by us)."""
    subquery = _java_class(session, _SUBQUERY)
    stack: list[tuple[Any, str]] = [(root, kind)]
    seen = 0
    while stack:
        node, kind = stack.pop()
        seen += 1
        if seen > _MAX_NODES:
            raise QueryRefused("query is too large or nests too deeply")
        name = str(node.getClass().getSimpleName())
        yield node, kind, name
        if kind == "plan":
            if name == "View" and stop_at_views and _view_name(node) in stop_at_views:
                continue
            stack.extend((child, "plan") for child in _items(node.children()))
            stack.extend((e, "expression") for e in _items(node.expressions()))
            if name == "UnresolvedWith":
                stack.extend((pair._2(), "plan") for pair in _items(node.cteRelations()))
            elif name == "WithWindowDefinition":
                stack.extend((spec, "expression") for spec in _items(node.windowDefinitions().values()))
        else:
            stack.extend((child, "expression") for child in _items(node.children()))
            if subquery.isInstance(node):
                stack.append((node.plan(), "plan"))


def _check_node(node: Any, kind: str, name: str, names: frozenset[str]) -> None:
    """One node of a parsed (unresolved) plan or expression."""
    if kind == "plan":
        _check_plan_node(node, name)
    elif name == "UnresolvedFunction":
        function = _dotted(node.nameParts())
        if "." in function:
            raise QueryRefused(f"qualified function name {function} is not allowed")
        if function.lower() not in names:
            raise QueryRefused(refusal(function))
    elif name in _REFUSED_EXPRESSIONS:
        raise QueryRefused(_REFUSED_EXPRESSIONS[name])


def _check_plan_node(node: Any, name: str) -> None:
    if name in _REFUSED_PLANS:
        raise QueryRefused(_REFUSED_PLANS[name])
    if name == "Generate":
        raise QueryRefused(
            "LATERAL VIEW is not allowed; call generators such as explode() in the SELECT list"
        )
    if name not in _PLAN_NODES:
        raise QueryRefused(f"{name} is not allowed in an MV query")


def _check_relation(relation: str, wanted: set[str], ctes: set[str], mv_name: str) -> None:
    if "." in relation:
        if "/" in relation or ":" in relation:
            raise QueryRefused(
                f"reading files by path ({relation}) is not allowed; MVs read warehouse tables"
            )
        raise QueryRefused(f"qualified table name {relation} is not allowed; name warehouse tables directly")
    if relation.lower() == mv_name.lower():
        raise QueryRefused(f"the query reads the MV's own table {mv_name}")
    if relation.lower() not in wanted and relation.lower() not in ctes:
        raise QueryRefused(f"the query reads {relation}, which is not one of its base tables")


def _parse_refusal(error: Exception) -> QueryRefused:
    text = str(error)
    if "StackOverflowError" in text or "TOO_COMPLEX" in text:
        return QueryRefused("query nests too deeply (parentheses, subqueries or expressions)")
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)
    return QueryRefused(f"Spark cannot parse the query: {first[:300]}")


def _udf_name(node: Any) -> str | None:
    """The registered name of a user-defined expression (PythonUDF ``name``, ScalaUDF ``udfName``)."""
    for getter in ("name", "udfName"):
        try:
            value = getattr(node, getter)()
        except Py4JError:
            continue
        if not isinstance(value, str):  # a Scala Option
            value = value.getOrElse(None) if value is not None and not value.isEmpty() else None
        if isinstance(value, str):
            return value
    return None


def _items(seq: Any) -> Iterator[Any]:
    """The elements of a Scala collection (py4j gives no Python iteration)."""
    iterator = seq.iterator()
    while iterator.hasNext():
        yield iterator.next()


def _dotted(parts: Any) -> str:
    return str(parts.mkString("."))


def _cte_names(node: Any) -> set[str]:
    return {str(pair._1()).lower() for pair in _items(node.cteRelations())}


def _view_name(view: Any) -> str:
    return str(view.desc().identifier().table()).lower()


def _java_class(session: SparkSession, name: str) -> Any:
    return session.sparkContext._jvm.java.lang.Class.forName(name)  # type: ignore[union-attr]  # noqa: SLF001
