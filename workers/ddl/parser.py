"""`mvs sql` statements → DdlEvent dicts (grammar in docs/GRAMMAR.md).

The statement head is parsed here by recursive descent over ``workers.ddl.lexer``; the SELECT body after
``AS`` is handed unchanged to ``workers.ddl.query`` (sqlglot, Spark dialect).
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from workers.catalog.names import MLOG_SUFFIX
from workers.catalog.names import NAME_RE as _NAME_RE
from workers.catalog.specs import DOWNSTREAM, EVERY, TARGET_LAG
from workers.ddl.errors import DdlSyntaxError, InvalidQueryError
from workers.ddl.lexer import Kind, Lexer, Token
from workers.ddl.query import QueryInfo, analyze_query

SCHEMA_VERSION = 1  # of DdlEvent: the coordinator refuses events of any other version
MODES = ("COMPLETE", "FAST", "FORCE")
DEFAULT_MODE = "FORCE"
DEFAULT_INTERVAL_MS = 60_000  # EVERY 1 MINUTE, also the default MV-log purge interval
DEFAULT_PURGE_INTERVAL_MS = DEFAULT_INTERVAL_MS

UNIT_MS = {
    "SECOND": 1_000,
    "MINUTE": 60_000,
    "HOUR": 3_600_000,
    "DAY": 86_400_000,
}
_UNITS_HINT = "SECOND(S), MINUTE(S), HOUR(S) or DAY(S)"
_MAX_LONG = 2**63 - 1  # interval_ms is an Avro long
# Unquoted words that would make a statement read ambiguously if used as a name.
_RESERVED = frozenset(
    {
        "AS",
        "REFRESH",
        "EVERY",
        "ON",
        "TARGET",
        "PURGE",
        "SELECT",
        "WITH",
        "FROM",
        "IF",
        "PAUSE",
        "RESUME",
        "CANCEL",
        "MATERIALIZED",
        "VIEW",
    }
)
_STATEMENT_STARTS = "CREATE, ALTER, DROP, REFRESH or CANCEL"


def default_trigger() -> dict[str, Any]:
    return {"kind": EVERY, "interval_ms": DEFAULT_INTERVAL_MS}


@dataclass(frozen=True)
class _Parsed:
    action: str
    name: str
    mv: dict[str, Any] | None = None
    mv_log: dict[str, Any] | None = None
    # Whether ALTER spelled out the mode / trigger / freshness: MvSpec cannot say "unchanged"
    # (see apply_alter).
    mode_given: bool = False
    trigger_given: bool = False
    freshness_given: bool = False
    cascade: bool | None = None  # DROP MATERIALIZED VIEW … CASCADE


class _NotGiven:
    """A clause the statement did not write (FRESHNESS NONE, by contrast, is a given None)."""


NOT_GIVEN = _NotGiven()


def _mv_change(
    action: str, name: str, query: str, tables: list[str], mode: str | None, trigger: Any, freshness: Any
) -> _Parsed:
    """A CREATE_MV / ALTER_MV: its MvSpec (defaults for what was not written) and what was written."""
    mv: dict[str, Any] = {"query": query, "refresh_mode": mode or DEFAULT_MODE, "base_tables": tables}
    mv["trigger"] = trigger or default_trigger()
    given = not isinstance(freshness, _NotGiven)
    if given:  # an MvSpec field since FRESHNESS: absent is null
        mv["freshness_ms"] = freshness
    return _Parsed(action, name, mv, None, mode is not None, bool(trigger), given)


def parse_statement(
    sql: str, *, issued_by: str = "mvs", now_ms: int | None = None, event_id: str | None = None
) -> dict[str, Any]:
    """Parse one statement into a DdlEvent dict; raises ``DdlSyntaxError`` for any problem in it.

    For CREATE MATERIALIZED VIEW the query is validated too (errors point into the query).
    ALTER_MV events carry ``mv.query == ""`` and ``mv.base_tables == []`` meaning "query unchanged";
    a mode or trigger the statement did not mention holds the default, so apply it with ``apply_alter``.
    """
    parsed = _Parser(sql).statement()
    return {
        "schema_version": SCHEMA_VERSION,
        "event_id": event_id if event_id is not None else uuid.uuid4().hex,
        "issued_at": now_ms if now_ms is not None else int(time.time() * 1000),
        "issued_by": issued_by,
        "action": parsed.action,
        "name": parsed.name,
        "mv": parsed.mv,
        "mv_log": parsed.mv_log,
        "sql": sql,
        "cascade": parsed.cascade,
    }


def given_clauses(sql: str) -> tuple[bool, bool, bool]:
    """Whether ALTER statement ``sql`` spells out (its refresh mode, its trigger, its freshness)."""
    parsed = _Parser(sql).statement()
    return parsed.mode_given, parsed.trigger_given, parsed.freshness_given


class _Parser:
    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.lex = Lexer(sql)

    # -- helpers ---------------------------------------------------------------------------------

    def error(self, message: str, at: Token | int) -> DdlSyntaxError:
        return DdlSyntaxError(message, at if isinstance(at, int) else at.pos, self.sql)

    def accept(self, *words: str) -> Token | None:
        if self.lex.peek().is_word(*words):
            return self.lex.next()
        return None

    def expect(self, word: str, context: str) -> Token:
        token = self.lex.next()
        if not token.is_word(word):
            raise self.error(f"expected {word} {context}, found {token.describe()}", token)
        return token

    def mv_keywords(self, after: str) -> None:
        self.expect("MATERIALIZED", f"after {after}")
        self.expect("VIEW", f"after {after} MATERIALIZED")

    def at_log_on(self, trigger_may_follow: bool) -> bool:
        """``LOG ON <table>`` (an MV log) versus an MV that happens to be called ``log``."""
        first, second = self.lex.peek(), self.lex.peek(1)
        if not (first.is_word("LOG") and second.is_word("ON")):
            return False
        if trigger_may_follow and self.lex.peek(2).is_word("CHANGE", "DEMAND"):
            return False  # CREATE MATERIALIZED VIEW log ON CHANGE AS ...
        self.lex.next()
        self.lex.next()
        return True

    def name(self, what: str) -> str:
        token = self.lex.next()
        if token.kind is Kind.WORD and token.upper == "IF":
            raise self.error("IF [NOT] EXISTS is not supported", token)
        if token.kind is Kind.WORD and token.upper in _RESERVED:
            raise self.error(
                f"expected a {what} name, found keyword {token.upper}; "
                "write it in backquotes to use it as a name",
                token,
            )
        if token.kind is Kind.NUMBER:
            word = re.match(r"[\w.]*", self.sql[token.pos :])
            shown = word.group(0) if word else token.text
            raise self.error(f"invalid {what} name '{shown}': names start with a letter or underscore", token)
        if token.kind not in (Kind.WORD, Kind.QUOTED):
            raise self.error(f"expected a {what} name, found {token.describe()}", token)
        if not _NAME_RE.fullmatch(token.text):
            raise self.error(
                f"invalid {what} name {token.describe()}: names start with a letter or underscore "
                "and contain only letters, digits and underscores",
                token,
            )
        if self.lex.peek().is_symbol("."):
            raise self.error("qualified names (db.name) are not supported", self.lex.peek())
        return token.text.lower()

    def end(self) -> None:
        while self.lex.peek().is_symbol(";"):
            self.lex.next()
        token = self.lex.peek()
        if token.kind is not Kind.END:
            raise self.error(f"unexpected {token.describe()} after the end of the statement", token)

    # -- statements ------------------------------------------------------------------------------

    def statement(self) -> _Parsed:
        token = self.lex.peek()
        if token.kind is Kind.END:
            raise self.error(f"empty statement; expected {_STATEMENT_STARTS}", token)
        handler = {
            "CREATE": self.create,
            "ALTER": self.alter,
            "DROP": self.drop,
            "REFRESH": self.refresh,
            "CANCEL": self.cancel,
        }.get(token.upper)
        if handler is None:
            raise self.error(f"expected {_STATEMENT_STARTS}, found {token.describe()}", token)
        self.lex.next()
        parsed = handler()
        if parsed.action != "CREATE_MV":  # CREATE MV ends with the query, which sqlglot checked
            self.end()
        return parsed

    def create(self) -> _Parsed:
        self.mv_keywords("CREATE")
        if self.at_log_on(trigger_may_follow=True):
            return self.create_log()
        name_token = self.lex.peek()
        name = self.name("materialized view")
        if name.endswith(MLOG_SUFFIX):
            raise self.error(f"names ending in {MLOG_SUFFIX} are reserved for MV logs", name_token)
        mode, trigger = self.refresh_options(required=False)
        freshness = self.freshness()
        as_token = self.lex.next()
        if not as_token.is_word("AS"):
            if as_token.is_word("SELECT", "WITH", "FROM"):
                raise self.error(f"missing AS before the query (found {as_token.upper})", as_token)
            expected = "AS" if trigger else "AS or a schedule (EVERY, ON CHANGE, ON DEMAND, TARGET LAG)"
            if mode is None and trigger is None:
                expected = "REFRESH, " + expected
            raise self.error(f"expected {expected}, found {as_token.describe()}", as_token)
        query, info, query_pos = self.query(as_token.end)
        if name in info.base_tables:
            raise self.error(f"materialized view {name} cannot read from itself", query_pos)
        # Without the tables' columns (the coordinator reads them) a join's unqualified columns stay
        # unresolved here: the coordinator decides then.
        if mode == "FAST" and info.fast_refresh is None and not info.fast_needs_columns:
            raise self.error(
                f"REFRESH FAST is not possible for this query: {info.fast_reason}; "
                "use REFRESH COMPLETE or REFRESH FORCE",
                query_pos + (info.fast_position or 0),
            )
        return _mv_change("CREATE_MV", name, query, list(info.base_tables), mode, trigger, freshness)

    def query(self, start: int) -> tuple[str, QueryInfo, int]:
        """The query text after AS (trailing ';' dropped), its analysis, and where it starts."""
        body = self.sql[start:]
        begin = start + len(body) - len(body.lstrip())
        text = body.strip()
        while text.endswith(";"):
            text = text[:-1].rstrip()
        if not text:
            raise self.error("expected a query after AS", len(self.sql))
        try:
            info = analyze_query(text)
        except InvalidQueryError as problem:
            raise self.error(problem.message, begin + (problem.position or 0)) from problem
        return text, info, begin

    def create_log(self) -> _Parsed:
        table_token = self.lex.peek()
        table = self.name("table")
        if table.endswith(MLOG_SUFFIX):
            raise self.error(f"{table} is itself an MV log table", table_token)
        purge_ms = DEFAULT_PURGE_INTERVAL_MS
        if self.accept("PURGE"):
            if self.accept("EVERY"):
                purge_ms = self.interval("PURGE EVERY")
            elif self.accept("REPEAT"):
                self.expect("INTERVAL", "after PURGE REPEAT")
                purge_ms = self.interval("PURGE REPEAT INTERVAL")
            else:
                token = self.lex.peek()
                raise self.error(
                    f"expected EVERY or REPEAT INTERVAL after PURGE, found {token.describe()}", token
                )
        return _Parsed("CREATE_MV_LOG", table, mv_log={"base_table": table, "purge_interval_ms": purge_ms})

    def alter(self) -> _Parsed:
        self.mv_keywords("ALTER")
        if self.lex.peek().is_word("LOG") and self.lex.peek(1).is_word("ON"):
            raise self.error("an MV log cannot be altered; drop it and create it again", self.lex.peek())
        name = self.name("materialized view")
        token = self.lex.peek()
        if token.is_word("PAUSE", "RESUME"):
            self.lex.next()
            return _Parsed(token.upper, name)
        if token.is_word("CANCEL"):
            self.lex.next()
            self.accept("REFRESH")
            return _Parsed("CANCEL", name)
        if not token.is_word("REFRESH", "EVERY", "ON", "TARGET", "FRESHNESS"):
            raise self.error(
                "expected REFRESH, a schedule (EVERY, ON CHANGE, ON DEMAND, TARGET LAG), FRESHNESS, PAUSE, "
                f"RESUME or CANCEL after the view name, found {token.describe()}",
                token,
            )
        mode, trigger = self.refresh_options(required=not token.is_word("FRESHNESS"))
        freshness = self.freshness()
        return _mv_change("ALTER_MV", name, "", [], mode, trigger, freshness)  # "" = query unchanged

    def drop(self) -> _Parsed:
        self.mv_keywords("DROP")
        if self.at_log_on(trigger_may_follow=False):
            return _Parsed("DROP_MV_LOG", self.name("table"))
        name = self.name("materialized view")
        # CASCADE: the MVs reading it go too (without it, a DROP of an MV others read is refused).
        return _Parsed("DROP_MV", name, cascade=True if self.accept("CASCADE") else None)

    def refresh(self) -> _Parsed:
        self.mv_keywords("REFRESH")
        return _Parsed("REFRESH", self.name("materialized view"))

    def cancel(self) -> _Parsed:
        self.expect("REFRESH", "after CANCEL")
        self.mv_keywords("CANCEL REFRESH")
        return _Parsed("CANCEL", self.name("materialized view"))

    # -- refresh clauses -------------------------------------------------------------------------

    def refresh_options(self, *, required: bool) -> tuple[str | None, dict[str, Any] | None]:
        """``[REFRESH [mode]] [trigger]``; after a bare REFRESH a mode or trigger must follow."""
        mode: str | None = None
        refresh = self.accept("REFRESH")
        if refresh is not None:
            mode_token = self.accept(*MODES)
            mode = mode_token.upper if mode_token else None
        trigger = self.trigger()
        if (refresh is not None or required) and mode is None and trigger is None:
            token = self.lex.peek()
            raise self.error(
                f"expected COMPLETE, FAST, FORCE or a schedule after REFRESH, found {token.describe()}", token
            )
        return mode, trigger

    def freshness(self) -> int | None | _NotGiven:
        """``[FRESHNESS interval | FRESHNESS NONE]``: the goal in ms, None (NONE), or NOT_GIVEN."""
        if self.accept("FRESHNESS") is None:
            return NOT_GIVEN
        return None if self.accept("NONE") else self.interval("FRESHNESS")

    def trigger(self) -> dict[str, Any] | None:
        token = self.lex.peek()
        if token.is_word("EVERY"):
            self.lex.next()
            return {"kind": EVERY, "interval_ms": self.interval("EVERY")}
        if token.is_word("ON"):
            self.lex.next()
            what = self.lex.next()
            if what.is_word("CHANGE", "DEMAND"):
                return {"kind": f"ON_{what.upper}", "interval_ms": None}
            if what.is_word("COMMIT"):
                raise self.error("ON COMMIT is not supported; use ON CHANGE", what)
            raise self.error(f"expected CHANGE or DEMAND after ON, found {what.describe()}", what)
        if token.is_word("TARGET"):
            self.lex.next()
            self.expect("LAG", "after TARGET")
            if self.accept("DOWNSTREAM"):  # as often as the MVs reading it need (Snowflake's DOWNSTREAM)
                return {"kind": DOWNSTREAM, "interval_ms": None}
            return {"kind": TARGET_LAG, "interval_ms": self.interval("TARGET LAG")}
        if token.is_word("START", "NEXT"):
            raise self.error(f"{token.upper} is not supported; use EVERY <n> <unit>", token)
        return None

    def interval(self, context: str) -> int:
        """``[(] [INTERVAL] n unit [)]``; n and unit may also be quoted: ``'30 seconds'``, ``'5' DAY``."""
        paren = self.lex.peek().is_symbol("(")
        if paren:
            self.lex.next()
        self.accept("INTERVAL")
        token = self.lex.next()
        if token.kind is Kind.STRING:
            inner = Lexer(self.sql, token.pos + 1, token.end - 1)
            amount = self.amount(inner.next(), context)
            unit = inner.next()
            if unit.kind is Kind.END:
                unit = self.lex.next()  # Oracle style: INTERVAL '5' DAY
            else:
                extra = inner.next()
                if extra.kind is not Kind.END:
                    raise self.error(f"unexpected {extra.describe()} in the interval", extra)
        else:
            amount = self.amount(token, context)
            unit = self.lex.next()
        interval_ms = amount * self.unit_ms(unit)
        if interval_ms > _MAX_LONG:
            raise self.error("interval is too large", token)
        if paren:
            close = self.lex.next()
            if not close.is_symbol(")"):
                raise self.error(f"expected ) after the interval, found {close.describe()}", close)
        return interval_ms

    def amount(self, token: Token, context: str) -> int:
        if token.is_symbol("-"):
            raise self.error(f"the interval after {context} must be a positive whole number", token)
        if token.kind is not Kind.NUMBER:
            raise self.error(
                f"expected a number after {context} (e.g. {context} 5 MINUTES), found {token.describe()}",
                token,
            )
        if not token.text.isdigit():
            raise self.error(
                f"the interval after {context} must be a whole number, found {token.text}", token
            )
        amount = int(token.text)
        if amount == 0:
            raise self.error(f"the interval after {context} must be greater than zero", token)
        return amount

    def unit_ms(self, token: Token) -> int:
        word = token.upper
        singular = word[:-1] if word.endswith("S") else word
        if token.kind is Kind.WORD and singular in UNIT_MS:
            return UNIT_MS[singular]
        if token.kind is Kind.WORD:
            raise self.error(f"unknown interval unit {token.describe()}; use {_UNITS_HINT}", token)
        raise self.error(f"expected an interval unit ({_UNITS_HINT}), found {token.describe()}", token)
