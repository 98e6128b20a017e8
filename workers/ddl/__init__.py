"""`mvs sql` DDL front end: statements → DdlEvent dicts, and MV query analysis.

This is the only package that imports sqlglot; everything else sees plain dicts and dataclasses.
"""

from workers.ddl.alter import apply_alter
from workers.ddl.errors import DdlError, DdlSyntaxError, InvalidQueryError
from workers.ddl.parser import parse_statement
from workers.ddl.plan import (
    AggregateItem,
    FastRefreshPlan,
    QueryPlan,
    SelectItem,
    plan_from_record,
    plan_record,
)
from workers.ddl.query import QueryInfo, analyze_query, query_output_columns

__all__ = [
    "AggregateItem",
    "DdlError",
    "DdlSyntaxError",
    "FastRefreshPlan",
    "InvalidQueryError",
    "QueryInfo",
    "QueryPlan",
    "SelectItem",
    "analyze_query",
    "apply_alter",
    "parse_statement",
    "plan_from_record",
    "plan_record",
    "query_output_columns",
]
