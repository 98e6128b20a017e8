"""EXPLAIN before CREATE: what an MV would be, without creating anything (``mvs explain``, ``POST
/explain``).

The statement is parsed by the DDL front end and its query analysed exactly as the coordinator
analyses it when it accepts the CREATE (``workers.ddl.analysis.analyze_mv_query``, the base tables'
columns from their Delta logs). The answer says whether runs can be incremental (FAST) and, if not,
why and where in the statement; the plan (kind, inputs, keys, aggregates) and the rule each part uses;
the MV logs the bases still need; and the helper state the MV would keep. Reads the warehouse's Delta
logs only: no Kafka, no Spark.
"""

from __future__ import annotations

import json
from typing import Any

from typing_extensions import TypedDict

from workers import warehouse
from workers.catalog.errors import MvsError
from workers.config import Settings
from workers.ddl import DdlSyntaxError, FastRefreshPlan, parse_statement
from workers.ddl.analysis import analyze_mv_query
from workers.ddl.query import QueryInfo
from workers.ddl.tree.counted import MIN_ROWS_PER_KEY
from workers.ddl.tree.values import Scan, label, tree_from_json

# The incremental rule of each FAST plan kind, "operator: rule" (the code: ``workers.jobs.fast.kinds``).
RULES: dict[str, str] = {
    "projection": "filter/project: the change rows run through the query; appended when the bases "
    "only appended, else one MERGE matching MV rows by value (duplicates counted)",
    "aggregate": "aggregate: per-group deltas from the signed change rows, one MERGE keyed by the "
    "GROUP BY touching only the changed groups; a MIN/MAX that loses its extreme recomputes its group",
    "aggregate_having": "aggregate + HAVING: the groups the change rows reach are recomputed at the "
    "pinned version and written, replaced or removed by one MERGE keyed by the group",
    "join_projection": "inner join: Δ(A ⋈ B) = ΔA ⋈ B_old + A_new ⋈ ΔB over signed rows (each "
    "side's change rows joined with the other side), one MERGE matching MV rows by value",
    "join_aggregate": "join + aggregate: the join's signed change rows grouped into per-group deltas, "
    "one MERGE keyed by the GROUP BY",
    "join_aggregate_having": "join + aggregate + HAVING: the groups the join's change rows reach are "
    "recomputed over the join at the pinned versions, one MERGE keyed by the group",
    "union_projection": "UNION ALL: each branch's change rows through its projection (the union of "
    "the branches' changes), appended or merged by value",
    "top_n": "ORDER BY … LIMIT: the query without them kept FAST in a helper table (<mv>__mvtopn, by "
    "the rules below), the MV rewritten as its top n where they differ",
}
FLOATING = frozenset({"double", "float"})


class PositionJson(TypedDict):
    offset: int  # 0-based, in the statement
    line: int
    column: int


class BaseTableJson(TypedDict):
    table: str
    exists: bool
    mv_log: bool


class PlanJson(TypedDict):
    kind: str
    base_tables: list[str]
    keys: list[str]  # GROUP BY columns, or a join's equalities
    aggregates: list[str]
    where: str | None
    rules: list[str]  # "operator: rule" lines


class HelperStateJson(TypedDict):
    table: str
    why: list[str]


class ExplainJson(TypedDict):
    name: str | None
    refresh_mode: str | None
    accepted: bool  # a CREATE of this text would pass the DDL checks made here
    error: str | None
    error_position: PositionJson | None
    fast: bool
    fast_reason: str | None
    fast_position: PositionJson | None
    runs: str  # what a refresh run would do, by the refresh mode
    plan: PlanJson | None
    base_tables: list[BaseTableJson]
    mv_logs_needed: list[str]
    helper_state: HelperStateJson | None
    key_counts: HelperStateJson | None  # its semi / anti joins' (and COUNTed LEFT JOINs') rows per key


def explain(settings: Settings, statement: str) -> ExplainJson:
    """EXPLAIN ``statement`` (a CREATE MATERIALIZED VIEW); never raises for bad input: a statement
    that would be refused says so in ``error`` (and ``error_position``)."""
    try:
        event = parse_statement(statement)
    except DdlSyntaxError as problem:
        return _refused(statement, str(problem), problem.position)
    if event["action"] != "CREATE_MV":
        return _refused(statement, "EXPLAIN takes a CREATE MATERIALIZED VIEW statement", 0)
    spec = event["mv"]
    try:
        info = analyze_mv_query(spec["query"], lambda table: warehouse.table_columns(settings, table))
    except MvsError as problem:
        return _refused(statement, problem.message, None, name=event["name"], mode=spec["refresh_mode"])
    return _explained(settings, statement, event["name"], spec["refresh_mode"], spec["query"], info)


def _explained(
    settings: Settings, statement: str, name: str, mode: str, query: str, info: QueryInfo
) -> ExplainJson:
    plan = info.fast_refresh
    bases = [
        BaseTableJson(table=t, exists=warehouse.table_exists(settings, t), mv_log=_has_mv_log(settings, t))
        for t in info.base_tables
    ]
    fast_position = None
    if plan is None and info.fast_position is not None:
        fast_position = _position(statement, statement.find(query) + info.fast_position)
    missing = [b["table"] for b in bases if not b["exists"]]
    return {
        "name": name,
        "refresh_mode": mode,
        "accepted": not missing,
        "error": f"base table {', '.join(missing)} does not exist" if missing else None,
        "error_position": None,
        "fast": plan is not None,
        "fast_reason": None if plan is not None else info.fast_reason,
        "fast_position": fast_position,
        "runs": _runs(mode, plan is not None),
        "plan": _plan_json(plan) if plan is not None else None,
        "base_tables": bases,
        "mv_logs_needed": [b["table"] for b in bases if not b["mv_log"]] if plan is not None else [],
        "helper_state": _helper_state(settings, name, plan) if plan is not None else None,
        "key_counts": _key_counts(name, plan) if plan is not None else None,
    }


def _refused(
    statement: str, error: str, position: int | None, *, name: str | None = None, mode: str | None = None
) -> ExplainJson:
    return {
        "name": name,
        "refresh_mode": mode,
        "accepted": False,
        "error": error,
        "error_position": None if position is None else _position(statement, position),
        "fast": False,
        "fast_reason": None,
        "fast_position": None,
        "runs": "nothing: the statement would be refused",
        "plan": None,
        "base_tables": [],
        "mv_logs_needed": [],
        "helper_state": None,
        "key_counts": None,
    }


def _position(statement: str, offset: int) -> PositionJson:
    before = statement[:offset]
    return {"offset": offset, "line": before.count("\n") + 1, "column": offset - (before.rfind("\n") + 1) + 1}


def _runs(mode: str, fast: bool) -> str:
    if mode == "COMPLETE":
        return "COMPLETE: every run recomputes the query"
    if not fast:
        return "COMPLETE: every run recomputes (no incremental plan)"
    recompute = "recomputing only for the first build or when the change data was purged"
    if mode == "FAST":
        return f"FAST: every run applies the MV logs' change rows, {recompute}"
    return (
        "FORCE: each run takes the cheaper of FAST and COMPLETE by its estimated cost (a bulk change "
        f"recomputes), {recompute}"
    )


def _plan_json(plan: FastRefreshPlan) -> PlanJson:
    top_n = plan.top_n
    if top_n is not None:  # the inner plan, and the top-N's rule before its own
        inner = _plan_json(top_n.inner)
        top = f"{RULES['top_n']} (ORDER BY {top_n.order_by} LIMIT {top_n.limit})"
        return {**inner, "kind": plan.kind, "rules": [top, *inner["rules"]]}
    keys = list(plan.group_by) or [
        f"{k.left_table}.{k.left_column} = {k.right_table}.{k.right_column}" for k in plan.join_keys
    ]
    aggregates = [f"{a.function}({a.argument or a.column or '*'}) AS {a.name}" for a in plan.aggregates]
    rules = [RULES.get(plan.kind, f"{plan.kind}: incremental")]
    if plan.tree is not None:  # an operator tree describes itself, one line per operator
        rules = tree_from_json(plan.tree).describe()
    return {
        "kind": plan.kind,
        "base_tables": list(plan.base_tables),
        "keys": keys,
        "aggregates": aggregates,
        "where": plan.where,
        "rules": rules,
    }


def _has_mv_log(settings: Settings, table: str) -> bool:
    return warehouse.table_exists(settings, warehouse.mlog_table_name(table))


def _helper_state(settings: Settings, name: str, plan: FastRefreshPlan) -> HelperStateJson | None:
    """The helper state an aggregate MV keeps (docs/ARCHITECTURE.md, "Helper state of aggregate MVs"):
    when what the MV shows cannot carry its refresh (a top-N MV: its inner rows table's)."""
    if plan.top_n is not None:
        return _helper_state(settings, warehouse.top_n_table_name(name), plan.top_n.inner)
    if not plan.aggregates:
        return None
    why = []
    if plan.group_by and not any(a.function == "COUNT" and a.column is None for a in plan.aggregates):
        why.append("a row count per group: no COUNT(*) shows that a group vanished")
    floating = _floating_columns(settings, plan.base_tables)
    for a in plan.aggregates:
        if a.function == "AVG":
            why.append(f"{a.name}: AVG keeps its group's exact sum and count")
        elif a.function == "SUM" and a.argument is None and a.column in floating:
            why.append(f"{a.name}: SUM of floating-point {a.column} keeps its exact sum")
    return {"table": warehouse.state_table_name(name), "why": why} if why else None


def _key_counts(name: str, plan: FastRefreshPlan) -> HelperStateJson | None:
    """The key counts an MV with counted semi / anti joins or LEFT JOINs keeps
    (``TreePlan.counted_inputs``)."""
    if plan.top_n is not None:
        return _key_counts(warehouse.top_n_table_name(name), plan.top_n.inner)
    counted = tree_from_json(plan.tree).counted_inputs() if plan.tree is not None else []
    if not counted:
        return None
    why = [
        f"{keyed.operator} on {node.table if isinstance(node, Scan) else label(node)}: its matching "
        f"rows counted per {keyed.column}"
        for keyed, node in counted
    ]
    why.append(
        "counted by the first FAST run that finds a matching row (again after a complete refresh) and "
        f"kept where they average {MIN_ROWS_PER_KEY} or more rows a key in a local warehouse; else "
        "declined until the query changes: runs recompute the rows the change reaches by key"
    )
    return {"table": warehouse.key_counts_table_name(name), "why": why}


def _floating_columns(settings: Settings, tables: tuple[str, ...]) -> set[str]:
    """Columns of ``tables`` of a floating-point type, by their Delta schemas (unreadable: none)."""
    found: set[str] = set()
    for table in tables:
        version = warehouse.latest_version(settings, table)
        summary = warehouse.table_summary(settings, table, version) if version is not None else None
        schema: Any = ((summary or {}).get("metadata") or {}).get("schemaString")
        try:
            fields = json.loads(schema)["fields"] if isinstance(schema, str) else []
        except (ValueError, KeyError, TypeError):
            continue
        found.update(str(f["name"]).lower() for f in fields if f.get("type") in FLOATING)
    return found


def explain_text(answer: ExplainJson) -> str:
    """``mvs explain``'s answer for a person."""
    if answer["error"] is not None and answer["plan"] is None and not answer["base_tables"]:
        at = answer["error_position"]
        where = f" (line {at['line']}, column {at['column']})" if at is not None else ""
        return f"REFUSED{where}: {answer['error']}"
    lines = [f"materialized view {answer['name']} (REFRESH {answer['refresh_mode']})"]
    if answer["error"] is not None:
        lines.append(f"REFUSED: {answer['error']}")
    if answer["fast"]:
        lines.append("incremental: yes (FAST)")
    else:
        at = answer["fast_position"]
        where = f" at line {at['line']}, column {at['column']}" if at is not None else ""
        lines.append(f"incremental: no{where}: {answer['fast_reason']}")
    lines.append(f"runs: {answer['runs']}")
    plan = answer["plan"]
    if plan is not None:
        lines.append(f"plan: {plan['kind']} over {', '.join(plan['base_tables'])}")
        if plan["keys"]:
            lines.append(f"  keys: {', '.join(plan['keys'])}")
        if plan["aggregates"]:
            lines.append(f"  aggregates: {', '.join(plan['aggregates'])}")
        if plan["where"]:
            lines.append(f"  where: {plan['where']}")
        lines += [f"  rule: {rule}" for rule in plan["rules"]]
    for base in answer["base_tables"]:
        log = "missing" if not base["exists"] else ("MV log" if base["mv_log"] else "no MV log")
        lines.append(f"base {base['table']}: {log}")
    if answer["mv_logs_needed"]:
        needed = ", ".join(f"CREATE MATERIALIZED VIEW LOG ON {t}" for t in answer["mv_logs_needed"])
        lines.append(f"needs: {needed} (until then every run recomputes)")
    helper = answer["helper_state"]
    kept = f"{helper['table']} ({'; '.join(helper['why'])})" if helper is not None else "none"
    lines.append(f"helper state: {kept}")
    counts = answer["key_counts"]
    if counts is not None:
        lines.append(f"key counts: {counts['table']} ({'; '.join(counts['why'])})")
    return "\n".join(lines)
